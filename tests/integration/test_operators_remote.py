"""operators.remote: an operator waiting on a remote run saves the run sealed, and on a deferral timeout
stops exactly the run it saved, with the settings it started with, and nothing another writer saved.

The run is a CPFS data flow import on the NAS emulator: the stop is the emulator's CancelDataFlowTask.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import TaskDeferralTimeout, TaskDeferred

from aliyun_training.hooks.alibaba_cloud import shared_hook
from aliyun_training.hooks.nas import NasHook
from aliyun_training.operators.remote import RemoteRunMixin
from aliyun_training.seals import opened_state, sealed_state
from aliyun_training.staging.dataflow_api import create_import_task
from aliyun_training.triggers.remote_run import RemoteRunTrigger
from fakes.cloud import use_alibaba_connection
from fakes.nas import NasDataFlowEmulator
from tests.operator_harness import TaskInstanceIds, task_context

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from airflow.sdk import Context

AK, SK = "LTAI-remote-run", "remote-run-secret"
FILE_SYSTEM, DATA_FLOW = "bmcpfs-0123abcd", "df-0123abcd"
#: The staging run's settings, as the staging operator hands them to ``remote_runs.remote_run``.
CONFIG = {
    "file_system_id": FILE_SYSTEM,
    "data_flow_id": DATA_FLOW,
    "source_uri": "oss://ml-data/cifar10/v1/",
    "target_root": "/datasets/cifar10",
    "version": "v1",
}
KEY = "staging_run"
TIMEOUT = timedelta(hours=2)


class StagingWait(RemoteRunMixin, BaseOperator):
    """Waits on the import task ``import_task`` as the staging operator does."""

    remote_kind = "staging"
    remote_key = KEY

    def __init__(self, *, import_task: str, **kwargs: Any) -> None:
        super().__init__(task_id="stage_dataset", **kwargs)
        self.import_task = import_task

    def execute(self, context: Context) -> None:
        handle = {"task_id": self.import_task}
        self.defer_to_remote(context, "dataflow", CONFIG, handle, poll_interval=20, timeout=TIMEOUT)


@pytest.fixture
def nas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NasDataFlowEmulator]:
    """The NAS emulator with the data flow, reached through ``alibaba_cloud_default``."""
    with NasDataFlowEmulator(tmp_path / "bmcpfs", lambda bucket, prefix: {}, {AK: SK}) as emulator:
        emulator.add_data_flow(FILE_SYSTEM, DATA_FLOW, source_storage="oss://ml-data/")
        use_alibaba_connection(monkeypatch, {"nas": emulator.endpoint}, AK, SK)
        yield emulator
        assert emulator.internal_errors == []


def started_import() -> str:
    """An import task on the emulator, as the staging run's ``submit`` starts it: its id."""
    return create_import_task(
        shared_hook(NasHook, "alibaba_cloud_default"),
        file_system_id=FILE_SYSTEM,
        data_flow_id=DATA_FLOW,
        directory="/cifar10/v1/",
        dst_directory="/cifar10/v1/",
        client_token="stage-cifar10-v1",
    )


def deferred(operator: StagingWait, context: dict[str, Any]) -> RemoteRunTrigger:
    with pytest.raises(TaskDeferred) as deferral:
        operator.execute(context)
    assert deferral.value.timeout == TIMEOUT
    assert isinstance(deferral.value.trigger, RemoteRunTrigger)
    return deferral.value.trigger


def timed_out(operator: StagingWait, context: dict[str, Any]) -> None:
    with pytest.raises(TaskDeferralTimeout):
        operator.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context)


def test_the_started_run_is_saved_sealed_for_this_task_and_the_trigger_watches_it() -> None:
    context = task_context()

    trigger = deferred(StagingWait(import_task="task-1"), context)

    assert (trigger.kind, trigger.mode, trigger.config) == ("staging", "dataflow", CONFIG)
    assert (trigger.handle, trigger.poll_interval) == ({"task_id": "task-1"}, 20)
    saved = {"mode": "dataflow", "config": CONFIG, "handle": {"task_id": "task-1"}}
    stored = context["task_state_store"][KEY]
    assert opened_state(stored, context["ti"], KEY) == saved
    assert opened_state(stored, TaskInstanceIds(task_id="build_image"), KEY) is None, "sealed for this task"


def test_the_triggers_event_is_read_back_into_the_outcome_it_sent() -> None:
    operator = StagingWait(import_task="task-1")
    trigger = deferred(operator, task_context())
    event = {
        "status": "failed",
        "handle": trigger.handle,
        "config": trigger.config,
        "message": "AccessDenied",
    }

    outcome = operator.remote_outcome(event)

    assert (outcome.status, outcome.handle, outcome.config) == ("failed", {"task_id": "task-1"}, CONFIG)
    assert outcome.message == "AccessDenied"


def test_a_timed_out_wait_cancels_the_import_it_saved(nas: NasDataFlowEmulator) -> None:
    operator, context = StagingWait(import_task=started_import()), task_context()
    deferred(operator, context)

    timed_out(operator, context)

    (cancel,) = nas.requests_for("CancelDataFlowTask")
    assert cancel.query == {
        "FileSystemId": FILE_SYSTEM,
        "DataFlowId": DATA_FLOW,
        "TaskId": operator.import_task,
    }
    assert nas.tasks[operator.import_task].status == "Canceling"


def test_a_run_another_writer_saved_under_the_key_is_left_alone(nas: NasDataFlowEmulator) -> None:
    import_task = started_import()
    context = task_context()
    saved = {"mode": "dataflow", "config": CONFIG, "handle": {"task_id": import_task}}
    context["task_state_store"].set(KEY, sealed_state(saved, TaskInstanceIds(task_id="other_task"), KEY))

    timed_out(StagingWait(import_task=import_task), context)

    assert nas.requests_for("CancelDataFlowTask") == []
    assert nas.tasks[import_task].status == "Pending"
