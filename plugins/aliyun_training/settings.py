"""Where the local backend keeps its files and the environment files are; read when a task runs.

Nothing here is read at DAG parse time.

One root (``ALIYUN_TRAINING_LOCAL_ROOT``, default ``$AIRFLOW_HOME/aliyun-training``) holds the
local stand-ins for the cloud: an object store (OSS), a shared filesystem (CPFS), job run
directories, job outputs and the versioned artifact store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LOCAL_ROOT_ENV = "ALIYUN_TRAINING_LOCAL_ROOT"
#: The directory holding the backends' environment files (``local.json``, ``dlc.json``, ``arena.json``).
ENVIRONMENT_DIR_ENV = "ALIYUN_TRAINING_ENVIRONMENT_DIR"


@dataclass(frozen=True)
class LocalPaths:
    root: Path

    @property
    def object_store(self) -> Path:
        """Stand-in for OSS: ``<object_store>/<dataset>/<version>/<files>``."""
        return self.root / "object-store"

    @property
    def cpfs(self) -> Path:
        """Stand-in for the CPFS mount that training nodes read datasets from."""
        return self.root / "cpfs"

    @property
    def runs(self) -> Path:
        """Run directories of local jobs (pids, logs, exit codes)."""
        return self.root / "runs"

    @property
    def outputs(self) -> Path:
        """Where jobs write checkpoints and metrics, one directory per job name."""
        return self.root / "outputs"

    @property
    def mlflow(self) -> Path:
        """The embedded MLflow model registry's folder (a SQLite store), when none is configured."""
        return self.root / "mlflow"

    @property
    def artifacts(self) -> Path:
        """The versioned artifact store (stand-in for the OSS model bucket)."""
        return self.root / "artifacts"


def local_paths() -> LocalPaths:
    """Resolve the local root from the environment of the process that runs the task."""
    configured = os.environ.get(LOCAL_ROOT_ENV)
    if configured:
        return LocalPaths(Path(configured).expanduser().resolve())
    airflow_home = os.environ.get("AIRFLOW_HOME", "~/airflow")
    return LocalPaths(Path(airflow_home).expanduser().resolve() / "aliyun-training")


def environment_directory(default_dir: Path) -> Path:
    """The directory of the backends' environment files (``local.json``, ``dlc.json``, ...).

    It is the deployment's ``ALIYUN_TRAINING_ENVIRONMENT_DIR``, else ``default_dir`` (what the DAG
    file names, e.g. a project's ``include/config``). It is an administrator's setting of the
    worker's environment, never a run parameter, because the files decide what a run may reach.
    """
    configured = os.environ.get(ENVIRONMENT_DIR_ENV)
    return Path(configured).expanduser() if configured else default_dir
