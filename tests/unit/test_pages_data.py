"""What the pages say of a pipeline's runs, from the records the runs' tasks left: what each run did
to the champion (the outcome ``promote`` recorded, the one its report shows, else the gate's decision
and the tasks' states) and which run's model was the champion after each."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from aliyun_training.pages.runs import (
    AWAITING_APPROVAL,
    CHAMPION,
    HELD,
    NOT_APPROVED,
    PENDING,
    RunRow,
    champions_after,
    promotion_status,
    run_gpu_hours,
)
from aliyun_training.promotion import Approval, Comparison, Outcome, PromotionRule, decide
from aliyun_training.stage_records import ApprovalAnswer

RULE = PromotionRule(metric="test_accuracy")
APPROVED = PromotionRule(metric="test_accuracy", approval=Approval(approvers=["alice"]))


def _decision(
    run_id: str, score: float, champion: str | None = None, rule: PromotionRule = RULE
) -> dict[str, Any]:
    """The gate's decision on ``score`` against a champion of 0.5 (``champion``: its run)."""
    comparison = Comparison(
        candidate={"test_accuracy": score},
        champion={"test_accuracy": 0.5} if champion else None,
        champion_run_id=champion,
    )
    return decide(rule, comparison, run_id, "manual").model_dump(mode="json")


def _row(run_id: str, decision: dict[str, Any] | None = None, **tasks: Any) -> RunRow:
    moment = datetime(2026, 11, 22, tzinfo=UTC)
    return RunRow(
        run_id=run_id,
        run_type="manual",
        state=tasks.pop("state", "success"),
        logical_date=moment,
        started=tasks.pop("started", moment),
        ended=tasks.pop("ended", moment),
        promotion=decision,
        **tasks,
    )


def _returned(outcome: Outcome) -> dict[str, Any]:
    """What promote returns of ``outcome``."""
    return {
        "promoted": outcome.promoted,
        "run_id": "r",
        "reason": outcome.reason,
        "outcome": outcome.model_dump(mode="json"),
    }


def test_a_run_without_a_gate_says_nothing_of_the_champion() -> None:
    assert promotion_status(_row("manual__1")) is None


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        (Outcome(state="promoted", reason="test_accuracy 0.7 reaches at least 0.5"), CHAMPION),
        (Outcome(state="held", reason="the champion changed to manual__0"), HELD),
        (
            Outcome(state="not_approved", reason="mallory approved, but is not one of the approvers"),
            NOT_APPROVED,
        ),
    ],
)
def test_once_promote_returned_the_page_says_its_outcome_with_its_reason(
    outcome: Outcome, label: str
) -> None:
    row = _row("manual__2", _decision("manual__2", 0.7, "manual__1"), promoted=_returned(outcome))

    assert promotion_status(row) == (label, outcome.reason)


def test_a_promotion_refused_by_its_approval_says_what_the_report_says() -> None:
    answer = ApprovalAnswer(option="Reject", timed_out=True)
    refusal = answer.refusal(["alice"])
    assert refusal is not None
    left = Outcome.refused(answer, refusal)
    row = _row(
        "manual__2",
        _decision("manual__2", 0.7, rule=APPROVED),
        skipped_outcome=left.model_dump(mode="json"),
        promote_state="skipped",
        approval_state="success",
    )

    assert promotion_status(row) == (NOT_APPROVED, refusal)
    assert left.headline == "Approval timed out"


def test_a_promote_record_from_before_it_carried_its_outcome_says_whether_it_promoted() -> None:
    row = _row(
        "manual__2", _decision("manual__2", 0.7), promoted={"promoted": False, "run_id": "r", "reason": "x"}
    )

    assert promotion_status(row) == (HELD, "x")


def test_before_promote_recorded_anything_the_gate_and_the_tasks_states_say_it() -> None:
    held = _decision("manual__1", 0.4, "manual__0")
    passed = _decision("manual__1", 0.7, "manual__0")
    needs = _decision("manual__1", 0.7, rule=APPROVED)

    assert promotion_status(_row("manual__1", held, promote_state="success")) == (HELD, held["reason"])
    assert promotion_status(_row("manual__1", needs, approval_state="awaiting_input"))[0] == AWAITING_APPROVAL
    assert promotion_status(_row("manual__1", needs, promote_state="skipped"))[0] == NOT_APPROVED
    assert promotion_status(_row("manual__1", passed, promote_state="queued"))[0] == PENDING
    assert promotion_status(_row("manual__1", passed, state="running")) == (
        PENDING,
        f"the gate passed it ({passed['reason']}); promote has not run yet",
    )
    assert promotion_status(_row("manual__1", passed, promote_state="failed")) == (
        HELD,
        f"the gate passed it ({passed['reason']}), but promote ended failed",
    )
    # A run from before the promote task existed: its gate's decision promoted it.
    assert promotion_status(_row("manual__1", passed)) == (CHAMPION, passed["reason"])


def test_the_champion_after_each_run_follows_the_runs_that_promote_moved_the_pointer_to() -> None:
    promoted = Outcome(state="promoted", reason="better")
    held = Outcome(state="held", reason="worse")
    rows = [  # newest first, as the page lists them
        _row("manual__4"),  # no gate decided: not on the timeline
        _row("manual__3", _decision("manual__3", 0.8, "manual__1"), promoted=_returned(promoted)),
        _row("manual__2", _decision("manual__2", 0.4, "manual__1"), promoted=_returned(held)),
        _row("manual__1", _decision("manual__1", 0.6, "manual__0"), promoted=_returned(promoted)),
    ]

    timeline = champions_after(rows)

    assert [(step.run.run_id, step.champion_run_id, step.changed) for step in timeline] == [
        ("manual__1", "manual__1", True),
        ("manual__2", "manual__1", False),
        ("manual__3", "manual__3", True),
    ]
    assert timeline[1].champion is rows[3], "the champion's own row, where it is listed"


def test_a_gate_that_compared_with_a_champion_rolled_back_to_moves_the_timeline_there() -> None:
    promoted = Outcome(state="promoted", reason="better")
    held = Outcome(state="held", reason="worse")
    rows = [  # manual__2 promoted, then someone rolled back to manual__1 before manual__3 ran
        _row("manual__3", _decision("manual__3", 0.5, "manual__1"), promoted=_returned(held)),
        _row("manual__2", _decision("manual__2", 0.8, "manual__1"), promoted=_returned(promoted)),
        _row("manual__1", _decision("manual__1", 0.6, None), promoted=_returned(promoted)),
    ]

    timeline = champions_after(rows)

    assert [(step.champion_run_id, step.changed) for step in timeline] == [
        ("manual__1", True),
        ("manual__2", True),
        ("manual__1", False),
    ]


def test_a_run_whose_gate_compared_while_an_older_one_awaited_approval_does_not_undo_its_promotion() -> None:
    promoted = Outcome(state="promoted", reason="better")
    held = Outcome(state="held", reason="worse")
    noon = datetime(2026, 11, 22, 12, tzinfo=UTC)
    rows = [  # manual__2 started (and compared with manual__0) while manual__1 waited for its approval
        _row("manual__2", _decision("manual__2", 0.5, "manual__0"), promoted=_returned(held)),
        _row("manual__1", _decision("manual__1", 0.8, "manual__0"), promoted=_returned(promoted), ended=noon),
    ]

    timeline = champions_after(rows)

    assert [step.champion_run_id for step in timeline] == ["manual__1", "manual__1"]


def test_before_the_first_listed_promotion_the_champion_is_the_one_its_gate_compared_with() -> None:
    held = Outcome(state="held", reason="worse")
    rows = [_row("manual__9", _decision("manual__9", 0.4, "scheduled__1"), promoted=_returned(held))]

    (step,) = champions_after(rows)

    assert (step.champion_run_id, step.champion, step.changed) == ("scheduled__1", None, False)


def test_a_run_counts_each_job_of_its_tries_once_at_its_largest_record() -> None:
    # Try 1 lost track of job a at 2 GPU-hours, try 2 saw it end at 3.5, then ran job b.
    attempts = [
        {"job_id": "a", "gpu_hours": 2.0},
        {"job_id": "a", "gpu_hours": 3.5},
        {"job_id": "b", "gpu_hours": 8.0},
    ]

    assert run_gpu_hours({"job_id": "b", "gpu_hours": 8.0, "attempts": attempts}) == 11.5
    assert run_gpu_hours({"job_id": "b", "gpu_hours": 8.0}) == 8.0, "a record from before tries were kept"
