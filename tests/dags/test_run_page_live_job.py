"""The run page of a job that is still running, filled by the real training trigger watching a real
local job (torchrun's contract, a script printing the progress contract): its progress and ETA are
on the page before the job ends, and the page keeps refreshing until it does.

The trigger's store writes the sealed record into the session's metadata DB where Airflow's own
code writes an XCom (``XComModel.set``), which the triggerer's channel to the API server does in a
deployment: the one part of the path no test here can run.
"""

from __future__ import annotations

import asyncio
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.backends.base import JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.live import LiveRecord, LiveSettings
from aliyun_training.pages.urls import run_page
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.task_ids import TRAIN
from aliyun_training.triggers.training import LiveStore, TrainingJobTrigger
from tests.dags.live_runs import DAG_ID, forget_runs, new_run, write_live
from tests.dags.scores_pipeline import DAG_FILE
from tests.pages_client import deploy, pages_client

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

#: 1,000 steps at one every 0.3 s, printed as the contract says: minutes to go when it is looked at.
SCRIPT = """\
import json, time
for step in range(1, 1001):
    print(json.dumps({"event": "progress", "step": step, "total_steps": 1000, "time": time.time(),
                      "metrics": {"loss": round(2 / step, 4)}}), flush=True)
    time.sleep(0.3)
"""


class MetadataStore(LiveStore):
    """Writes the sealed record as the train task's XCom in the metadata DB (reads nothing back)."""

    def __init__(self, settings: LiveSettings, run_id: str) -> None:
        super().__init__(settings)
        self.run_id = run_id

    async def read(self) -> LiveRecord | None:
        return None

    async def write(self, record: LiveRecord) -> None:
        await asyncio.to_thread(write_live, self.run_id, record)


@pytest.fixture(scope="module")
def deployed(airflow_db: Path) -> Iterator[None]:
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert not bag.import_errors
    deploy(*bag.dags.values())
    yield
    forget_runs()


def test_a_running_jobs_page_shows_its_progress_and_eta_before_it_ends(
    deployed: None, local_root: Path, tmp_path: Path
) -> None:
    run_id = new_run("local-job")
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    backend = LocalBackend()
    spec = TrainingJobSpec(nodes=1, command="python train.py", working_dir=str(tmp_path))
    handle = backend.submit(spec, "live-page-job")
    settings = LiveSettings(dag_id=DAG_ID, run_id=run_id, task_id=TRAIN)
    trigger = TrainingJobTrigger(
        backend="local", handle=handle.model_dump(), poll_interval=0.5, live=settings.model_dump(mode="json")
    )
    trigger.__dict__["live_store"] = MetadataStore(settings, run_id)

    async def watch() -> None:
        for _ in range(8):  # four seconds of polls: the first ETA is written as soon as it is known
            assert await trigger.poll() is None
            await asyncio.sleep(0.5)

    try:
        asyncio.run(watch())
        page: Any = pages_client().get(run_page(DAG_ID, run_id))
        assert backend.status(handle).state is JobState.RUNNING, "looked at before the job ended"
    finally:
        backend.stop(handle)
    assert page.status_code == 200
    assert "step 2 of 1,000" in page.text or "of 1,000)" in page.text
    assert "ETA" in page.text and "steps/s" in page.text
    assert "http-equiv='refresh'" in page.text, "it refreshes while the job runs"
    assert handle.job_id in page.text
