"""
### Declared training pipelines

Every file in `pipelines/` (or the folder `ALIYUN_TRAINING_PIPELINES_DIR` names) declares one
training pipeline, and becomes one Airflow DAG here: this one file pays the package's imports once
per parse, however many pipelines there are. A broken declaration file becomes a failing DAG of
its own, ``invalid_declaration__<file name>``, naming the file, the key and the fix, while the other
pipelines load: this file never fails to import, since Airflow would mark all its DAGs stale.

The environment files the declarations name are in `include/config/` unless the deployment sets
`ALIYUN_TRAINING_ENVIRONMENT_DIR`.
"""

from __future__ import annotations

import os
from pathlib import Path

from aliyun_training.pipelines import load_pipelines

PROJECT_DIR = Path(__file__).resolve().parents[1]
PIPELINES_DIR = Path(os.environ.get("ALIYUN_TRAINING_PIPELINES_DIR") or PROJECT_DIR / "pipelines")

globals().update(load_pipelines(PIPELINES_DIR, environment_dir=PROJECT_DIR / "include" / "config"))
