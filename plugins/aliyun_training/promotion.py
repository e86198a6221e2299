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
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aliyun_training.model_registry.base import RegisteredVersion, RegistrySettings
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
    """A metric's bounds, each optional: a guard's (the metric must be at least ``min`` and at most
    ``max``) or a metric's range (the values it can take, ``PromotionRule.metric_range``)."""

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
            raise ValueError("bounds need min, max or both (fix: e.g. {max: 2.0})")
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


#: The metrics whose values lie in [0, 1] by their definition, with an optional ``final_`` and an
#: optional ``test_``, ``val_`` or ``eval_`` prefix: a rule on one knows its range undeclared.
_UNIT_METRICS = re.compile(
    r"(final_)?((test|val|eval)_)?(acc|accuracy|top1_accuracy|top5_accuracy|balanced_accuracy"
    r"|precision|recall|f1|f1_score|auc|roc_auc|pr_auc|average_precision|iou|miou|mean_iou|dice)"
)
_UNIT = Bounds(min=0, max=1)

_DIRECTION_FIX = field_fix("use max (higher is better: accuracy) or min (lower is better: loss)")


class Criterion(BaseModel):
    """A metric the candidate must improve over the champion's by at least ``min_improvement``:
    the rule's own, or its ``at_bound`` tie-break, which the gate reads the same way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: _METRIC
    #: ``max``: higher is better (accuracy); ``min``: lower is better (loss).
    direction: Annotated[Literal["max", "min"], Field(json_schema_extra=_DIRECTION_FIX)] = "max"
    #: How much better than the champion the candidate must be: in the metric's units, or a
    #: fraction of the champion's value when ``relative``.
    min_improvement: Annotated[
        float,
        Field(ge=0, allow_inf_nan=False, json_schema_extra=field_fix("give a finite number, 0 or more")),
    ] = 0.0
    relative: bool = False
    #: The values the metric can take, e.g. ``{min: 0, max: 100}`` for an accuracy in percent; None:
    #: [0, 1] for an accuracy-like name (``_UNIT_METRICS``), no bound for any other.
    metric_range: Bounds | None = None

    def required(self, held: float | None) -> float | None:
        """The value a candidate must reach against a champion at ``held``; None without a score."""
        if held is None:
            return None
        step = abs(held) * self.min_improvement if self.relative else self.min_improvement
        return held + step if self.direction == "max" else held - step

    def reaches(self, value: float, required: float) -> bool:
        return value >= required if self.direction == "max" else value <= required

    def needs(self, required: float) -> str:
        """The value to reach in words: "at least 1.005", "at most 0.3"."""
        return f"{'at least' if self.direction == 'max' else 'at most'} {required:.6g}"

    def edge(self, *seen: float | None) -> tuple[float, str] | None:
        """The bound the metric improves toward (its maximum; its minimum for ``min``) and whether
        it was declared or assumed; None where it has none. An accuracy-like name's [0, 1] is
        assumed only while every score ``seen`` lies in it: an accuracy in percent has no such bound."""
        if self.metric_range is not None:
            bounds, how = self.metric_range, "declared"
        elif _UNIT_METRICS.fullmatch(self.metric) and all(v is None or 0 <= v <= 1 for v in seen):
            bounds, how = _UNIT, "assumed"
        else:
            return None
        edge = bounds.max if self.direction == "max" else bounds.min
        return None if edge is None else (edge, how)

    def beyond(self, required: float, *seen: float | None) -> str | None:
        """Why no score can reach ``required`` ("beyond its assumed maximum 1"); None where one can."""
        if not math.isfinite(required):
            return "which no number reaches"
        edge = self.edge(*seen)
        if edge is None or self.reaches(edge[0], required):
            return None
        return f"beyond its {edge[1]} {'maximum' if self.direction == 'max' else 'minimum'} {edge[0]:g}"


class TieBreak(Criterion):
    """What the gate decides on while the rule cannot be met (``at_bound``): this metric, for a
    model no worse than the champion on the rule's own. Its direction is never assumed: a loss
    read as higher-is-better would promote the worse model."""

    direction: Annotated[Literal["max", "min"], Field(json_schema_extra=_DIRECTION_FIX)]


class PromotionRule(Criterion):
    """When a run's model becomes the champion (the declaration's ``promotion`` block): ``metric``
    improved by ``min_improvement`` (``Criterion``), and the conditions below."""

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
    #: While the rule cannot be met (the champion's score plus ``min_improvement`` lies beyond the
    #: metric's range): None (``hold``, declared or not) promotes nothing and every decision says so;
    #: a ``TieBreak`` decides on another metric for a model no worse on this one.
    at_bound: Annotated[
        TieBreak | None,
        Field(
            json_schema_extra=field_fix(
                "write hold, or the metric to decide on while this one cannot improve, "
                "e.g. {metric: test_loss, direction: min}"
            )
        ),
    ] = None

    @field_validator("at_bound", mode="before")
    @classmethod
    def _hold(cls, value: Any) -> Any:
        """``hold`` is the default, None; any other word is no option (the error names the options)."""
        if value == "hold":
            return None
        if isinstance(value, str):
            raise ValueError(f"{json.dumps(value)[:40]} is not an option")
        return value

    @model_validator(mode="after")
    def _tie_break_can_apply(self) -> PromotionRule:
        """A tie-break on the rule's own metric decides nothing new, and one on a metric without a
        known bound never applies: both are refused rather than kept as a fix that is not one."""
        if self.at_bound is None:
            return self
        if self.at_bound.metric == self.metric:
            raise ValueError(
                f"at_bound decides on {self.metric}, the rule's own metric (fix: name another one, "
                "e.g. test_loss)"
            )
        if self.edge() is None:
            side = "maximum" if self.direction == "max" else "minimum"
            raise ValueError(
                f"at_bound: {self.metric} has no known {side}, so the gate cannot tell when the rule "
                "cannot be met (fix: declare promotion.metric_range, e.g. {min: 0, max: 1})"
            )
        return self


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
    #: The registry ``registered`` is a version in, as the promoting run's plan resolved it: a
    #: rollback to this champion moves that registry's pointer back (None: a record from before).
    registry: RegistrySettings | None = None
    #: Who made it the champion again by rolling back to it; None: its own run promoted it.
    rolled_back_by: str | None = None


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


class Score(BaseModel):
    """One metric as the gate compared it: the candidate's value, the champion's, the value to reach."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    direction: Literal["max", "min"]
    candidate: float | None
    champion: float | None
    required: float | None


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
    #: Why no later model can pass while the champion stands (this candidate once it is promoted,
    #: else the champion it was compared with), naming the fix; the reason ends with it too. None
    #: while one can, and in decisions recorded before the gate checked.
    unreachable: str | None = None
    #: The ``at_bound`` metric's numbers where the gate decided on it (the rule could not be met).
    tie_break: Score | None = None
    #: A backfill's model, registered and never compared for promotion (``backfills_promote``): not
    #: promoted, yet not held by the gate either.
    registered_only: bool = False

    @property
    def held(self) -> bool:
        """Whether the gate compared the candidate and held it (a registry with an approval state
        rejects it); a backfill's model is registered only."""
        return not self.promoted and not self.registered_only


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
    candidate, held = _scores(comparison, rule.metric)
    recorded = comparison.champion.get(rule.metric) if comparison.champion is not None else None
    guards = [_guard(name, bounds, _number(metrics.get(name))) for name, bounds in rule.guards.items()]
    required = rule.required(held) if champion else None

    def decision(
        promoted: bool, reason: str, tie_break: Score | None = None, registered_only: bool = False
    ) -> Decision:
        unreachable = _lock(rule, comparison, promoted)
        return Decision(
            promoted=promoted,
            reason=f"{reason}; {unreachable}" if unreachable else reason,
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
            unreachable=unreachable,
            tie_break=tie_break,
            registered_only=registered_only,
        )

    if champion == run_id:
        return decision(True, "this run is already the champion (a retry after it was promoted)")
    if run_type == "backfill" and not rule.backfills_promote:
        return decision(
            False,
            "a backfill run's model is registered, never promoted (backfills_promote)",
            registered_only=True,
        )
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
    if held is None or required is None:
        return decision(
            True, f"the champion ({champion}) has no score to beat: its {rule.metric} {_unusable(recorded)}"
        )
    beyond = rule.beyond(required, candidate, held)
    if beyond is None or rule.at_bound is None:
        return decision(*_verdict(rule, candidate, required, held, comparison))
    locked = f"{rule.metric} cannot reach {rule.needs(required)} ({beyond})"
    if not rule.reaches(candidate, held):
        return decision(
            False,
            f"{locked}, and at_bound decides only for a model no worse than the champion's {held:.6g}: "
            f"this one has {candidate:.6g}",
        )
    return decision(*_tie_break(rule.at_bound, comparison, f"{locked}, so at_bound decides"))


def _scores(comparison: Comparison, metric: str) -> tuple[float | None, float | None]:
    """The candidate's and the champion's ``metric`` as scores the gate compares (``_number``)."""
    champion = comparison.champion or {}
    return _number(comparison.candidate.get(metric)), _number(champion.get(metric))


def _verdict(
    criterion: Criterion, value: float, required: float, held: float, comparison: Comparison
) -> tuple[bool, str]:
    """Whether ``value`` reaches ``required``, with the numbers it was decided on."""
    better = criterion.reaches(value, required)
    return better, (
        f"{criterion.metric} {value:.6g} {'reaches' if better else 'misses'} {criterion.needs(required)} "
        f"(champion {comparison.champion_run_id}: {held:.6g}; {comparison.basis})"
    )


def _tie_break(tie: TieBreak, comparison: Comparison, locked: str) -> tuple[bool, str, Score]:
    """The decision on ``tie``'s metric while the rule cannot be met (``locked`` says why), for a
    candidate no worse than the champion on the rule's. A champion without a finite score on it
    has none to beat, as on the rule's own metric (see ``decide``)."""
    value, standing = _scores(comparison, tie.metric)
    required = tie.required(standing)
    score = Score(
        metric=tie.metric, direction=tie.direction, candidate=value, champion=standing, required=required
    )
    if value is None:
        return (
            False,
            f"{locked}, and the run's {tie.metric} {_unusable(comparison.candidate.get(tie.metric))}",
            score,
        )
    if standing is None or required is None:
        recorded = (comparison.champion or {}).get(tie.metric)
        return (
            True,
            f"{locked}, and the champion has no score to beat: its {tie.metric} {_unusable(recorded)}",
            score,
        )
    better, reason = _verdict(tie, value, required, standing, comparison)
    return better, f"{locked}: {reason}", score


def _lock(rule: PromotionRule, comparison: Comparison, promoted: bool) -> str | None:
    """Why no later model can pass while the champion stands (the candidate once ``promoted``, else
    the champion it was compared with), naming the fix; None while one can. With ``at_bound`` the
    gate is locked only when its metric cannot improve either. A metric of no known bound locks
    only on a value to reach beyond a float's range, where ``at_bound`` is no fix (it is refused)."""
    standing = comparison.candidate if promoted else comparison.champion
    if standing is None or (locked := _locked(rule, standing, comparison)) is None:
        return None
    if rule.at_bound is None and rule.edge() is None:
        return f"the gate is locked: {locked} (fix: lower promotion.min_improvement)"
    if rule.at_bound is None:
        relative = ", or make min_improvement relative" if _relative_helps(rule, comparison) else ""
        return (
            f"the gate is locked: {locked} (fix: declare promotion.at_bound, e.g. {{metric: test_loss, "
            "direction: min}, to decide on another metric for a model no worse than the champion"
            f"{relative}; or declare promotion.metric_range if the metric's range is another)"
        )
    if (tie_locked := _locked(rule.at_bound, standing, comparison)) is None:
        return None
    return (
        f"the gate is locked: {locked}, and at_bound's {tie_locked} (fix: lower "
        "promotion.at_bound.min_improvement, or name another metric there)"
    )


def _locked(criterion: Criterion, standing: dict[str, Any], comparison: Comparison) -> str | None:
    """Why no model can beat a champion scoring ``standing`` on ``criterion``; None where one can."""
    value = _number(standing.get(criterion.metric))
    required = criterion.required(value)
    if value is None or required is None:
        return None
    beyond = criterion.beyond(required, *_scores(comparison, criterion.metric))
    if beyond is None:
        return None
    needs = criterion.needs(required)
    return f"{criterion.metric} must reach {needs} to beat the champion's {value:.6g}, {beyond}"


def _relative_helps(rule: PromotionRule, comparison: Comparison) -> bool:
    """Whether a relative step would unlock the rule: a step relative to the champion's distance
    from 0 never crosses a bound at 0 (a loss's), where a fixed one does."""
    edge = rule.edge(*_scores(comparison, rule.metric))
    return not rule.relative and edge is not None and edge[0] == 0


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
