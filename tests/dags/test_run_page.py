"""The run page behind Airflow's auth: a pipeline run's training job from the live record its
trigger keeps (sealed), reloading while the job runs, and the report's link once it is published."""

from __future__ import annotations

import asyncio
import logging
import re
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.backends.base import JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.live import LIVE_SECONDS, LiveRecord, LiveSettings
from aliyun_training.pages.urls import report_page, run_page
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.task_ids import TRAIN
from aliyun_training.triggers.training import LiveStore, TrainingJobTrigger
from tests.dags.live_runs import (
    DAG_ID,
    SCRIPT_LINE,
    end_run,
    forget_runs,
    new_run,
    publish_report,
    record,
    write_live,
)
from tests.pages_client import deploy, pages_client

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
REFRESH = f"<meta http-equiv='refresh' content='{round(LIVE_SECONDS / 2)}'>"


@pytest.fixture(scope="module")
def deployed(airflow_db: Path) -> Iterator[None]:
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert not bag.import_errors
    deploy(*bag.dags.values())
    yield
    forget_runs()


def when(moment: datetime | None) -> str:
    assert moment is not None
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def test_a_running_job_shows_its_progress_eta_metrics_gpus_cost_deadline_and_last_lines(
    deployed: None,
) -> None:
    run_id = new_run("running")
    shown = record(420, datetime.now(UTC))
    write_live(run_id, shown)

    answer = pages_client().get(run_page(DAG_ID, run_id))

    assert answer.status_code == 200
    page = answer.text
    assert REFRESH in page and "reloads itself every 15 s" in page
    assert "<strong class='state-running'>running</strong>" in page and "(Running on dlc)" in page
    assert (
        "<code>dlc1a2b3c4d5e</code>" in page
        and "https://pai.console.aliyun.com/?regionId=cn-hangzhou" in page
    )
    assert "<progress max='1' value='0.4200'></progress> <strong class='percent'>42%</strong>" in page
    assert "(step 420 of 1,000, epoch 2.1 of 5)" in page and "3.1 steps/s" in page
    assert shown.progress is not None and f"<strong class='eta'>{when(shown.progress.eta)}</strong>" in page
    assert re.search(r"\(in 2 min 5\d s\)", page), "the ETA's time left (187 s less 10), counted from now"
    for metric in ("loss", "accuracy"):
        assert f"<polyline data-metric='{metric}'" in page and f"aria-label='{metric} per step'" in page
    assert "mean 87%, p10 61%, idle (under 10%) 0 min, 30,500 MiB used on average" in page
    assert "(24 samples from cloudmonitor)" in page
    assert "1.25 GPU-hours, 9.50 CNY" in page
    assert shown.deadline is not None
    assert f"at risk: the ETA is past it</strong>: {when(shown.deadline.deadline)}" in page
    assert "expected to take 4 min 00 s (median of the last 5 successful runs)" in page
    assert "<td>Queuing</td><td>waiting for &lt;b&gt;quota&lt;/b&gt;</td>" in page, "the history, as text"
    assert "epoch 2 &lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt; done" in page
    assert "<script" not in page and SCRIPT_LINE not in page
    assert "<h3>Node 1</h3><pre class='log'>worker 1 ready</pre>" in page
    assert f"{shown.updated:%Y-%m-%d %H:%M:%S} UTC" in page
    assert re.search(r"\(1\d\.\d s ago\)", page), "written 10 s before the test asked"


def test_a_job_that_ended_is_shown_as_last_seen_and_the_page_stops_reloading(deployed: None) -> None:
    run_id = new_run("ended")
    write_live(run_id, record(1000, datetime.now(UTC), state="succeeded"))

    page = pages_client().get(run_page(DAG_ID, run_id)).text

    assert "<strong class='state-succeeded'>succeeded</strong>" in page and "100%" in page
    assert "http-equiv='refresh'" not in page and "reloads itself" not in page
    assert "Not reloading: the run is running." in page


def test_a_run_whose_job_has_not_reported_says_so_and_keeps_reloading(deployed: None) -> None:
    run_id = new_run("not-reported")
    pages = pages_client()

    waiting = pages.get(run_page(DAG_ID, run_id))
    end_run(run_id, "failed")
    failed = pages.get(run_page(DAG_ID, run_id))

    assert waiting.status_code == 200 and "has not reported yet" in waiting.text and REFRESH in waiting.text
    assert failed.status_code == 200 and "recorded no training job" in failed.text
    assert "http-equiv='refresh'" not in failed.text, "a run that ended without a job waits for nothing"


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("unsealed", lambda r: r.model_dump(mode="json")),
        ("forged", lambda r: {"value": r.model_dump(mode="json"), "seal": "0" * 64}),
    ],
)
def test_a_record_without_the_triggers_seal_is_not_shown(
    deployed: None, caplog: pytest.LogCaptureFixture, name: str, stored: Any
) -> None:
    """A user who may edit the run can write its XComs through the REST API: such a record could
    show any progress, console link or log line, so the page shows none of it."""
    run_id = new_run(name)
    write_live(run_id, stored(record(420, datetime.now(UTC))))

    with caplog.at_level(logging.WARNING, logger="aliyun_training.pages.runs"):
        page = pages_client().get(run_page(DAG_ID, run_id)).text

    assert "has not reported yet" in page
    assert "dlc1a2b3c4d5e" not in page and "42%" not in page
    assert f"XCom 'live' of run {run_id} has no seal of its own" in caplog.text


def test_an_unknown_run_is_a_404_and_a_user_who_may_not_read_the_dag_gets_a_403(deployed: None) -> None:
    run_id = new_run("private")
    write_live(run_id, record(420, datetime.now(UTC)))

    unknown = pages_client().get(run_page(DAG_ID, "manual__no-such-run"))
    no_pipeline = pages_client().get(run_page("no_such_dag", run_id))
    refused = pages_client(role=None).get(run_page(DAG_ID, run_id))

    assert unknown.status_code == 404 and "has no training pipeline run manual__no-such-run" in unknown.text
    assert no_pipeline.status_code == 404
    assert refused.status_code == 403 and "dlc1a2b3c4d5e" not in refused.text


def test_once_the_report_is_published_the_page_links_it_above_the_job_as_last_seen(
    deployed: None, tmp_path: Path
) -> None:
    run_id = new_run("reported")
    write_live(run_id, record(1000, datetime.now(UTC), state="succeeded"))
    pages = pages_client()
    before = pages.get(run_page(DAG_ID, run_id)).text

    publish_report(run_id, tmp_path)
    end_run(run_id)
    page = pages.get(run_page(DAG_ID, run_id)).text
    link = re.search(
        r"The run ended and published its report: <a href='([^']+)'>Open the run report</a>", page
    )

    assert "Open the run report" not in before
    assert link is not None and link.group(1) == report_page(DAG_ID, run_id)
    assert "<code>dlc1a2b3c4d5e</code>" in page, "the job as last seen, below the link"
    assert "http-equiv='refresh'" not in page
    assert "Run report: cifar10" in pages.get(link.group(1)).text, "the link opens the published report"


#: 1,000 steps at one every 0.3 s, printed as the contract says: minutes to go when it is looked at.
SCRIPT = """\
import json, time
for step in range(1, 1001):
    print(json.dumps({"event": "progress", "step": step, "total_steps": 1000, "time": time.time(),
                      "metrics": {"loss": round(2 / step, 4)}}), flush=True)
    time.sleep(0.3)
"""


class MetadataStore(LiveStore):
    """Writes the sealed record as the train task's XCom in the metadata DB (reads nothing back):
    where the triggerer's channel to the API server writes it in a deployment, the one part of the
    path no test here runs."""

    def __init__(self, settings: LiveSettings, run_id: str) -> None:
        super().__init__(settings)
        self.run_id = run_id

    async def read(self) -> LiveRecord | None:
        return None

    async def write(self, record: LiveRecord) -> None:
        await asyncio.to_thread(write_live, self.run_id, record)


def test_a_running_jobs_page_shows_its_progress_and_eta_before_it_ends(
    deployed: None, local_root: Path, tmp_path: Path
) -> None:
    """Filled by the real training trigger watching a real local job that prints the progress
    contract: progress and ETA are on the page before the job ends, and it keeps refreshing."""
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
