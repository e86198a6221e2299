"""The training trigger's live view of a DLC job, through the real DLC and CloudMonitor SDKs against
the emulators: GPUs that CloudMonitor shows idle are warned of once, a deadline already passed is
told once to the pipeline's notifier, and a trigger that restarts (a triggerer restart) carries on
from the sealed record without telling either again.

The record is kept where the trigger keeps it (``LiveStore``: the task's XCom) by a store that holds
the sealed value in memory instead, the one part no emulator stands for: the triggerer's channel to
the API server. What it holds is the sealed value the XCom would, opened the way the page opens it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.deadline import ExpectedDuration
from aliyun_training.live import LiveRecord, LiveSettings, open_live, seal_live
from aliyun_training.notifications import NotifierSpec
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.triggers.training import LiveStore, TrainingJobTrigger
from fakes.cloud import dlc_backend, dlc_job, emulated_cloud
from fakes.dlc import JobScript
from tests.dags.recording_notifier import recorded

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fakes.cloud import Cloud

WHERE = {"dag_id": "retrain", "run_id": "manual__1", "task_id": "train"}


class MemoryStore(LiveStore):
    """The sealed value an XCom would hold, kept in memory (shared by the triggers of one test)."""

    def __init__(self, settings: LiveSettings, shelf: dict[str, Any]) -> None:
        super().__init__(settings)
        self.shelf = shelf

    async def read(self) -> LiveRecord | None:
        return open_live(self.shelf.get("live"), **WHERE)

    async def write(self, record: LiveRecord) -> None:
        self.shelf["live"] = seal_live(record, **WHERE)


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    with emulated_cloud(monkeypatch) as account:
        account.dlc.script_for("idle-", JobScript(phases=[("Running", 3600.0)]))
        yield account
        assert account.cms.internal_errors == [] and account.dlc.internal_errors == []


def _trigger(backend: Any, handle: Any, settings: LiveSettings, shelf: dict[str, Any]) -> TrainingJobTrigger:
    trigger = TrainingJobTrigger(
        backend="dlc",
        handle=handle.model_dump(),
        backend_config=backend.config,
        poll_interval=0.05,
        live=settings.model_dump(mode="json"),
    )
    trigger.__dict__["live_store"] = MemoryStore(settings, shelf)
    return trigger


async def _polls(trigger: TrainingJobTrigger, count: int) -> None:
    for _ in range(count):
        assert await trigger.poll() is None, "the job runs on"
    trigger.release()


def test_idle_gpus_are_warned_of_once_and_a_passed_deadline_told_once_even_after_a_restart(
    cloud: Cloud, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    backend = dlc_backend(workspace_id="ws-1")
    started = time.time() - 15 * 60
    real_clock = cloud.dlc.clock
    cloud.dlc.clock = lambda: real_clock() - 15 * 60  # the job was created a quarter of an hour ago
    handle = backend.submit(TrainingJobSpec(**dlc_job(command="torchrun train.py")), "idle-train")
    cloud.dlc.clock = real_clock
    pods = [pod for pod, _ in cloud.dlc.jobs[handle.job_id].pod_ids]
    cloud.cms.set_gpu_use(handle.job_id, pods, utilization=2.0, memory_used_mib=900.0, since=started)
    notices = tmp_path / "notices.jsonl"
    settings = LiveSettings(
        **WHERE,
        gpus=16,
        per_gpu_hour=30.0,
        currency="CNY",
        expected=ExpectedDuration(seconds=600, source="declared", tolerance=1.0),
        notifications=[
            NotifierSpec(
                kind="class",
                class_path="tests.dags.recording_notifier.RecordingNotifier",
                options={"path": str(notices)},
            )
        ],
    )
    shelf: dict[str, Any] = {}

    asyncio.run(_polls(_trigger(backend, handle, settings, shelf), 3))
    asyncio.run(_polls(_trigger(backend, handle, settings, shelf), 3))  # the triggerer restarted

    output = capfd.readouterr()
    warnings = [line for line in (output.out + output.err).splitlines() if "mostly idle" in line]
    assert len(warnings) == 1, warnings
    assert handle.job_id in warnings[0] and "straggler" in warnings[0]
    assert [n["event"] for n in recorded(notices)] == ["deadline_missed"], (
        "told once, not again after the restart"
    )
    record = open_live(shelf["live"], **WHERE)
    assert record is not None and record.state == "running"
    assert {"gpus_idle", "deadline_missed"} <= set(record.sent)
    assert record.gpu is not None and record.gpu.source == "dlc" and record.gpu.samples >= 2 * 14
    assert record.gpu.mean_utilization == pytest.approx(2.0) and record.gpu.idle_minutes >= 10
    assert record.cost is not None and record.cost.gpu_hours == pytest.approx(4.0, abs=0.1)
    assert (
        record.cost.money == pytest.approx(record.cost.gpu_hours * 30, abs=0.01)
        and record.cost.currency == "CNY"
    )
    assert record.deadline is not None and record.deadline.missed
