"""The environment ``make`` gives Airflow, for benchmarks that are also run directly.

Defaults are relative to the project root; ``plugins`` and the project root go on ``sys.path`` and
``PYTHONPATH`` (benchmarks import ``aliyun_training`` and the emulators from ``tests``, and child
processes they start must too).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
IMPORT_PATHS = (PROJECT_ROOT / "plugins", PROJECT_ROOT)


def prepare_environment() -> None:
    defaults = {
        "AIRFLOW_HOME": PROJECT_ROOT / ".airflow",
        "AIRFLOW__CORE__DAGS_FOLDER": PROJECT_ROOT / "dags",
        "AIRFLOW__CORE__PLUGINS_FOLDER": PROJECT_ROOT / "plugins",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "ALIYUN_TRAINING_LOCAL_ROOT": PROJECT_ROOT / ".demo",
    }
    for name, value in defaults.items():
        os.environ.setdefault(name, str(value))
    paths = [str(path) for path in IMPORT_PATHS]
    inherited = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *(path for path in inherited if path not in paths)])
    sys.path[:0] = [path for path in paths if path not in sys.path]
