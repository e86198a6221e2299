"""The promotion gate: whether a run's model replaces the pipeline's champion, and why, as one record.

A pipeline declares the rule (``promotion`` in its declaration): the metric that decides and its
direction, the least improvement over the champion that counts, guards on other metrics, what a
first model does with no champion yet, and whether a backfill may promote (by default it may not:
a backfill retrains past versions, and its models are not newer than the champion). ``decide`` is
pure: the same metrics, champion and run give the same decision, so a retried task decides again
what its first try decided, and a run that already is the champion (a retry after the pointer
moved) stays promoted rather than being compared with itself.

The numbers compared (``Comparison``) come from the declaration's evaluation job, which scores the
candidate and the champion in one job on the same data (``basis`` "evaluation"); a pipeline without
one compares the training's final metrics (``final_<series>`` of ``metrics.json``), the candidate's
from this run and the champion's as recorded when it was promoted (``basis`` "final metrics"): two
runs on different dataset versions are then compared on different test data, which is weaker.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aliyun_training.model_registry.base import RegisteredVersion
from aliyun_training.stage_records import ApprovalAnswer, ArtifactSet
from aliyun_training.validation import field_fix

_METRIC = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        json_schema_extra=field_fix(
            "name a metric of evaluation.json, or a final metric of metrics.json (final_test_accuracy)"
        ),
    ),
]


class Bounds(BaseModel):
    """A guard: the metric must be at least ``min`` and at most ``max`` (each optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: Annotated[
        float | None, Field(allow_inf_nan=False, json_schema_extra=field_fix("give a finite number"))
    ] = None
    max: Annotated[
        float | None, Field(allow_inf_nan=False, json_schema_extra=field_fix("give a finite number"))
    ] = None

    @model_validator(mode="after")
    def _a_bound(self) -> Bounds:
        if self.min is None and self.max is None:
            raise ValueError("a guard needs min, max or both (fix: e.g. {max: 2.0})")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max} (fix: swap them)")
        return self


class Approval(BaseModel):
    """A person approves each promotion before the pointer moves (Airflow's human-in-the-loop)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: How long the approval waits; unanswered, the model is not promoted and the run goes on.
    timeout_hours: Annotated[float, Field(gt=0, le=24 * 14)] = 72
    #: Airflow user ids who may answer; empty: anyone allowed to answer the DAG's approvals. An id is
    #: compared as it is written, so one with stray spaces would match no one.
    approvers: list[
        Annotated[
            str,
            Field(
                pattern=r"^\S(.*\S)?$",
                json_schema_extra=field_fix(
                    "write each user id exactly as Airflow shows it, without spaces around it"
                ),
            ),
        ]
    ] = Field(default_factory=list)


class PromotionRule(BaseModel):
    """When a run's model becomes the champion (the declaration's ``promotion`` block)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: _METRIC
    #: ``max``: higher is better (accuracy); ``min``: lower is better (loss).
    direction: Literal["max", "min"] = "max"
    #: How much better than the champion the candidate must be: in the metric's units, or a
    #: fraction of the champion's value when ``relative``.
    min_improvement: Annotated[
        float,
        Field(ge=0, allow_inf_nan=False, json_schema_extra=field_fix("give a finite number, 0 or more")),
    ] = 0.0
    relative: bool = False
    #: Other final metrics the candidate must keep within bounds, e.g. ``final_test_loss: {max: 2}``.
    guards: dict[_METRIC, Bounds] = Field(default_factory=dict)
    #: With no champion yet: ``promote`` the first model that passes its guards, or ``hold``.
    without_champion: Literal["promote", "hold"] = "promote"
    #: Whether a backfill run's model may become the champion.
    backfills_promote: bool = False
    #: Whether a model trained on a dataset version older than the champion's may replace it (a
    #: manual run on an old version, a catchup run, a cleared old scheduled run); held by default.
    older_versions_promote: bool = False
    #: A person must approve each promotion; None: a pass promotes at once.
    approval: Approval | None = None


class Champion(BaseModel):
    """The pipeline's current champion: the run that promoted it, the artifact set it published,
    where its job wrote (the evaluation job scores it from there) and its registry version."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    dataset_version: str
    artifacts: ArtifactSet
    #: The decision that promoted it: its metrics are the champion's for a gate without evaluation.
    metrics: dict[str, Any] = Field(default_factory=dict)
    outputs_uri: str | None = None
    registered: RegisteredVersion | None = None


class Comparison(BaseModel):
    """The numbers a gate compares: the candidate's and the champion's, and how they were measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: dict[str, Any]
    #: None: there is no champion yet.
    champion: dict[str, Any] | None = None
    champion_run_id: str | None = None
    #: "evaluation": one job scored both on the same data; "recorded scores": it could not read the
    #: champion, whose scores from its own promotion stand in; "final metrics": no evaluation job.
    basis: Literal["evaluation", "recorded scores", "final metrics"] = "final metrics"

    @classmethod
    def of_final_metrics(cls, metrics: dict[str, Any], champion: Champion | None) -> Comparison:
        """The training's final metrics against those the champion was promoted with."""
        final = {key: value for key, value in metrics.items() if key.startswith("final_")}
        return cls(
            candidate=final,
            champion=(champion.metrics or champion.artifacts.metrics) if champion else None,
            champion_run_id=champion.run_id if champion else None,
        )


class GuardResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    value: float | None
    min: float | None
    max: float | None
    passed: bool

    def text(self) -> str:
        """The guard as a person checks it, its value beside each bound it keeps or breaks:
        ``test_loss 0.41 ≤ max 3``, ``test_loss 2.5 > max 2``, ``test_loss (no number) needs ≤ max 2``."""
        shown = "(no number)" if self.value is None else f"{self.value:.6g}"
        bounds = (("min", self.min), ("max", self.max))
        return f"{self.metric} {shown} " + " and ".join(
            self._against(word, bound) for word, bound in bounds if bound is not None
        )

    def _against(self, word: str, bound: float) -> str:
        keeps, breaks = ("≥", "<") if word == "min" else ("≤", ">")
        if self.value is None:
            return f"needs {keeps} {word} {bound:g}"
        kept = self.value >= bound if word == "min" else self.value <= bound
        return f"{keeps if kept else breaks} {word} {bound:g}"


class Decision(BaseModel):
    """The gate's decision with every number it used: logged, in the manifest and the report, and
    the task's return value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    promoted: bool
    reason: str
    metric: str
    direction: Literal["max", "min"]
    candidate: float | None
    champion: float | None
    champion_run_id: str | None
    #: The value the candidate had to reach (beat, with ``min_improvement``); None with no champion.
    required: float | None
    guards: list[GuardResult]
    #: How the numbers were measured: one evaluation job on the same data, or each run's own.
    basis: str = "final metrics"
    #: Whether a person must approve before the pointer moves (only a promotion needs it).
    needs_approval: bool = False
    #: The candidate's metrics the gate read, recorded as the champion's should it be promoted.
    metrics: dict[str, Any] = Field(default_factory=dict)


#: What became of a candidate (``Outcome.state``), with the few words the report heads it with.
_HEADLINES = {
    "held": "Not promoted",
    "awaiting_approval": "Awaiting approval",
    "awaiting_promotion": "Awaiting promotion",
    "promoted": "Promoted to champion",
    "not_approved": "Not approved",
    "approval_timed_out": "Approval timed out",
}


class Outcome(BaseModel):
    """What became of a candidate the gate decided on: the one account of it that the manifest,
    the report and ``promote``'s record each give, all written from this record.

    The artifact set is published before a person answers and before ``promote`` moves the pointer,
    so ``publish_artifacts`` records what is known then (``at_publication``: held by the gate,
    awaiting approval, awaiting ``promote``), and ``promote`` records the final one over it
    (promoted, not approved, the approval timed out, or held because the champion changed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: Literal[
        "held", "awaiting_approval", "awaiting_promotion", "promoted", "not_approved", "approval_timed_out"
    ]
    reason: str
    #: Who answered the approval (``ApprovalAnswer.responder``); None when no one did.
    responder: str | None = None

    @property
    def promoted(self) -> bool:
        """Whether the pointer moved to this run: only then is the run's model the champion."""
        return self.state == "promoted"

    @property
    def headline(self) -> str:
        """The outcome in a few words, naming who answered: "Not approved by alice"."""
        headline = _HEADLINES[self.state]
        if not self.responder:
            return headline
        return (
            f"{headline}, approved by {self.responder}"
            if self.promoted
            else f"{headline} by {self.responder}"
        )

    @classmethod
    def at_publication(cls, decision: Decision, run_id: str | None) -> Outcome:
        """What is known when the set is published: the gate's verdict, and what a pass waits for
        (a run that is the champion already, retried after its promotion, waits for nothing)."""
        if not decision.promoted:
            return cls(state="held", reason=decision.reason)
        if decision.champion_run_id is not None and decision.champion_run_id == run_id:
            return cls(state="promoted", reason=decision.reason)
        if decision.needs_approval:
            return cls(
                state="awaiting_approval",
                reason="the gate passed it; it becomes the champion only once a person approves",
            )
        return cls(
            state="awaiting_promotion", reason="the gate passed it; the promote task moves the champion"
        )

    @classmethod
    def refused(cls, answer: ApprovalAnswer | None, refusal: str) -> Outcome:
        """A promotion the approval did not grant: ``refusal`` says why (``ApprovalAnswer.refusal``).
        The headline names the responder only for their Reject: one who approved without being
        one of the rule's approvers did not refuse it (the reason says so)."""
        if answer is not None and answer.timed_out:
            return cls(state="approval_timed_out", reason=refusal)
        rejected_by = answer.responder if answer is not None and answer.rejects else ""
        return cls(state="not_approved", reason=refusal, responder=rejected_by or None)


def manifest_promotion(decision: Decision, outcome: Outcome) -> dict[str, Any]:
    """The manifest's ``promotion``: the gate's decision with every number it used, and ``outcome``.

    ``promoted`` is true only once the pointer moved to this run; the gate's own verdict, which the
    decision calls ``promoted``, is ``gate_passed`` here, since a pass still waits for approval
    and for ``promote``.
    """
    return {
        **decision.model_dump(mode="json"),
        "promoted": outcome.promoted,
        "gate_passed": decision.promoted,
        "outcome": outcome.model_dump(mode="json"),
    }


def decide(
    rule: PromotionRule,
    comparison: Comparison,
    run_id: str,
    run_type: str,
    older_than_champion: str | None = None,
) -> Decision:
    """Whether the run ``run_id`` (of ``run_type``) replaces the champion, on ``comparison``.

    ``older_than_champion`` is the champion's dataset version when the run trained on an older one:
    such a model is held unless the rule allows it, like a backfill's, since a champion trained on
    newer data is not replaced by one that never saw it.

    Only finite numbers are compared. The readers of metrics.json and evaluation.json refuse NaN and
    Infinity; this is the second line, for numbers that reach the gate another way (a champion
    recorded before those readers checked). A candidate's non-finite score is no score: it is never
    promoted, and a guard on one fails. A champion whose recorded score is not finite has no score to
    beat, as a champion without the metric has none: a candidate that passes its guards replaces it.
    Keeping it would keep it for ever (NaN loses every comparison, so it is never beaten by a rule
    that asks for "at least"; Infinity beats every finite score), and a score that was never measured
    is no evidence that the champion is better.
    """
    metrics, champion = comparison.candidate, comparison.champion_run_id
    candidate = _number(metrics.get(rule.metric))
    recorded = comparison.champion.get(rule.metric) if comparison.champion is not None else None
    held = _number(recorded)
    guards = [_guard(name, bounds, _number(metrics.get(name))) for name, bounds in rule.guards.items()]
    required = _required(rule, held) if champion else None

    def decision(promoted: bool, reason: str) -> Decision:
        return Decision(
            promoted=promoted,
            reason=reason,
            metric=rule.metric,
            direction=rule.direction,
            candidate=candidate,
            champion=held,
            champion_run_id=champion,
            required=required,
            guards=guards,
            basis=comparison.basis,
            needs_approval=promoted and rule.approval is not None and champion != run_id,
            metrics=metrics,
        )

    if champion == run_id:
        return decision(True, "this run is already the champion (a retry after it was promoted)")
    if run_type == "backfill" and not rule.backfills_promote:
        return decision(False, "a backfill run's model is registered, never promoted (backfills_promote)")
    if older_than_champion is not None and champion is not None and not rule.older_versions_promote:
        return decision(
            False,
            f"it was trained on an older dataset version than the champion's {older_than_champion}: "
            "registered, not promoted (older_versions_promote)",
        )
    if candidate is None:
        return decision(False, f"the run's {rule.metric} {_unusable(metrics.get(rule.metric))}")
    if failed := [g for g in guards if not g.passed]:
        return decision(
            False, "guard failed: " + "; ".join(_describe(g, metrics.get(g.metric)) for g in failed)
        )
    if champion is None:
        if rule.without_champion == "hold":
            return decision(False, "there is no champion yet and the rule holds the first model")
        return decision(True, f"the first model: {rule.metric} {candidate:.6g}, every guard passed")
    if required is None:
        return decision(
            True, f"the champion ({champion}) has no score to beat: its {rule.metric} {_unusable(recorded)}"
        )
    better = candidate >= required if rule.direction == "max" else candidate <= required
    word = "at least" if rule.direction == "max" else "at most"
    verdict = "reaches" if better else "misses"
    return decision(
        better,
        f"{rule.metric} {candidate:.6g} {verdict} {word} {required:.6g} "
        f"(champion {champion}: {held:.6g}; {comparison.basis})",
    )


def _required(rule: PromotionRule, held: float | None) -> float | None:
    if held is None:
        return None
    step = abs(held) * rule.min_improvement if rule.relative else rule.min_improvement
    return held + step if rule.direction == "max" else held - step


def _guard(name: str, bounds: Bounds, value: float | None) -> GuardResult:
    passed = (
        value is not None
        and (bounds.min is None or value >= bounds.min)
        and (bounds.max is None or value <= bounds.max)
    )
    return GuardResult(metric=name, value=value, min=bounds.min, max=bounds.max, passed=passed)


def _describe(guard: GuardResult, reported: Any) -> str:
    """A failed guard in words; ``reported`` is the value the run reported for its metric."""
    if guard.value is None:
        return f"{guard.metric} {_unusable(reported)}"
    bounds = " and ".join(
        f"{word} {bound:g}"
        for word, bound in (("at least", guard.min), ("at most", guard.max))
        if bound is not None
    )
    return f"{guard.metric} {guard.value:.6g} is not {bounds}"


def _number(value: Any) -> float | None:
    """``value`` as a score the gate compares: a finite int or float; None for anything else."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int no float holds
        return None
    return number if math.isfinite(number) else None


def _unusable(value: Any) -> str:
    """Why a reported value is no score, completing "the run's <metric> ..."."""
    if value is None:
        return "was not reported"
    if isinstance(value, int | float) and not isinstance(value, bool):
        shown = json.dumps(float(value)) if isinstance(value, float) else "beyond a float's range"
        return f"is {shown}, not a finite number: no comparison can use it"
    return f"is {json.dumps(value)[:40]}, not a number"
