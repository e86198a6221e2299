r"""Train a small CNN on a cifar10-npz dataset version with DistributedDataParallel.

Launched by torchrun, once per node, the same way on a cloud cluster and on one machine:

    torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR \
        --master_port=$MASTER_PORT --nproc_per_node=N cifar10_ddp.py --data DIR --out DIR

torchrun rewrites RANK and WORLD_SIZE for each worker to the global process rank and process count,
so the script only reads RANK, WORLD_SIZE and LOCAL_RANK. Rank 0 writes metrics.json and a checkpoint
(``checkpoints.py``: CHECKPOINT_DIR, a marker written last) after every epoch, and at the end model.pt
(the state) and mlflow-model/ (the same model as an MLflow model, ``mlflow_model.py``);
a retry the pipeline sets RESUME_FROM for resumes after the newest complete checkpoint. Rank 0
also prints progress lines (``progress.py``): ten in the course of each epoch and one at its end,
which the pipeline reads for the job's progress and ETA.

The test metrics it reports are those of the model it saves: the model standardises its input
with the statistics of the data it was trained on (buffers of its first layer, saved in model.pt),
and every rank scores rank 0's model (its BatchNorm statistics, which the ranks' last steps moved
apart), so evaluate_cifar10.py measures the same numbers on the same data.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkpoints
import numpy as np
import torch
import torch.distributed as dist
from atomic_io import write_atomically
from cifar10_model import IMAGE_SHAPE, NUM_CLASSES, build_model
from mlflow_model import save_mlflow_model
from progress import LoopProgress
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DATA_FORMAT = "cifar10-npz"
EVAL_BATCH_SIZE = 512
#: Test images the saved MLflow model carries as its input example (and infers its signature from).
MLFLOW_EXAMPLE_SIZE = 4


@dataclass(frozen=True)
class Dist:
    """This process's place in the job, as torchrun describes it."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Only one process writes files, so concurrent ranks never race on the same path."""
        return self.rank == 0


@dataclass(frozen=True)
class Split:
    """Images scaled to [0, 1], channels first [n, 3, 32, 32], with their labels."""

    images: torch.Tensor
    labels: torch.Tensor


@dataclass(frozen=True)
class Dataset:
    """A version's splits and the per-channel statistics of its training images."""

    train: Split
    test: Split
    mean: torch.Tensor
    std: torch.Tensor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the CLI; data and output default to env vars so a job spec can set them once."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=os.environ.get("DATA_DIR"), help="dataset dir (default: $DATA_DIR)")
    parser.add_argument(
        "--out", default=os.environ.get("OUTPUT_DIR"), help="output dir (default: $OUTPUT_DIR)"
    )
    parser.add_argument("--epochs", type=int, default=2, help="total epochs, including resumed ones")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size per process")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and shuffling")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (or set DATA_DIR)")
    if not args.out:
        parser.error("--out is required (or set OUTPUT_DIR)")
    if args.epochs < 1 or args.batch_size < 1 or args.threads < 1:
        parser.error("--epochs, --batch-size and --threads must be at least 1")
    return args


def read_meta(data_dir: Path) -> dict[str, Any]:
    """Reject a missing or foreign dataset before any process group exists, so no rank hangs on it."""
    if not data_dir.is_dir():
        raise SystemExit(f"data dir {data_dir} does not exist")
    meta_path = data_dir / "meta.json"
    if not meta_path.is_file():
        raise SystemExit(
            f"data dir {data_dir} has no meta.json; is it an empty or unfinished dataset version?"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as error:
        raise SystemExit(f"{meta_path} is not valid JSON: {error}") from error
    if not isinstance(meta, dict) or meta.get("format") != DATA_FORMAT:
        raise SystemExit(f"{meta_path}: expected format {DATA_FORMAT!r}")
    if meta.get("image_shape") != list(IMAGE_SHAPE):
        raise SystemExit(
            f"{meta_path}: expected image_shape {list(IMAGE_SHAPE)}, got {meta.get('image_shape')}"
        )
    for key in ("train_samples", "test_samples"):
        if not isinstance(meta.get(key), int) or meta[key] < 1:
            raise SystemExit(f"{meta_path}: {key} must be a positive integer, got {meta.get(key)!r}")
    return meta


def read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Load one split file and check it has the layout the model is built for."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            images, labels = archive["images"], archive["labels"]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"{path}: cannot read images and labels ({error})") from error
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        raise SystemExit(
            f"{path}: images must be uint8 [n, 32, 32, 3], got {images.dtype} {list(images.shape)}"
        )
    if labels.shape != images.shape[:1]:
        raise SystemExit(f"{path}: labels shape {list(labels.shape)} does not match {len(images)} images")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise SystemExit(f"{path}: labels must lie in 0..{NUM_CLASSES - 1}")
    return images, labels.astype(np.int64)


def read_split(paths: list[Path], expected: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate a split's files and check the sample count against meta.json."""
    parts = [read_npz(path) for path in paths]
    images = np.concatenate([images for images, _ in parts])
    labels = np.concatenate([labels for _, labels in parts])
    if len(labels) != expected:
        raise SystemExit(f"{name}: meta.json promises {expected} samples, files hold {len(labels)}")
    return images, labels


def scale(images: np.ndarray) -> torch.Tensor:
    """Scale to [0, 1] and move channels first, as conv layers expect."""
    return torch.from_numpy((images.astype(np.float32) / 255.0).transpose(0, 3, 1, 2).copy())


def load_dataset(data_dir: Path) -> Dataset:
    """Load all train shards and the test split, with the training images' channel statistics."""
    meta = read_meta(data_dir)
    train_paths = sorted(data_dir.glob("train-*.npz"))
    if not train_paths:
        raise SystemExit(f"data dir {data_dir} has no train-*.npz shards")
    if not (data_dir / "test.npz").is_file():
        raise SystemExit(f"data dir {data_dir} has no test.npz")
    train_images, train_labels = read_split(train_paths, meta["train_samples"], "train")
    test_images, test_labels = read_split([data_dir / "test.npz"], meta["test_samples"], "test")
    train = Split(scale(train_images), torch.from_numpy(train_labels))
    test = Split(scale(test_images), torch.from_numpy(test_labels))
    mean = train.images.mean(dim=(0, 2, 3))
    std = train.images.std(dim=(0, 2, 3), unbiased=False).clamp(min=1e-6)
    return Dataset(train, test, mean, std)


def init_distributed() -> Dist:
    """Join the process group torchrun set up; NCCL needs GPUs, so CPU-only jobs use gloo."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if name not in os.environ]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}; launch this script with torchrun")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        backend, device = "nccl", torch.device("cuda", local_rank)
    else:
        backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return Dist(rank, world_size, local_rank, backend, device)


def _decode(files: dict[str, bytes]) -> dict[str, Any]:
    return torch.load(io.BytesIO(files["state.pt"]), map_location="cpu", weights_only=True)


def share_resume_state(env: Dist, out_dir: Path) -> dict[str, Any] | None:
    """Read the resume state on rank 0 and send it to every rank.

    Nodes need not share the output dir, and all ranks must agree on the start epoch or the
    collectives of the training loop would pair up wrongly and hang.
    """
    box = [checkpoints.resume(out_dir, _decode) if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def reduce_sums(env: Dist, *values: float) -> list[float]:
    """Sum a few scalars over all ranks, so every rank reports the same job-wide numbers."""
    totals = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return totals.tolist()


def train_epoch(
    env: Dist,
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    progress: LoopProgress,
) -> float:
    """Run one pass over this rank's share of the data; return the loss averaged over all ranks.

    Rank 0 reports its running loss in the course of the epoch (``progress.py``).
    """
    model.train()
    loader.sampler.set_epoch(epoch)
    loss_sum, count = 0.0, 0
    for step, (images, labels) in enumerate(loader, start=1):
        images, labels = images.to(env.device), labels.to(env.device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(labels)
        count += len(labels)
        if env.is_main:
            progress.step(epoch, step, train_loss=loss_sum / count)
    total_loss, total_count = reduce_sums(env, loss_sum, count)
    return total_loss / total_count


@torch.no_grad()
def evaluate(env: Dist, model: nn.Module, test: Split) -> tuple[float, float]:
    """Score rank 0's model, the one saved: a disjoint slice of the test set per rank, combined, so
    every sample counts once.

    The ranks share their weights, but each rank's last training steps moved its own BatchNorm
    running statistics (DDP sends rank 0's buffers before a forward, not after); scored as they
    are, each slice would measure a different model, and the job a number no saved model has.
    So every rank takes rank 0's buffers first.
    """
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    model.eval()
    indices = torch.arange(env.rank, len(test.labels), env.world_size)
    loss_sum, correct = 0.0, 0
    for batch in indices.split(EVAL_BATCH_SIZE):
        images, labels = test.images[batch].to(env.device), test.labels[batch].to(env.device)
        logits = model(images)
        loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(dim=1) == labels).sum().item()
    total_loss, total_correct = reduce_sums(env, loss_sum, correct)
    return total_loss / len(test.labels), total_correct / len(test.labels)


def make_loader(env: Dist, train: Split, batch_size: int, seed: int) -> DataLoader:
    """Give each rank an equal-sized shuffled share, so all ranks run the same number of steps."""
    dataset = TensorDataset(train.images, train.labels)
    sampler = DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def fit(env: Dist, args: argparse.Namespace, data: Dataset) -> None:
    """Train from the last checkpoint (or from scratch) up to --epochs, saving after each epoch."""
    out_dir = Path(args.out)
    train, test = data.train, data.test
    torch.manual_seed(args.seed)
    model = build_model(data.mean, data.std)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    resume = share_resume_state(env, out_dir)
    history = resume["history"] if resume else []
    resumes = resume["resumes"] if resume else []
    if resume:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
    model.to(env.device)
    ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if env.backend == "nccl" else None)
    start = resume["epoch"] + 1 if resume else 1
    if env.is_main:
        print(f"start world_size={env.world_size} backend={env.backend} start_epoch={start}", flush=True)
    loader = make_loader(env, train, args.batch_size, args.seed)
    progress = LoopProgress(steps_per_epoch=len(loader), epochs=args.epochs)
    for epoch in range(start, args.epochs + 1):
        began = time.perf_counter()
        train_loss = train_epoch(env, ddp, loader, optimizer, epoch, progress)
        test_loss, test_accuracy = evaluate(env, model, test)
        seconds = time.perf_counter() - began
        history.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
                "seconds": round(seconds, 3),
                "attempt": checkpoints.ATTEMPT,
            }
        )
        if env.is_main:
            print(
                f"epoch {epoch}/{args.epochs} train_loss={train_loss:.4f} test_loss={test_loss:.4f} "
                f"test_accuracy={test_accuracy:.4f} seconds={seconds:.2f}",
                flush=True,
            )
            progress.epoch_end(epoch, train_loss=train_loss, test_loss=test_loss, test_accuracy=test_accuracy)
            buffer = io.BytesIO()
            torch.save(
                {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer
            )
            metrics = {
                "world_size": env.world_size,
                "backend": env.backend,
                "epochs": history,
                "resumes": resumes,
            }
            checkpoints.save_epoch(out_dir, epoch, buffer.getvalue(), metrics)
    if env.is_main:
        write_atomically(out_dir / "model.pt", lambda handle: torch.save(model.state_dict(), handle))
        example = test.images[:MLFLOW_EXAMPLE_SIZE].numpy()
        save_mlflow_model(model, out_dir, example)


def main(argv: list[str] | None = None) -> None:
    """Entry point: validate data first, then train inside a process group that is always torn down."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        data = load_dataset(Path(args.data))
    except SystemExit as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(checkpoints.DATA_ERROR_EXIT) from None
    env = init_distributed()
    try:
        fit(env, args, data)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
