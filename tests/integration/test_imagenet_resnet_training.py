"""The ImageNet-style example end to end: raw images, prepare stage, ResNet training (torchrun, mpirun).

Every script runs as its own process, as a job runs it. There is no mpirun here, so the mpirun launch
is reproduced by starting the processes with the variables Open MPI gives each rank.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mlflow_models import predicted_elsewhere

SCRIPTS = Path(__file__).resolve().parents[2] / "include" / "imagenet_resnet"
CLASSES = 4
TIMEOUT = 300

#: One worker runs the module, so its shards and its two-epoch run are made once, not per worker;
#: it is the xdist group of every test that imports torch into pytest's process (about 2 s of CPU
#: per process), so one worker pays for that import, not each.
pytestmark = pytest.mark.xdist_group("torch")


def _run(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
    )
    assert result.returncode == 0, f"{args[0]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _torchrun(data: Path, out: Path, epochs: int, env: dict[str, str] | None = None) -> str:
    return _run(
        *("-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2"),
        *(str(SCRIPTS / "train_resnet.py"), "--data", str(data), "--out", str(out), "--epochs", str(epochs)),
        env={**os.environ, **env} if env else None,
    )


def _epochs(out: Path) -> list[dict]:
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["world_size"], metrics["backend"]) == (2, "gloo")
    return metrics["epochs"]


@pytest.fixture(scope="module")
def shard_version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic raw version (400 train, 100 val images) converted by the prepare stage."""
    root = tmp_path_factory.mktemp("imagenet")
    _run(str(SCRIPTS / "make_synthetic_raw.py"), "--out", str(root / "raw"), "--classes", str(CLASSES))
    _run(
        str(SCRIPTS / "prepare_shards.py"),
        *("--raw", str(root / "raw"), "--out", str(root / "shards"), "--shard-size", "128"),
    )
    assert sorted(path.name for path in (root / "shards").glob("*.tar")) == [
        *(f"train-{i:06d}.tar" for i in range(4)),
        "val-000000.tar",
    ]
    return root / "shards"


@pytest.fixture(scope="module")
def two_epochs(shard_version: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict]]:
    """A two-epoch torchrun run: its output dir, its log and its metrics as they were when it ended."""
    out = tmp_path_factory.mktemp("torchrun") / "out"
    log = _torchrun(shard_version, out, epochs=2)
    return out, log, _epochs(out)


@pytest.mark.slow
@pytest.mark.slow
def test_torchrun_trains_and_writes_checkpoints_metrics_and_model(
    two_epochs: tuple[Path, str, list[dict]],
) -> None:
    import torch

    out, log, epochs = two_epochs

    assert "launcher=torchrun backend=gloo start_epoch=1" in log
    assert [entry["epoch"] for entry in epochs] == [1, 2]
    assert epochs[1]["train_loss"] < epochs[0]["train_loss"]
    assert epochs[1]["train_accuracy"] > 1 / CLASSES
    assert {"test_loss", "test_accuracy", "seconds"} <= set(epochs[1]), "the keys the run report reads"
    assert {"epoch-0001", "epoch-0002"} <= {path.name for path in (out / "checkpoints").iterdir()}
    assert (out / "checkpoints" / "epoch-0002" / "COMPLETE").is_file(), "the marker is written last"
    weights = torch.load(out / "model.pt", weights_only=True)
    assert weights["8.weight"].shape == (CLASSES, 64)  # the linear head: 4 x width 16 features


@pytest.mark.slow
def test_the_saved_mlflow_model_standardises_images_itself_and_answers_as_the_network(
    two_epochs: tuple[Path, str, list[dict]], tmp_path: Path
) -> None:
    """mlflow-model/ takes images scaled to [0, 1] and answers what model.pt's network answers for
    them standardised, loaded in a process with none of the example's code."""
    import numpy as np
    import torch

    out, _, _ = two_epochs
    images = np.random.default_rng(0).random((3, 3, 32, 32), dtype=np.float32)
    answered = predicted_elsewhere(out / "mlflow-model", images, tmp_path)

    sys.path.insert(0, str(SCRIPTS))
    try:
        from train_resnet import MEAN, STD, build_model
    finally:
        sys.path.remove(str(SCRIPTS))
    state = torch.load(out / "model.pt", map_location="cpu", weights_only=True)
    network = build_model(width=state["0.weight"].shape[0], classes=CLASSES)
    network.load_state_dict(state)
    standardised = (images - MEAN.reshape(1, 3, 1, 1)) / STD.reshape(1, 3, 1, 1)
    with torch.no_grad():
        expected = network.eval()(torch.from_numpy(standardised)).numpy()
    assert np.allclose(answered, expected, atol=1e-5)


@pytest.mark.slow
def test_the_val_scores_training_reports_are_the_saved_models(
    shard_version: Path, two_epochs: tuple[Path, str, list[dict]], tmp_path: Path
) -> None:
    """What the evaluation job (evaluate_resnet.py, what the gate reads) measures for model.pt on
    the same val split is what training reported for its last epoch: both ranks scored rank 0's
    model, the one saved, not each its own BatchNorm statistics."""
    out, _, _ = two_epochs
    env = {"EVAL_DATA_DIR": str(shard_version), "CANDIDATE_DIR": str(out), "OUTPUT_DIR": str(tmp_path)}
    _run(str(SCRIPTS / "evaluate_resnet.py"), env={**os.environ, **env})

    scored = json.loads((tmp_path / "evaluation.json").read_text())["candidate"]
    reported = _epochs(out)[-1]
    assert scored["test_accuracy"] == reported["test_accuracy"]
    assert scored["test_loss"] == pytest.approx(reported["test_loss"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.slow
def test_torchrun_resumes_after_the_latest_checkpoint(
    shard_version: Path, two_epochs: tuple[Path, str, list[dict]]
) -> None:
    out, _, first = two_epochs

    log = _torchrun(shard_version, out, epochs=3, env={"RESUME_FROM": str(out / "checkpoints")})

    assert "start_epoch=3" in log and "epoch 1/3" not in log
    assert f"resuming from {out / 'checkpoints' / 'epoch-0002'} (epoch 2)" in log
    resumed = _epochs(out)
    assert resumed[:2] == first, "the resumed run keeps the finished epochs' metrics"
    assert [entry["epoch"] for entry in resumed] == [1, 2, 3]
    assert (out / "checkpoints" / "epoch-0003" / "COMPLETE").is_file()


@pytest.mark.slow
@pytest.mark.slow
def test_mpirun_ranks_train_the_same_shares_as_torchrun(
    shard_version: Path, two_epochs: tuple[Path, str, list[dict]], tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [str(SCRIPTS / "train_resnet.py"), "--data", str(shard_version), "--epochs", "1"]
    # What a platform sets per node (RANK counts nodes) must not override Open MPI's per-process ranks.
    platform = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_PORT": str(port), "OUTPUT_DIR": str(tmp_path / "mpi")}
    procs = [
        subprocess.Popen(
            [sys.executable, *args],
            env={
                **os.environ,
                **platform,
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = [proc.communicate(timeout=TIMEOUT)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(logs)
    assert "start world_size=2 launcher=mpirun backend=gloo start_epoch=1" in logs[0]

    (mpi,), torchrun = _epochs(tmp_path / "mpi"), two_epochs[2][0]
    # Same seed and the same per-rank shares: the first epoch comes out the same under both launchers.
    assert mpi["train_loss"] == pytest.approx(torchrun["train_loss"], rel=1e-3)
    assert (tmp_path / "mpi" / "model.pt").is_file()
