r"""Train a small ResNet on prepared tar shards with DistributedDataParallel, under torchrun or mpirun.

The bare-metal ImageNet recipe trains ResNet with Horovod started by mpirun (``arena submit
mpijob``). Here mpirun (or torchrun) only starts the processes and tells each its rank;
DistributedDataParallel does Horovod's gradient all-reduce. Both launchers run the same script:

    torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR \
        --master_port=$MASTER_PORT --nproc_per_node=N train_resnet.py --data DIR --out DIR
    mpirun -np P -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 -x DATA_DIR -x OUTPUT_DIR \
        python train_resnet.py

Under torchrun the rank comes from RANK, WORLD_SIZE and LOCAL_RANK and the rendezvous is torchrun's.
Under mpirun it comes from OMPI_COMM_WORLD_RANK, _SIZE and _LOCAL_RANK (the platform's per-node
RANK and WORLD_SIZE count nodes, not processes, and are ignored), and the processes meet at
MASTER_ADDR:MASTER_PORT, which mpirun must pass (``-x``) when they span nodes: MASTER_ADDR must be
the host where MPI rank 0 runs (the first host of the hostfile), MASTER_PORT defaults to 29500. On
one node they meet at 127.0.0.1 without it.

Each rank trains on every world_size-th sample of the shard stream (the remainder is dropped, so all
ranks take the same number of steps) and scores its slice of val. Rank 0 writes metrics.json and a
checkpoint after every epoch (``checkpoints.py``, shared with ``cifar10_ddp.py``), and at the end
model.pt and mlflow-model/ (the network behind its standardisation, as an MLflow model:
``mlflow_model.py``, shared too; val scores are reported as test_loss and test_accuracy, the keys
the run report plots); a
retry the pipeline sets RESUME_FROM for resumes after the newest complete checkpoint. gloo on CPU,
nccl on GPUs (one per local rank). Rank 0 also prints progress lines (``progress.py``, shared too):
ten in the course of each epoch and one at its end, which the pipeline reads for the job's ETA.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import checkpoints
import numpy as np
import torch
import torch.distributed as dist
from mlflow_model import save_mlflow_model
from progress import LoopProgress
from shards import DataError, Sample, read_index, read_samples, write_atomically
from torch import nn
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from collections.abc import Mapping

SPLITS = ("train", "val")
#: ImageNet's per-channel statistics, the usual ResNet input scaling; no pass over the data needed.
#: Val images the saved MLflow model carries as its input example (and infers its signature from).
MLFLOW_EXAMPLE_SIZE = 4
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
EVAL_BATCH_SIZE = 256
DEFAULT_MPI_PORT = 29500


@dataclass(frozen=True)
class Placement:
    """This process's place in the job and the launcher that gave it."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun" or "mpirun"


@dataclass(frozen=True)
class Dist:
    """The joined process group: placement plus the backend and device it uses."""

    placement: Placement
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Only one process writes files, so concurrent ranks never race on the same path."""
        return self.placement.rank == 0


@dataclass(frozen=True)
class Split:
    """Standardised images [n, 3, h, w] with their labels."""

    images: torch.Tensor
    labels: torch.Tensor


def _int_var(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.strip().isdigit():
        raise ValueError(f"{name}={value!r} is not a non-negative integer")
    return int(value)


def placement_from_env(env: Mapping[str, str]) -> Placement:
    """Rank, world size and local rank from torchrun's or Open MPI's variables.

    Open MPI's win when present, because DLC and ACK also set RANK and WORLD_SIZE per node; torchrun's
    win when torchrun itself started this process (TORCHELASTIC_RUN_ID), even one torchrun per node
    started by mpirun, because then they count processes.
    """
    if "OMPI_COMM_WORLD_RANK" in env and "TORCHELASTIC_RUN_ID" not in env:
        names, launcher = (
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
            "mpirun",
        )
    else:
        names, launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK"), "torchrun"
    missing = [name for name in names if name not in env]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}; launch this script with torchrun or mpirun")
    rank, world_size, local_rank = (_int_var(env, name) for name in names)
    if not 0 <= rank < world_size:
        raise ValueError(f"{names[0]}={rank} must lie in 0..{names[1]}-1 ({world_size - 1})")
    return Placement(rank, world_size, local_rank, launcher)


def rendezvous_url(env: Mapping[str, str], placement: Placement) -> str:
    """Where the processes meet: torchrun's own store, or MASTER_ADDR:MASTER_PORT for mpirun."""
    if placement.launcher == "torchrun":
        return "env://"
    host = env.get("MASTER_ADDR")
    if not host:
        if env.get("OMPI_COMM_WORLD_LOCAL_SIZE") != str(placement.world_size):
            raise ValueError(
                "mpirun across nodes needs MASTER_ADDR (the host of rank 0) and MASTER_PORT: "
                "pass them with mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port>"
            )
        host = "127.0.0.1"  # every rank is on this node
    port = _int_var(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_MPI_PORT
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the CLI; data and output default to env vars so a job spec can set them once."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=os.environ.get("DATA_DIR"), help="shard dir (default: $DATA_DIR)")
    parser.add_argument(
        "--out", default=os.environ.get("OUTPUT_DIR"), help="output dir (default: $OUTPUT_DIR)"
    )
    parser.add_argument("--epochs", type=int, default=2, help="total epochs, including resumed ones")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size per process")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and shuffling")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage (doubles twice)")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (or set DATA_DIR)")
    if not args.out:
        parser.error("--out is required (or set OUTPUT_DIR)")
    if min(args.epochs, args.batch_size, args.threads, args.width) < 1:
        parser.error("--epochs, --batch-size, --threads and --width must be at least 1")
    return args


def standardise(images: list[np.ndarray]) -> torch.Tensor:
    """Scale to [0, 1], normalise per channel and move channels first, as conv layers expect."""
    scaled = np.stack(images).astype(np.float32) / 255.0
    return torch.from_numpy(((scaled - MEAN) / STD).transpose(0, 3, 1, 2).copy())


def load_split(data_dir: Path, entry: dict[str, Any], placement: Placement, drop_remainder: bool) -> Split:
    """This rank's samples of one split: every world_size-th one of the sorted shard stream.

    Train drops the remainder so every rank runs the same number of steps (DDP's all-reduces must pair
    up); val keeps it, so every val sample is scored exactly once across the ranks.
    """
    total = entry["samples"]
    stop = total - total % placement.world_size if drop_remainder else total
    samples: list[Sample] = []
    count = 0
    for count, sample in enumerate(read_samples(data_dir / name for name in entry["shards"]), start=1):
        if count <= stop and (count - 1) % placement.world_size == placement.rank:
            samples.append(sample)
    if count != total:  # every rank must see the same count, or their shares would not pair up
        raise DataError(f"{data_dir}: the shards hold {count} samples, shards.json promises {total}")
    if not samples:
        raise DataError(f"{data_dir}: {total} samples are too few for {placement.world_size} ranks")
    labels = torch.tensor([sample.label for sample in samples], dtype=torch.int64)
    return Split(standardise([sample.image for sample in samples]), labels)


def load_dataset(data_dir: Path, placement: Placement) -> tuple[Split, Split, list[str]]:
    """Read and check the index, then this rank's train and val samples; also the class ids."""
    if not data_dir.is_dir():
        raise DataError(f"data dir {data_dir} does not exist")
    index = read_index(data_dir, SPLITS)
    classes = index["classes"]
    train = load_split(data_dir, index["splits"]["train"], placement, drop_remainder=True)
    val = load_split(data_dir, index["splits"]["val"], placement, drop_remainder=False)
    for split in (train, val):
        if int(split.labels.max()) >= len(classes):
            raise DataError(f"{data_dir}: a label exceeds the {len(classes)} classes of shards.json")
    return train, val, classes


def init_distributed(placement: Placement, url: str) -> Dist:
    """Join the process group; NCCL needs GPUs, so CPU-only jobs use gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(placement.local_rank)
        backend, device = "nccl", torch.device("cuda", placement.local_rank)
    else:
        backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend, init_method=url, rank=placement.rank, world_size=placement.world_size)
    return Dist(placement, backend, device)


class BasicBlock(nn.Module):
    """ResNet's two-conv residual block; a 1x1 projection when the shape changes."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class Standardise(nn.Module):
    """What :func:`standardise` does to images scaled to [0, 1], as a layer: the MLflow model the
    script saves starts with it, so whoever serves the model sends images, not standardised ones."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.from_numpy(MEAN).reshape(1, -1, 1, 1))
        self.register_buffer("std", torch.from_numpy(STD).reshape(1, -1, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean) / self.std


def build_model(width: int, classes: int) -> nn.Module:
    """ResNet-8 for small images: a 3x3 stem, three one-block stages (width, 2x, 4x), pooling, linear.

    The CIFAR-style ResNet layout (no 7x7 stem or max-pool) keeps spatial detail in 32x32 inputs.
    """
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        BasicBlock(width, width, 1),
        BasicBlock(width, 2 * width, 2),
        BasicBlock(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


def _decode(files: dict[str, bytes]) -> dict[str, Any]:
    return torch.load(io.BytesIO(files["state.pt"]), map_location="cpu", weights_only=True)


def share_resume_state(env: Dist, out_dir: Path) -> dict[str, Any] | None:
    """Read the resume state on rank 0 and send it to every rank, so all agree on the start epoch."""
    box = [checkpoints.resume(out_dir, _decode) if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def reduce_sums(env: Dist, *values: float) -> list[float]:
    """Sum a few scalars over all ranks, so every rank reports the same job-wide numbers."""
    totals = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return totals.tolist()


def steps_per_epoch(train: Split, batch_size: int) -> int:
    """The batches of one pass over this rank's share (every rank's is the same size)."""
    return -(-len(train.labels) // batch_size)


def train_epoch(
    env: Dist,
    model: nn.Module,
    train: Split,
    optimizer: torch.optim.Optimizer,
    batch_size: int,
    seed: int,
    epoch: int,
    progress: LoopProgress,
) -> tuple[float, float]:
    """One shuffled pass over this rank's share; loss and accuracy over all ranks' samples.

    Rank 0 reports its running scores in the course of the epoch (``progress.py``).
    """
    model.train()
    order = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(seed))
    loss_sum, correct, seen = 0.0, 0, 0
    for step, batch in enumerate(order.split(batch_size), start=1):
        images, labels = train.images[batch].to(env.device), train.labels[batch].to(env.device)
        optimizer.zero_grad(set_to_none=True)
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(labels)
        correct += int((logits.argmax(dim=1) == labels).sum())
        seen += len(labels)
        if env.is_main:
            progress.step(epoch, step, train_loss=loss_sum / seen, train_accuracy=correct / seen)
    total_loss, total_correct, count = reduce_sums(env, loss_sum, correct, len(train.labels))
    return total_loss / count, total_correct / count


@torch.no_grad()
def evaluate(env: Dist, model: nn.Module, val: Split) -> tuple[float, float]:
    """Score rank 0's model, the one saved, on this rank's val slice and combine, so each val
    sample counts once.

    The ranks share their weights, but each rank's last training steps moved its own BatchNorm
    running statistics (DDP sends rank 0's buffers before a forward, not after): every rank takes
    rank 0's first, or each slice would be scored by a model that is not saved.
    """
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    model.eval()
    loss_sum, correct = 0.0, 0
    for batch in torch.arange(len(val.labels)).split(EVAL_BATCH_SIZE):
        images, labels = val.images[batch].to(env.device), val.labels[batch].to(env.device)
        logits = model(images)
        loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        correct += int((logits.argmax(dim=1) == labels).sum())
    total_loss, total_correct, count = reduce_sums(env, loss_sum, correct, len(val.labels))
    return total_loss / count, total_correct / count


def torch_bytes(obj: object) -> bytes:
    """Serialise with torch.save in memory, so the file itself can be written atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def restore(resume: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, width: int) -> None:
    """Load a checkpoint's weights and optimizer, refusing one made for another model shape."""
    if resume["width"] != width:
        raise SystemExit(f"the latest checkpoint was trained with --width {resume['width']}, not {width}")
    model.load_state_dict(resume["model"])
    optimizer.load_state_dict(resume["optimizer"])


def fit(env: Dist, args: argparse.Namespace, train: Split, val: Split, classes: list[str]) -> None:
    """Train from the last checkpoint (or from scratch) up to --epochs, saving after each epoch."""
    out_dir = Path(args.out)
    torch.manual_seed(args.seed)
    model = build_model(args.width, len(classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    resume = share_resume_state(env, out_dir)
    if resume:
        restore(resume, model, optimizer, args.width)
    history: list[dict[str, Any]] = resume["history"] if resume else []
    resumes: list[dict[str, Any]] = resume["resumes"] if resume else []
    model.to(env.device)
    ddp = DistributedDataParallel(model, device_ids=[env.device.index] if env.backend == "nccl" else None)
    start = resume["epoch"] + 1 if resume else 1
    if env.is_main:
        print(
            f"start world_size={env.placement.world_size} launcher={env.placement.launcher} "
            f"backend={env.backend} start_epoch={start}",
            flush=True,
        )
    progress = LoopProgress(steps_per_epoch=steps_per_epoch(train, args.batch_size), epochs=args.epochs)
    for epoch in range(start, args.epochs + 1):
        began = time.perf_counter()
        # Seeded per rank and epoch: each rank shuffles its own share differently every epoch.
        seed = args.seed * 1_000_003 + epoch * 1009 + env.placement.rank
        train_loss, train_accuracy = train_epoch(
            env, ddp, train, optimizer, args.batch_size, seed, epoch, progress
        )
        test_loss, test_accuracy = evaluate(env, model, val)
        seconds = time.perf_counter() - began
        history.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                "train_accuracy": train_accuracy,
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
                "seconds": round(seconds, 3),
            }
        )
        if env.is_main:
            scores = " ".join(f"{key}={value:.4f}" for key, value in history[-1].items() if key != "epoch")
            history[-1]["attempt"] = checkpoints.ATTEMPT
            print(f"epoch {epoch}/{args.epochs} {scores}", flush=True)
            progress.epoch_end(
                epoch,
                train_loss=train_loss,
                train_accuracy=train_accuracy,
                test_loss=test_loss,
                test_accuracy=test_accuracy,
            )
            state = {
                "epoch": epoch,
                "width": args.width,
                "classes": classes,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
            }
            metrics = {
                "world_size": env.placement.world_size,
                "backend": env.backend,
                "epochs": history,
                "resumes": resumes,
            }
            checkpoints.save_epoch(out_dir, epoch, torch_bytes(state), metrics)
    if env.is_main:
        write_atomically(out_dir / "model.pt", torch_bytes(model.state_dict()))
        # The MLflow model takes images scaled to [0, 1], channels first: val's, unstandardised.
        layer = Standardise()
        example = val.images[:MLFLOW_EXAMPLE_SIZE] * layer.std + layer.mean
        save_mlflow_model(nn.Sequential(layer, model), out_dir, example.numpy())


def main(argv: list[str] | None = None) -> None:
    """Entry point: check the launch and the data first, then train in a group always torn down."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        placement = placement_from_env(os.environ)
        url = rendezvous_url(os.environ, placement)
        train, val, classes = load_dataset(Path(args.data), placement)
    except DataError as error:  # before any process group exists, so no rank hangs
        print(f"error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(checkpoints.DATA_ERROR_EXIT) from None
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    env = init_distributed(placement, url)
    try:
        fit(env, args, train, val, classes)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
