"""Test environment: a throwaway AIRFLOW_HOME with a fresh SQLite DB and a throwaway local root.

Airflow reads its configuration when first imported, so the environment is set here, before any
test module imports Airflow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

PROJECT_DIR = Path(__file__).resolve().parents[1]
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="aliyun-training-tests-"))

os.environ.update(
    {
        "AIRFLOW_HOME": str(_SESSION_DIR / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_DIR / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_DIR / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_SESSION_DIR / 'airflow' / 'airflow.db'}",
        "ALIYUN_TRAINING_LOCAL_ROOT": str(_SESSION_DIR / "local"),
        # The installation id every job, pod and plan of a test carries (fakes.environment_files's).
        "AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID": "test-deployment",
        # The emulators answer in a millisecond where the cloud takes a hundred, so the defaults'
        # pacing (10 a second for most services, each bucket starting empty) would be most of a
        # test's time; the rate-limit tests set their own limits, the defaults' included.
        "AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS": json.dumps(
            dict.fromkeys(
                ("dlc", "paistudio", "aiworkspace", "vpc", "ecs", "nas", "cr", "ram", "cms", "kubernetes"),
                1e6,
            )
        ),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT_DIR / "plugins"), os.environ.get("PYTHONPATH")])
        ),
    }
)


@pytest.fixture(autouse=True)
def fresh_connections() -> Iterator[None]:
    """Tests point the same connection id at different emulators: no hook may outlive its test, nor
    any rate limiter (made with the limits the test's settings give)."""
    from aliyun_training.hooks.alibaba_cloud import forget_shared_hooks
    from aliyun_training.hooks.rate_limit import forget_limiters

    forget_shared_hooks()
    forget_limiters()
    yield
    forget_shared_hooks()
    forget_limiters()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the session's SQLite metadata DB once; tests that run DAGs depend on it."""
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ,
    )
    return home


@pytest.fixture
def local_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh local root (object store, CPFS stand-in, runs, artifacts) for one test."""
    root = tmp_path / "local"
    monkeypatch.setenv("ALIYUN_TRAINING_LOCAL_ROOT", str(root))
    return root


@pytest.fixture
def make_dataset(local_root: Path) -> Callable[..., Path]:
    """Generate a small synthetic CIFAR-10 version into the test's local object store."""

    def make(version: str, train: int = 256, test: int = 64) -> Path:
        out = local_root / "object-store" / "cifar10" / version
        generator = PROJECT_DIR / "include" / "training" / "make_synthetic_cifar10.py"
        subprocess.run(
            [sys.executable, str(generator), "--out", str(out), "--train", str(train), "--test", str(test)],
            check=True,
            capture_output=True,
        )
        return out

    return make
