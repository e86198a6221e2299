"""triggers.base.PollingTrigger, driven through a minimal concrete trigger on a real event loop.

Covers serialization (exactly the ``__init__`` arguments, per subclass, so the triggerer rebuilds
the same trigger; variadic arguments refused), the poll loop (one event once ``poll`` has an
outcome, polls spaced by ``poll_interval``, none after the last), an exception while polling ending
the wait with an ``error`` event that names it, cancellation firing nothing, and ``on_kill``
stopping the work.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk._shared.module_loading import import_string

from aliyun_training.stage_records import OutcomeStatus, TriggerOutcome
from aliyun_training.triggers.base import PollingTrigger

if TYPE_CHECKING:
    from airflow.triggers.base import TriggerEvent

Outcome = TriggerOutcome[dict[str, Any]]


class ScriptedTrigger(PollingTrigger):
    """Work that ends after ``polls`` polls with ``status``; poll number ``fail_at`` raises instead."""

    def __init__(
        self,
        job_id: str,
        polls: int = 1,
        status: str = "succeeded",
        fail_at: int | None = None,
        poll_interval: float = 0.0,
        *,
        note: str = "",
    ) -> None:
        super().__init__()
        self.job_id = job_id
        self.polls = polls
        self.status = status
        self.fail_at = fail_at
        self.poll_interval = poll_interval
        self.note = note
        # Built in the triggerer, not arguments: never serialized.
        self.polled_at: list[float] = []
        self.stops = 0

    @property
    def subject(self) -> str:
        return f"scripted job {self.job_id}"

    async def poll(self) -> Outcome | None:
        self.polled_at.append(asyncio.get_running_loop().time())
        if self.fail_at == len(self.polled_at):
            raise RuntimeError(f"lost track of {self.job_id}")
        if len(self.polled_at) < self.polls:
            return None
        return self.outcome(OutcomeStatus(self.status), f"after {len(self.polled_at)} polls")

    def outcome(self, status: OutcomeStatus, message: str = "") -> Outcome:
        return Outcome(status=status, handle={"job_id": self.job_id}, message=message)

    async def stop(self) -> None:
        self.stops += 1


async def events(trigger: PollingTrigger) -> list[TriggerEvent]:
    return [event async for event in trigger.run()]


# -- serialization -----------------------------------------------------------------------------------


def test_serialize_returns_the_classpath_and_exactly_the_init_arguments_when_the_trigger_is_rebuilt() -> None:
    trigger = ScriptedTrigger("j-1", polls=4, fail_at=2, poll_interval=0.5, note="keyword-only")
    trigger.polled_at.append(1.0)

    classpath, kwargs = trigger.serialize()
    rebuilt = import_string(classpath)(**json.loads(json.dumps(kwargs)))

    assert kwargs == {
        "job_id": "j-1",
        "polls": 4,
        "status": "succeeded",
        "fail_at": 2,
        "poll_interval": 0.5,
        "note": "keyword-only",
    }, "every argument, keyword-only ones too, and none of the state built in the triggerer"
    assert type(rebuilt) is ScriptedTrigger
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.polled_at == [], "state is rebuilt, not carried"


def test_a_subclass_serializes_its_own_arguments_and_leaves_its_parents_unchanged() -> None:
    class Labelled(ScriptedTrigger):
        def __init__(self, job_id: str, label: str, poll_interval: float = 1.0) -> None:
            super().__init__(job_id, poll_interval=poll_interval)
            self.label = label

    class Renamed(ScriptedTrigger):
        """Inherits ``__init__``, so its arguments are its parent's."""

        @property
        def subject(self) -> str:
            return f"renamed job {self.job_id}"

    labelled_path, labelled = Labelled("j-2", "nightly").serialize()
    renamed_path, renamed = Renamed("j-3").serialize()

    assert labelled == {"job_id": "j-2", "label": "nightly", "poll_interval": 1.0}
    assert labelled_path.endswith(".Labelled")
    assert set(renamed) == set(ScriptedTrigger("j-3").serialize()[1]) and renamed["job_id"] == "j-3"
    assert renamed_path.endswith(".Renamed")
    assert "label" not in ScriptedTrigger("j-4").serialize()[1]


def test_a_trigger_taking_star_args_is_refused_when_its_class_is_defined() -> None:
    with pytest.raises(TypeError, match=r"Loose\.__init__ takes \*extra: name each argument instead"):

        class Loose(ScriptedTrigger):
            def __init__(self, job_id: str, *extra: str) -> None:
                super().__init__(job_id)


def test_a_trigger_missing_part_of_the_polling_contract_cannot_be_built() -> None:
    class NoStop(PollingTrigger):
        def __init__(self, poll_interval: float = 1.0) -> None:
            super().__init__()
            self.poll_interval = poll_interval

        @property
        def subject(self) -> str:
            return "nothing"

        async def poll(self) -> Outcome | None:
            return None

        def outcome(self, status: OutcomeStatus, message: str = "") -> Outcome:
            return Outcome(status=status, handle={}, message=message)

    with pytest.raises(TypeError, match=r"abstract method.*\bstop\b"):
        NoStop()  # type: ignore[abstract]


# -- the poll loop -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["succeeded", "failed", "stopped"])
async def test_the_outcome_is_fired_once_as_json_after_polling_until_the_work_ended(status: str) -> None:
    trigger = ScriptedTrigger("j-1", polls=3, status=status)

    (event,) = await events(trigger)

    assert len(trigger.polled_at) == 3, "no poll after the one with the outcome"
    assert json.loads(json.dumps(event.payload)) == event.payload, "the triggerer stores it as JSON"
    outcome = Outcome.model_validate(event.payload)
    assert (outcome.status.value, outcome.handle, outcome.message) == (
        status,
        {"job_id": "j-1"},
        "after 3 polls",
    )


async def test_polls_are_spaced_by_the_poll_interval_while_the_work_runs() -> None:
    interval = 0.05
    trigger = ScriptedTrigger("j-1", polls=3, poll_interval=interval)

    await events(trigger)

    gaps = [later - earlier for earlier, later in zip(trigger.polled_at, trigger.polled_at[1:], strict=False)]
    assert len(gaps) == 2 and min(gaps) >= interval * 0.9, gaps


async def test_an_outcome_on_the_first_poll_is_fired_without_waiting_a_poll_interval() -> None:
    trigger = ScriptedTrigger("j-1", polls=1, poll_interval=60.0)

    (event,) = await asyncio.wait_for(events(trigger), timeout=5)

    assert event.payload["status"] == "succeeded"


async def test_an_exception_while_polling_ends_the_wait_with_an_error_event_naming_it(
    capfd: pytest.CaptureFixture[str],
) -> None:
    trigger = ScriptedTrigger("j-7", polls=5, fail_at=2)

    (event,) = await events(trigger)

    outcome = Outcome.model_validate(event.payload)
    assert outcome.status is OutcomeStatus.ERROR
    assert outcome.message == "RuntimeError: lost track of j-7"
    assert outcome.handle == {"job_id": "j-7"}, "the operator can still address the work"
    assert len(trigger.polled_at) == 2, "the wait ends at the failing poll"
    logged = capfd.readouterr().out  # the triggerer routes the trigger's log into the task log
    assert "Watching scripted job j-7 failed" in logged
    assert "RuntimeError: lost track of j-7" in logged.partition("Watching")[2], "with its traceback"


async def test_cancelling_the_wait_fires_no_event_and_reports_no_error() -> None:
    trigger = ScriptedTrigger("j-1", polls=1_000, poll_interval=10.0)
    fired: list[TriggerEvent] = []

    async def collect() -> None:
        async for event in trigger.run():
            fired.append(event)

    task = asyncio.create_task(collect())
    while not trigger.polled_at:
        await asyncio.sleep(0)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert fired == [], "a trigger moved to another triggerer must not end the task with an error"


# -- on_kill -----------------------------------------------------------------------------------------


async def test_on_kill_stops_the_work_and_logs_what_it_stops(capfd: pytest.CaptureFixture[str]) -> None:
    trigger = ScriptedTrigger("j-9")

    await trigger.on_kill()

    assert trigger.stops == 1
    assert "Task was killed while deferred: stopping scripted job j-9" in capfd.readouterr().out
    assert trigger.polled_at == [], "killing stops the work without polling it"
