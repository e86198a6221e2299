"""A gate that can lock: a rule no later model can meet (the champion at its metric's bound) is
said in the decision, its reason, the report and the pipeline's page, and ``at_bound`` lets the
declaration decide on another metric instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from aliyun_training.artifacts.report import render_report
from aliyun_training.declaration import DeclarationError, declare
from aliyun_training.pages.views import pipeline_runs_page
from aliyun_training.promotion import (
    Comparison,
    Decision,
    Outcome,
    PromotionRule,
    decide,
    manifest_promotion,
)
from aliyun_training.validation import SpecError, validate_record
from tests.unit.test_artifacts import _job, _job_output, _manifest, _publish
from tests.unit.test_pages_views import DAG_ID, run

CHAMPION_RUN = "scheduled__2026-11-22"
#: cifar10.yaml's rule: half a point of test accuracy over the champion.
HALF_A_POINT = PromotionRule(metric="test_accuracy", min_improvement=0.005)
#: The same, deciding on the test loss while the accuracy cannot improve by half a point.
TIE_ON_LOSS = PromotionRule.model_validate(
    {
        "metric": "test_accuracy",
        "min_improvement": 0.005,
        "at_bound": {"metric": "test_loss", "direction": "min"},
    }
)


def _evaluated(candidate: dict[str, float], champion: dict[str, float] | None) -> Comparison:
    return Comparison(
        candidate=candidate,
        champion=champion,
        champion_run_id=CHAMPION_RUN if champion is not None else None,
        basis="evaluation",
    )


def _decide(rule: PromotionRule, candidate: dict[str, float], champion: dict[str, float] | None) -> Decision:
    return decide(rule, _evaluated(candidate, champion), "manual__1", "manual")


def test_a_champion_at_full_accuracy_locks_an_absolute_step_and_the_decision_says_so_with_the_fix() -> None:
    decision = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 1.0})

    assert not decision.promoted and decision.required == pytest.approx(1.005)
    assert decision.unreachable is not None
    assert "test_accuracy must reach at least 1.005 to beat the champion's 1" in decision.unreachable
    assert "beyond its assumed maximum 1" in decision.unreachable
    assert "fix: declare promotion.at_bound, e.g. {metric: test_loss, direction: min}" in decision.unreachable
    assert decision.reason.endswith(f"; {decision.unreachable}"), "the log line and the pages read the reason"


def test_a_champion_short_of_the_bound_by_less_than_the_step_locks_the_rule_too() -> None:
    """0.998 + 0.005 lies beyond 1: even a perfect model misses, so the gate says so already."""
    decision = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 0.998})

    assert not decision.promoted
    assert decision.unreachable is not None and "at least 1.003" in decision.unreachable


def test_a_reachable_rule_says_nothing_of_a_lock() -> None:
    decision = _decide(HALF_A_POINT, {"test_accuracy": 0.95}, {"test_accuracy": 0.9})

    assert decision.promoted and decision.unreachable is None and decision.tie_break is None
    assert "locked" not in decision.reason


def test_the_model_that_becomes_a_locking_champion_is_told_before_the_next_run() -> None:
    """A first model at 1.0 passes; its decision already says no later model can beat it."""
    first = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, None)
    beaten = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 0.99})

    assert first.promoted and beaten.promoted
    for decision in (first, beaten):
        assert decision.unreachable is not None
        assert "to beat the champion's 1, beyond its assumed maximum 1" in decision.unreachable


def test_a_held_backfill_still_says_the_champion_locks_the_gate() -> None:
    decision = decide(
        HALF_A_POINT, _evaluated({"test_accuracy": 0.9}, {"test_accuracy": 1.0}), "backfill__1", "backfill"
    )

    assert not decision.promoted and "backfill" in decision.reason
    assert decision.unreachable is not None and "at least 1.005" in decision.unreachable


def test_a_relative_step_on_a_max_bounded_metric_locks_near_its_bound() -> None:
    relative = PromotionRule(metric="final_test_accuracy", min_improvement=0.02, relative=True)

    near = _decide(relative, {"final_test_accuracy": 0.99}, {"final_test_accuracy": 0.99})
    far = _decide(relative, {"final_test_accuracy": 0.9}, {"final_test_accuracy": 0.8})

    assert near.unreachable is not None and "at least 1.0098" in near.unreachable
    assert ", or make min_improvement relative" not in near.unreachable, "it is relative already"
    assert far.promoted and far.unreachable is None, "0.9 needs 0.918 next, within the range"


def test_a_declared_range_locks_a_loss_whose_fixed_step_passes_zero_and_a_relative_step_never_does() -> None:
    fixed = PromotionRule(metric="test_loss", direction="min", min_improvement=0.01, metric_range={"min": 0})
    relative = fixed.model_copy(update={"relative": True, "min_improvement": 0.1})

    locked = _decide(fixed, {"test_loss": 0.0}, {"test_loss": 0.005})
    moving = _decide(relative, {"test_loss": 0.0}, {"test_loss": 0.0})

    assert locked.unreachable is not None
    assert "at most -0.005" in locked.unreachable and "beyond its declared minimum 0" in locked.unreachable
    assert ", or make min_improvement relative" in locked.unreachable
    assert moving.promoted and moving.unreachable is None, "0 less 10 % of 0 is 0, which a tie reaches"


def test_an_accuracy_in_percent_is_not_assumed_bounded_by_one() -> None:
    decision = _decide(HALF_A_POINT, {"test_accuracy": 99.0}, {"test_accuracy": 98.0})

    assert decision.promoted and decision.unreachable is None


def test_an_unknown_metric_locks_only_where_the_value_to_reach_is_not_finite() -> None:
    score = PromotionRule(metric="score", min_improvement=1.0, relative=True)

    overflow = _decide(score, {"score": 1.7e308}, {"score": 1.7e308})
    ordinary = _decide(score, {"score": 1.0}, {"score": 1.0})

    assert overflow.unreachable is not None
    assert "score must reach at least inf to beat the champion's 1.7e+308, which no number reaches" in (
        overflow.unreachable
    )
    assert overflow.unreachable.endswith("(fix: lower promotion.min_improvement)"), "at_bound needs a bound"
    assert not ordinary.promoted and ordinary.unreachable is None


@pytest.mark.parametrize(("loss", "promoted"), [(0.2, True), (0.3, True), (0.4, False)])
def test_at_bound_decides_on_the_loss_for_a_model_that_ties_the_champion_at_the_bound(
    loss: float, promoted: bool
) -> None:
    decision = _decide(
        TIE_ON_LOSS, {"test_accuracy": 1.0, "test_loss": loss}, {"test_accuracy": 1.0, "test_loss": 0.3}
    )

    assert decision.promoted is promoted
    assert decision.reason.startswith(
        "test_accuracy cannot reach at least 1.005 (beyond its assumed maximum 1), so at_bound decides: "
        f"test_loss {loss:g} {'reaches' if promoted else 'misses'} at most 0.3"
    )
    assert decision.tie_break is not None
    assert (decision.tie_break.metric, decision.tie_break.candidate) == ("test_loss", loss)
    assert decision.tie_break.champion == 0.3 and decision.tie_break.required == 0.3
    assert decision.unreachable is None, "the gate can still move: on the loss"


def test_at_bound_holds_a_model_worse_than_the_champion_on_the_rules_metric_whatever_its_loss() -> None:
    decision = _decide(
        TIE_ON_LOSS, {"test_accuracy": 0.999, "test_loss": 0.01}, {"test_accuracy": 1.0, "test_loss": 0.3}
    )

    assert not decision.promoted and decision.tie_break is None
    assert "at_bound decides only for a model no worse than the champion's 1: this one has 0.999" in (
        decision.reason
    )


def test_at_bound_holds_a_candidate_that_did_not_report_its_metric_naming_it() -> None:
    decision = _decide(TIE_ON_LOSS, {"test_accuracy": 1.0}, {"test_accuracy": 1.0, "test_loss": 0.3})

    assert not decision.promoted and decision.reason.endswith("the run's test_loss was not reported")


def test_at_bound_is_not_consulted_while_the_rule_can_be_met() -> None:
    """0.95 + 0.005 is within the range: a better loss does not promote a model short of 0.955."""
    decision = _decide(
        TIE_ON_LOSS, {"test_accuracy": 0.952, "test_loss": 0.1}, {"test_accuracy": 0.95, "test_loss": 0.3}
    )

    assert not decision.promoted and decision.tie_break is None and decision.unreachable is None
    assert decision.reason.startswith("test_accuracy 0.952 misses at least 0.955")


def test_a_tie_break_that_cannot_improve_either_is_reported_as_the_lock() -> None:
    rule = PromotionRule.model_validate(
        {
            "metric": "test_accuracy",
            "min_improvement": 0.005,
            "at_bound": {
                "metric": "test_loss",
                "direction": "min",
                "min_improvement": 0.01,
                "metric_range": {"min": 0},
            },
        }
    )

    decision = _decide(
        rule, {"test_accuracy": 1.0, "test_loss": 0.0}, {"test_accuracy": 1.0, "test_loss": 0.004}
    )

    assert not decision.promoted
    assert decision.unreachable is not None
    assert "and at_bound's test_loss must reach at most -0.006" in decision.unreachable
    assert "fix: lower promotion.at_bound.min_improvement" in decision.unreachable


@pytest.mark.parametrize(
    ("at_bound", "says"),
    [
        ("compare", 'at_bound: "compare" is not an option (fix: write hold, or the metric to decide on'),
        ({"metric": "test_loss"}, "at_bound.direction: Field required (fix: use max (higher is better"),
        (
            {"metric": "test_accuracy", "direction": "min"},
            "at_bound decides on test_accuracy, the rule's own",
        ),
        (
            {"metric": "test_loss", "direction": "min", "extra": 1},
            "at_bound.extra: Extra inputs are not permitted",
        ),
    ],
)
def test_a_bad_at_bound_is_refused_naming_the_field_and_the_fix(at_bound: object, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        validate_record(PromotionRule, {"metric": "test_accuracy", "at_bound": at_bound})

    assert says in str(refused.value)


def test_at_bound_on_a_metric_without_a_known_bound_is_refused_in_the_declaration() -> None:
    declared = {
        "pipeline": {"dag_id": "d"},
        "dataset": {"name": "d"},
        "training": {"code_dir": ".", "command": "python t.py"},
        "evaluation": {"command": "python e.py"},
        "promotion": {"metric": "score", "at_bound": {"metric": "test_loss", "direction": "min"}},
    }

    with pytest.raises(
        DeclarationError, match=r"score has no known maximum.*fix: declare promotion\.metric_range"
    ):
        declare(declared, Path.cwd())
    declared["promotion"] = {**declared["promotion"], "metric_range": {"min": 0, "max": 10}}
    assert declare(declared, Path.cwd()).promotion is not None
    held = {**declared, "promotion": {"metric": "test_accuracy", "at_bound": "hold"}}
    rule = declare(held, Path.cwd()).promotion
    assert rule is not None and rule.at_bound is None, "hold is the default"


def test_a_decision_recorded_before_the_lock_check_still_validates() -> None:
    recorded = _decide(HALF_A_POINT, {"test_accuracy": 0.95}, {"test_accuracy": 0.9}).model_dump(mode="json")
    del recorded["unreachable"], recorded["tie_break"]

    decision = Decision.model_validate(recorded)

    assert decision.unreachable is None and decision.tie_break is None


def test_the_report_heads_its_promotion_section_with_the_lock_said_once(tmp_path: Path) -> None:
    decision = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 1.0})
    manifest = _manifest(_publish(tmp_path, _job(_job_output(tmp_path))))
    manifest["promotion"] = manifest_promotion(decision, Outcome.at_publication(decision, "manual__1"))

    html = render_report(manifest)

    assert decision.unreachable is not None
    assert '<p class="warning" role="alert"><strong>Promotion gate:</strong> the gate is locked: ' in html
    assert html.count("the gate is locked") == 1, "the outcome's reason does not repeat it"
    assert "<strong>Not promoted</strong>: test_accuracy 1 misses at least 1.005" in html


def test_the_report_shows_the_tie_break_numbers(tmp_path: Path) -> None:
    decision = _decide(
        TIE_ON_LOSS, {"test_accuracy": 1.0, "test_loss": 0.2}, {"test_accuracy": 1.0, "test_loss": 0.3}
    )
    manifest = _manifest(_publish(tmp_path, _job(_job_output(tmp_path))))
    manifest["promotion"] = manifest_promotion(decision, Outcome.at_publication(decision, "manual__1"))

    html = render_report(manifest)

    numbers = f"this run 0.2; champion 0.3 ({CHAMPION_RUN}); needed at most 0.3"
    assert f"<th>test_loss (at_bound)</th><td>{numbers}</td>" in html
    assert "the gate is locked" not in html


def test_the_pipeline_page_warns_of_the_lock_and_marks_the_run_that_said_it() -> None:
    locked = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 1.0})
    earlier = _decide(HALF_A_POINT, {"test_accuracy": 0.95}, {"test_accuracy": 0.9})
    rows = [
        run("manual__<2>", promotion=locked.model_dump(mode="json"), promote_state="skipped"),
        run("manual__1", promotion=earlier.model_dump(mode="json"), promote_state="success"),
    ]

    html = pipeline_runs_page(DAG_ID, rows)

    assert locked.unreachable is not None
    banner = "<p class='warning' role='alert'><strong>Promotion gate:</strong> the gate is locked: "
    assert banner in html and "{metric: test_loss, direction: min}" in html
    assert html.count("<small class='promotion-locked'") == 2, "the runs table and the champion timeline"
    assert (
        "title='the gate is locked: test_accuracy must reach at least 1.005 to beat the champion&#x27;s 1"
        in (html)
    ), "the sentence on hover, escaped"


def test_the_pipeline_page_says_nothing_of_a_lock_the_newest_decision_does_not_report() -> None:
    locked = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 1.0})
    moved = _decide(
        TIE_ON_LOSS, {"test_accuracy": 1.0, "test_loss": 0.1}, {"test_accuracy": 1.0, "test_loss": 0.3}
    )
    rows = [
        run("manual__2", promotion=moved.model_dump(mode="json"), promote_state="success"),
        run("manual__1", promotion=locked.model_dump(mode="json"), promote_state="skipped"),
    ]

    html = pipeline_runs_page(DAG_ID, rows)

    assert "<strong>Promotion gate:</strong>" not in html, "at_bound unlocked it since"
    assert html.count("<small class='promotion-locked'") == 2, "the older run still says what it said"


def test_the_pipeline_page_warns_of_nothing_where_the_locking_model_was_not_approved() -> None:
    """Its decision spoke of itself as the champion; a Reject left the one before it."""
    rejected = _decide(HALF_A_POINT, {"test_accuracy": 1.0}, {"test_accuracy": 0.99})
    rows = [
        run(
            "manual__1",
            promotion=rejected.model_dump(mode="json"),
            promote_state="skipped",
            skipped_outcome={"state": "not_approved", "reason": "rejected", "responder": "alice"},
        )
    ]

    html = pipeline_runs_page(DAG_ID, rows)

    assert rejected.promoted and rejected.unreachable is not None
    assert "<strong>Promotion gate:</strong>" not in html
    assert "not approved" in html and "<small class='promotion-locked'" in html
