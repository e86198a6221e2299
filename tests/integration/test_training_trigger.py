"""TrainingJobTrigger against real local jobs: serialization, streaming, outcomes and on_kill."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk._shared.module_loading import import_string

from aliyun_training.backends.local import LocalBackend
from aliyun_training.backends.local_node import job_pids
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.triggers.training import TrainingJobTrigger

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from airflow.triggers.base import TriggerEvent

TORCHRUN = (
    "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT "
    "--nproc_per_node=1 {script}"
)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A backend whose jobs are all stopped after the test, also when the test failed midway."""
    backend = LocalBackend(root=str(tmp_path / "runs"), stop_grace_seconds=3)
    yield backend
    for job_dir in backend.root.glob("*/job.json"):
        found = backend.find(job_dir.parent.name)
        if found is not None:
            backend.stop(found.handle)


def make_trigger(backend: LocalBackend, spec: TrainingJobSpec, name: str) -> TrainingJobTrigger:
    handle = backend.submit(spec, name)
    return TrainingJobTrigger(
        backend="local", handle=handle.model_dump(), backend_config=backend.config, poll_interval=0.2
    )


async def first_event(trigger: TrainingJobTrigger) -> TriggerEvent:
    async for event in trigger.run():
        return event
    raise AssertionError("trigger finished without an event")


def test_trigger_round_trips_through_serialize_and_its_classpath(backend: LocalBackend) -> None:
    trigger = TrainingJobTrigger(
        backend="local",
        handle={"backend": "local", "job_id": "j.1", "name": "j"},
        backend_config=backend.config,
        poll_interval=3.0,
        log_cursor={"node-0": 12},
        last_raw_status="Running",
    )

    classpath, kwargs = trigger.serialize()
    rebuilt = import_string(classpath)(**kwargs)

    assert classpath == "aliyun_training.triggers.training.TrainingJobTrigger"
    assert isinstance(rebuilt, TrainingJobTrigger)
    assert rebuilt.serialize() == (classpath, kwargs)


def test_a_trigger_must_name_each_argument_it_is_rebuilt_from() -> None:
    with pytest.raises(TypeError, match=r"takes \*options: name each argument instead"):

        class Loose(TrainingJobTrigger):
            def __init__(self, **options: Any) -> None:
                super().__init__(**options)


class TaskLog:
    """What the trigger logged so far; the triggerer routes these lines into the task log."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self.capfd = capfd
        self.text = ""

    def read(self) -> str:
        self.text += self.capfd.readouterr().out
        return self.text


@pytest.mark.slow
async def test_log_lines_and_transitions_reach_the_log_while_the_job_runs(
    backend: LocalBackend, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate"
    spec = TrainingJobSpec(
        nodes=2, command=f"echo epoch-1 rank $RANK; while [ ! -e {gate} ]; do sleep 0.05; done; echo done"
    )
    trigger = make_trigger(backend, spec, "streaming")
    log = TaskLog(capfd)
    task = asyncio.create_task(first_event(trigger))

    deadline = time.monotonic() + 20
    while log.read().count("epoch-1 rank") < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert "[node-0] epoch-1 rank 0" in log.text and "[node-1] epoch-1 rank 1" in log.text
    assert "submitted -> Running" in log.text
    assert not task.done(), "the trigger must still be waiting: the lines arrived while the job ran"

    gate.touch()
    event = await asyncio.wait_for(task, 30)

    assert event.payload["status"] == "succeeded"
    assert event.payload["job_status"]["state"] == "succeeded"
    assert "Running -> Succeeded" in log.read()
    assert log.text.count("epoch-1 rank") == 2, "no line may be logged twice"


async def test_a_failed_job_yields_the_failing_node_and_its_last_lines(backend: LocalBackend) -> None:
    spec = TrainingJobSpec(
        nodes=2,
        command=(
            'for i in $(seq 1 80); do echo "line $i of rank $RANK"; done; '
            '[ "$RANK" != 1 ] || exit 9; sleep 60'
        ),
    )
    trigger = make_trigger(backend, spec, "failing")

    event = await asyncio.wait_for(first_event(trigger), 30)

    assert event.payload["status"] == "failed"
    assert event.payload["failed_node"] == 1
    assert event.payload["job_status"]["reason"] == "node 1 (RANK=1) exited with code 9"
    assert event.payload["tail"] == [f"line {i} of rank 1" for i in range(31, 81)]


async def test_a_vanished_run_directory_yields_an_error_event(backend: LocalBackend) -> None:
    trigger = TrainingJobTrigger(
        backend="local",
        handle={"backend": "local", "job_id": "gone.1", "name": "gone"},
        backend_config=backend.config,
    )

    event = await asyncio.wait_for(first_event(trigger), 10)

    assert event.payload["status"] == "error"
    assert "FileNotFoundError" in event.payload["message"]


@pytest.mark.slow
@pytest.mark.slow
async def test_on_kill_while_deferred_leaves_no_training_process(
    backend: LocalBackend, tmp_path: Path
) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('worker ready', flush=True)\ntime.sleep(300)\n")
    trigger = make_trigger(
        backend, TrainingJobSpec(nodes=2, command=TORCHRUN.format(script=script)), "killed"
    )
    handle = trigger.job_handle
    task = asyncio.create_task(first_event(trigger))
    deadline = time.monotonic() + 60
    while len(backend.logs(handle).lines) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    # supervisor + torchrun + worker per node, the workers in sessions of their own.
    assert len(job_pids(f"{handle.job_id}:")) >= 6

    task.cancel()
    await trigger.on_kill()

    assert job_pids(f"{handle.job_id}:") == set()
    assert backend.status(handle).state.value == "stopped"


@pytest.mark.slow
async def test_cleanup_never_stops_the_job(backend: LocalBackend) -> None:
    trigger = make_trigger(backend, TrainingJobSpec(nodes=1, command="sleep 300"), "survives")
    handle = trigger.job_handle

    await trigger.cleanup()
    await asyncio.sleep(0.5)

    assert backend.status(handle).state.value == "running"
    backend.stop(handle)
