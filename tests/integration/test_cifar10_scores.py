"""The CIFAR-10 example's test scores belong to the model it saves.

Training runs on two ranks (torchrun, gloo on CPU), each scoring a slice of the test split; the
evaluation job (evaluate_cifar10.py, what the gate reads) scores the saved ``model.pt`` alone. Both
must report the same numbers for the same model on the same data: a training score measured with
each rank's own BatchNorm statistics belongs to no saved model, and would drive the gate of a
pipeline without an evaluation block. Each model also standardises with the statistics of the data
it was trained on, so a champion is scored with its own preprocessing, not the candidate's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.mlflow_models import predicted_elsewhere

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun")]

TRAINING_DIR = Path(__file__).resolve().parents[2] / "include" / "training"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def _train(data: Path, out: Path) -> dict[str, Any]:
    """Two ranks train two epochs; the last epoch's metrics as the job reported them."""
    command = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node=2",
        "cifar10_ddp.py",
        f"--data={data}",
        f"--out={out}",
        "--epochs=2",
        "--threads=1",
    ]
    ran = subprocess.run(command, cwd=TRAINING_DIR, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())["epochs"][-1]


def _evaluate(data: Path, candidate: Path, champion: Path, out: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "EVAL_DATA_DIR": str(data),
        "CANDIDATE_DIR": str(candidate),
        "CHAMPION_DIR": str(champion),
        "OUTPUT_DIR": str(out),
    }
    ran = subprocess.run(
        [sys.executable, "evaluate_cifar10.py"], cwd=TRAINING_DIR, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads((out / "evaluation.json").read_text())


def test_training_reports_the_scores_the_evaluation_job_measures_for_the_saved_model(
    make_dataset: Any, tmp_path: Path
) -> None:
    older, newer = (make_dataset(version, train=256, test=64) for version in ("2026-11-01", "2026-11-08"))
    # The older version's images are brighter: a model trained on it standardises differently.
    _brighten(older)
    champion = _train(older, tmp_path / "champion")
    candidate = _train(newer, tmp_path / "candidate")

    scores = _evaluate(newer, tmp_path / "candidate", tmp_path / "champion", tmp_path / "evaluation")

    assert scores["candidate"]["test_accuracy"] == candidate["test_accuracy"]
    assert scores["candidate"]["test_loss"] == pytest.approx(candidate["test_loss"], rel=1e-5)
    # Each model carries the statistics of its own training data, and is scored with them.
    on_older = _evaluate(older, tmp_path / "champion", tmp_path / "candidate", tmp_path / "evaluation-older")
    assert on_older["candidate"]["test_accuracy"] == champion["test_accuracy"]
    assert on_older["candidate"]["test_loss"] == pytest.approx(champion["test_loss"], rel=1e-5)
    means = [_standardisation(tmp_path / name)[0] for name in ("champion", "candidate")]
    assert not torch.allclose(means[0], means[1]), "the two models keep their own data's statistics"


def test_the_saved_mlflow_model_is_the_saved_state_and_loads_without_the_project(
    make_dataset: Any, tmp_path: Path
) -> None:
    """The training script's mlflow-model/ (what the registry logs) answers what model.pt's state
    answers in the network evaluate_cifar10.py rebuilds, in a process that has neither's code."""
    import numpy as np

    _train(make_dataset("2026-11-15", train=128, test=32), tmp_path / "out")
    batch = np.random.default_rng(0).random((5, 3, 32, 32), dtype=np.float32)
    answered = predicted_elsewhere(tmp_path / "out" / "mlflow-model", batch, tmp_path)

    sys.path.insert(0, str(TRAINING_DIR))
    try:
        from cifar10_model import build_model
    finally:
        sys.path.remove(str(TRAINING_DIR))
    network = build_model()
    network.load_state_dict(torch.load(tmp_path / "out" / "model.pt", map_location="cpu", weights_only=True))
    with torch.no_grad():
        expected = network.eval()(torch.from_numpy(batch)).numpy()
    assert np.allclose(answered, expected, atol=1e-5)


def _brighten(version: Path) -> None:
    """Rewrite the version's images brighter (its checksums and metadata stay consistent)."""
    import numpy as np

    for shard in version.glob("*.npz"):
        with np.load(shard) as arrays:
            rewritten = {name: arrays[name] for name in arrays.files}
        rewritten["images"] = (rewritten["images"] // 2 + 128).astype(np.uint8)
        with shard.open("wb") as handle:
            np.savez(handle, **rewritten)


def _standardisation(out: Path) -> tuple[torch.Tensor, torch.Tensor]:
    state = torch.load(out / "model.pt", map_location="cpu", weights_only=True)
    return state["0.mean"].flatten(), state["0.std"].flatten()
