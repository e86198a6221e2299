"""What a saved MLflow model answers where a serving job would load it: another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

_PREDICT = (
    "import sys, numpy as np, mlflow.pyfunc; "
    "print(mlflow.pyfunc.load_model(sys.argv[1]).predict(np.load(sys.argv[2])).tolist())"
)


def predicted_elsewhere(model: Path, batch: np.ndarray, scratch: Path) -> np.ndarray:
    """``mlflow.pyfunc.load_model(model).predict(batch)`` in a new Python process that has none of
    the project's or the examples' code: no PYTHONPATH, its working directory ``scratch``."""
    np.save(scratch / "batch.npy", batch)
    ran = subprocess.run(
        [sys.executable, "-c", _PREDICT, str(model), str(scratch / "batch.npy")],
        cwd=scratch,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return np.array(json.loads(ran.stdout.strip().splitlines()[-1]))
