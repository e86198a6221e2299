"""The promotion gate's decisions: the rule applied to the candidate's numbers and the champion's."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from aliyun_training.declaration import DeclarationError, declare
from aliyun_training.promotion import Champion, Comparison, PromotionRule, decide
from aliyun_training.stage_records import ArtifactSet

CHAMPION = Champion(
    run_id="scheduled__2026-11-22",
    dataset_version="2026-11-22",
    artifacts=ArtifactSet(uri="a/", manifest_uri="a/m", report_uri="a/r", metrics={"final_test_loss": 0.8}),
)


def _decide(rule: PromotionRule, loss: float | None, champion: Champion | None = CHAMPION, **run: str):
    metrics = {} if loss is None else {"final_test_loss": loss}
    comparison = Comparison.of_final_metrics(metrics, champion)
    return decide(rule, comparison, run.get("run_id", "manual__1"), run.get("run_type", "manual"))


LOSS = PromotionRule(metric="final_test_loss", direction="min", min_improvement=0.1, relative=True)


@pytest.mark.parametrize(
    ("loss", "promoted"),
    [(0.72, True), (0.7201, False), (0.5, True), (0.8, False), (0.9, False)],
)
def test_a_lower_is_better_metric_must_improve_by_a_fraction_of_the_champion(
    loss: float, promoted: bool
) -> None:
    decision = _decide(LOSS, loss)

    assert decision.promoted is promoted
    assert decision.required == pytest.approx(0.72), "0.8 less 10 % of it"
    assert decision.champion == 0.8 and decision.champion_run_id == CHAMPION.run_id


def test_a_backfill_never_promotes_unless_the_rule_lets_it() -> None:
    held = _decide(LOSS, 0.1, run_type="backfill")
    allowed = _decide(LOSS.model_copy(update={"backfills_promote": True}), 0.1, run_type="backfill")

    assert not held.promoted and "backfill" in held.reason
    assert allowed.promoted
    # Registered only, not held by the gate: a registry with an approval state leaves it pending.
    assert not held.held and held.registered_only
    worse = _decide(LOSS.model_copy(update={"backfills_promote": True}), 0.9, run_type="backfill")
    assert worse.held, "a backfill the rule compares is held like any run"


def test_a_model_trained_on_an_older_version_than_the_champions_is_held_unless_the_rule_lets_it() -> None:
    comparison = Comparison.of_final_metrics({"final_test_loss": 0.1}, CHAMPION)
    held = decide(LOSS, comparison, "manual__1", "manual", older_than_champion="2026-11-29")
    allowed = decide(
        LOSS.model_copy(update={"older_versions_promote": True}),
        comparison,
        "manual__1",
        "manual",
        "2026-11-29",
    )
    first = decide(LOSS, Comparison.of_final_metrics({"final_test_loss": 0.1}, None), "m", "manual", None)

    assert not held.promoted and "older dataset version than the champion's 2026-11-29" in held.reason
    assert allowed.promoted and first.promoted


def test_without_a_champion_the_first_model_is_promoted_or_held_as_declared() -> None:
    first = _decide(LOSS, 1.5, champion=None)
    held = _decide(LOSS.model_copy(update={"without_champion": "hold"}), 1.5, champion=None)

    assert first.promoted and first.required is None and first.champion_run_id is None
    assert not held.promoted and "no champion" in held.reason


def test_a_retry_of_the_run_that_became_champion_stays_promoted() -> None:
    """The pointer moved, then the task failed before it succeeded: its retry must not compare the
    run with itself (it would be held, by less than min_improvement) but conclude again."""
    again = _decide(LOSS, 0.8, run_id=CHAMPION.run_id)

    assert again.promoted and "already the champion" in again.reason


def test_a_candidate_that_did_not_report_the_metric_is_held_naming_it() -> None:
    decision = _decide(LOSS, None)

    assert not decision.promoted and decision.reason == "the run's final_test_loss was not reported"


def test_an_evaluation_compares_both_models_as_scored_on_the_same_data_not_their_records() -> None:
    """The champion scored 0.8 when it was promoted; on this run's data it scores 0.6, and the
    candidate 0.65: the candidate is better on the same data, by the rule's 0.04."""
    rule = PromotionRule(metric="test_accuracy", min_improvement=0.04)
    comparison = Comparison(
        candidate={"test_accuracy": 0.65},
        champion={"test_accuracy": 0.6},
        champion_run_id=CHAMPION.run_id,
        basis="evaluation",
    )

    decision = decide(rule, comparison, "manual__2", "manual")

    assert decision.promoted and decision.basis == "evaluation"
    assert decision.required == pytest.approx(0.64) and "evaluation" in decision.reason
    assert decision.metrics == {"test_accuracy": 0.65}, "recorded as the champion's, if promoted"


def test_a_pass_needs_approval_when_the_rule_asks_for_it_and_a_hold_never_does() -> None:
    rule = LOSS.model_copy(update={"approval": {"timeout_hours": 1}})

    assert _decide(rule, 0.5).needs_approval
    assert not _decide(rule, 0.9).needs_approval, "nothing to approve"
    assert not _decide(rule, 0.8, run_id=CHAMPION.run_id).needs_approval, "approved already"


def test_without_evaluation_a_rule_on_unmeasured_metrics_is_refused_naming_the_fix() -> None:
    declared = {
        "pipeline": {"dag_id": "d"},
        "dataset": {"name": "d"},
        "training": {"code_dir": ".", "command": "python t.py"},
        "promotion": {"metric": "test_accuracy"},
    }

    with pytest.raises(DeclarationError, match=r"no evaluation job measures them \(fix: name final_"):
        declare(declared, Path.cwd())
    declared["evaluation"] = {"command": "python e.py"}
    assert declare(declared, Path.cwd()).promotion is not None
    with pytest.raises(DeclarationError, match=r"evaluation\.command: placeholders"):
        declare({**declared, "evaluation": {"command": "python e.py --n {epochs}"}}, Path.cwd())


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"metric": "final test accuracy"}, "metric"),
        ({"metric": "final_test_accuracy", "direction": "up"}, "direction"),
        ({"metric": "final_test_accuracy", "min_improvement": -1}, "min_improvement"),
        ({"metric": "final_test_accuracy", "guards": {"final_test_loss": {}}}, "guards"),
        ({"metric": "final_test_accuracy", "guards": {"final_test_loss": {"min": 2, "max": 1}}}, "guards"),
        ({"metric": "final_test_accuracy", "gate": "strict"}, "gate"),
    ],
)
def test_a_malformed_rule_is_refused_naming_the_field(block: dict, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        PromotionRule.model_validate(block)

    assert field in str(refused.value)


def test_a_publish_task_with_a_rule_but_no_champion_asset_is_refused_before_it_publishes(
    tmp_path: Path,
) -> None:
    """The rule reaches the gate through the run's plan only, so a task built without the Asset its
    pointer is kept on is refused when the plan brings a rule, before anything is published."""
    from airflow.sdk.exceptions import AirflowFailException

    from aliyun_training.operators.artifacts import ArtifactsOperator

    operator = ArtifactsOperator(
        task_id="publish_artifacts",
        artifacts={
            "model": "digits",
            "artifact_root": str(tmp_path / "artifacts"),
            "promotion": LOSS.model_dump(mode="json"),
        },
        job_result={"job_id": "dlc-1"},
        runtime=None,
    )

    with pytest.raises(
        AirflowFailException, match="a promotion rule needs the champion Asset its pointer is kept on"
    ):
        operator.execute({})  # type: ignore[arg-type]
    assert not (tmp_path / "artifacts").exists(), "nothing is published"


NON_FINITE = [float("nan"), float("inf"), float("-inf"), 10**400]
ACCURACY = PromotionRule(metric="final_test_accuracy")


@pytest.mark.parametrize("score", NON_FINITE, ids=["nan", "inf", "-inf", "huge-int"])
def test_a_non_finite_candidate_is_never_promoted_even_with_no_champion(score: float) -> None:
    """The readers refuse such numbers; the gate is the second line, for a number that got past them."""
    first = decide(ACCURACY, Comparison(candidate={"final_test_accuracy": score}), "manual__1", "manual")

    assert not first.promoted
    assert first.candidate is None, "no non-finite number is recorded as the candidate's score"
    assert "final_test_accuracy is " in first.reason and "not a finite number" in first.reason


@pytest.mark.parametrize("score", NON_FINITE, ids=["nan", "inf", "-inf", "huge-int"])
def test_a_champion_recorded_with_a_non_finite_score_is_replaced_by_a_finite_candidate(score: float) -> None:
    """NaN would lose every comparison and Infinity win every one: the champion would stay for ever."""
    comparison = Comparison(
        candidate={"final_test_accuracy": 0.5},
        champion={"final_test_accuracy": score},
        champion_run_id="scheduled__2026-11-15",
    )

    decision = decide(ACCURACY, comparison, "manual__1", "manual")

    assert decision.promoted and decision.champion is None and decision.required is None
    assert decision.reason.startswith("the champion (scheduled__2026-11-15) has no score to beat: its ")


def test_a_guard_on_a_non_finite_metric_fails_whatever_its_bound() -> None:
    """Infinity is above any min and -Infinity below any max: a guard with one bound would pass them."""
    rule = PromotionRule(metric="final_test_accuracy", guards={"final_test_loss": {"min": 0.0}})
    comparison = Comparison(candidate={"final_test_accuracy": 0.9, "final_test_loss": float("inf")})

    decision = decide(rule, comparison, "manual__1", "manual")

    assert not decision.promoted
    assert decision.reason == (
        "guard failed: final_test_loss is Infinity, not a finite number: no comparison can use it"
    )


@pytest.mark.parametrize(
    ("bounds", "value", "text"),
    [
        ({"max": 3.0}, 0.41, "test_loss 0.41 ≤ max 3"),
        ({"max": 2.0}, 2.5, "test_loss 2.5 > max 2"),
        ({"min": 0.1, "max": 2.0}, 0.05, "test_loss 0.05 < min 0.1 and ≤ max 2"),
        ({"max": 2.0}, None, "test_loss (no number) needs ≤ max 2"),
    ],
)
def test_a_guard_reads_as_its_value_beside_each_bound_it_keeps_or_breaks(
    bounds: dict[str, float], value: float | None, text: str
) -> None:
    rule = PromotionRule(metric="final_test_accuracy", guards={"test_loss": bounds})
    metrics = {"final_test_accuracy": 0.9, **({} if value is None else {"test_loss": value})}

    (guard,) = decide(rule, Comparison(candidate=metrics), "manual__1", "manual").guards

    assert guard.text() == text


def test_an_approval_that_timed_out_leaves_promote_to_record_it_and_says_no_one_answered() -> None:
    from datetime import UTC, datetime

    from airflow.sdk import DAG, BaseOperator

    from aliyun_training.operators.approval import PromotionApprovalOperator
    from aliyun_training.promotion import Approval, Outcome
    from aliyun_training.stage_records import ApprovalAnswer

    with DAG("scores_approved", schedule=None):
        ask = PromotionApprovalOperator(
            task_id="approve_promotion", published=None, approval=Approval(), model="scores"
        )
        ask >> BaseOperator(task_id="promote")
    event = {
        "chosen_options": ["Reject"],
        "params_input": {},
        "responded_at": datetime(2026, 11, 25, tzinfo=UTC),
        "responded_by_user": None,
        "timedout": True,
    }

    # No task instance in the context: Airflow's ApprovalOperator would need one to skip promote.
    answer = ApprovalAnswer.model_validate(ask.execute_complete({}, event))  # type: ignore[arg-type]

    assert answer.timed_out and answer.rejects
    refusal = answer.refusal([])
    assert refusal == "no one answered the approval in time, and its default answer 'Reject' applied"
    outcome = Outcome.refused(answer, refusal)
    assert (outcome.state, outcome.headline, outcome.promoted) == (
        "approval_timed_out",
        "Approval timed out",
        False,
    )
