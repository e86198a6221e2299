"""Move the champion pointer to a run's model once the gate (and, if declared, a person) passed it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.artifacts.outcome import record_outcome
from aliyun_training.champion import OUTCOME_KEY, ChampionChanged, ChampionPointer, announcement, moved_since
from aliyun_training.model_registry.base import RegisteredVersion
from aliyun_training.operators.artifacts import oss_config
from aliyun_training.plan.models import ArtifactsPlan
from aliyun_training.promotion import Champion, Decision, Outcome
from aliyun_training.stage_records import ApprovalAnswer, ArtifactSet, JobResult
from aliyun_training.upstream import ReturnedRecordsMixin, push_sealed
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.model_registry.base import ModelRegistry


class PromoteOperator(ReturnedRecordsMixin, BaseOperator):
    """Make the published candidate the champion when its gate decided so: compare and set.

    The pointer lives in the champion Asset's state and in the model registry (MLflow's
    ``champion`` alias, PAI's ``champion`` label), and this task is the only one that moves it
    (``champion.ChampionPointer``): both, and only if the champion is still the one the gate
    compared with. A run that waited (for an approval, say) while another run promoted its model
    is not promoted over a champion it was never compared with, whether the pointer had moved when
    this task read it or moves before it writes.

    Idempotent: the registry is moved first and is a no-op when already there; a retry after the
    state was set finds this run the champion and neither moves nor announces anything again. The
    champion Asset gets an event, through an AssetAlias, only when the pointer moves, carrying the
    model version, its metrics and the registry URI, so a deployment DAG scheduled on it runs on
    real promotions only.

    The set was published before anyone answered, so its manifest and report say the candidate
    awaits approval (or this task): whatever it decides (``promotion.Outcome``), this task first
    rewrites them to say so (``artifacts.outcome``), before the pointer moves, and returns it too
    (``outcome``), so the pages say what the report says. A Reject, or the approval's timeout,
    then skips this task, as Airflow's approval does with the task after it; it leaves the outcome
    under the XCom key ``champion.OUTCOME_KEY`` first, sealed like a returned record.

    :param published: the publish task's ArtifactSet record (an XComArg); None skips.
    :param job_result: the training task's JobResult: where the new champion's job wrote.
    :param artifacts: the run plan's ``ArtifactsPlan`` (its registry, its rule's approvers, the
        connection that writes a set on OSS).
    :param approval: the approval task's ``ApprovalAnswer`` where the rule asks for one: the pointer
        moves only on Approve by one of the rule's approvers. A task marked successful or cleared
        leaves no such answer, and nothing moves.
    :param champion: the champion Asset.
    """

    template_fields = ("published", "job_result", "artifacts", "approval")
    ui_color = "#ffe082"

    def __init__(
        self,
        *,
        published: Any,
        job_result: Any,
        artifacts: Any,
        champion: Asset,
        approval: Any = None,
        **kwargs: Any,
    ) -> None:
        self.promotions = AssetAlias(name=f"{champion.name}_promotions")
        kwargs["inlets"] = [*kwargs.get("inlets", []), champion]
        kwargs["outlets"] = [*kwargs.get("outlets", []), self.promotions]
        kwargs.setdefault("max_active_tis_per_dag", 1)
        super().__init__(**kwargs)
        self.published = published
        self.job_result = job_result
        self.artifacts = artifacts
        self.approval = approval
        self.champion = champion

    def execute(self, context: Context) -> dict[str, Any]:
        if not self.published:
            raise AirflowSkipException("nothing was published: there is no candidate to promote")
        published = validate_record(ArtifactSet, self.published)
        if published.promotion is None:
            raise AirflowSkipException("the pipeline declares no promotion rule")
        decision = Decision.model_validate(published.promotion)
        plan = validate_record(ArtifactsPlan, self.artifacts)
        answer = validate_record(ApprovalAnswer, self.approval) if self.approval else None
        run_id = context["dag_run"].run_id
        pointer = ChampionPointer(context["asset_state_store"][self.champion])
        current = pointer.read()
        outcome = self._outcome(plan, decision, answer, current, run_id)
        # The files first: failing to write them fails this try before anything moves or is
        # announced, and the retry does both.
        self._record_outcome(context, plan, published, decision, outcome)
        if answer is not None and answer.rejects:
            if published.registered is not None:
                # Where the registry keeps an approval state, the version reads rejected there too.
                rejected = RegisteredVersion.model_validate(published.registered)
                _registry(plan).reject(rejected, outcome.reason)
            push_sealed(context, OUTCOME_KEY, outcome.model_dump(mode="json"))
            raise AirflowSkipException(f"not promoted: {outcome.reason}")
        if not outcome.promoted:
            return _returned(run_id, outcome)
        if current is not None and current.run_id == run_id:
            registered = current.registered
        else:
            try:
                registered = self._move(context, pointer, plan, published, decision)
            except ChampionChanged as changed:
                held = _held(changed)
                self.log.warning("Not promoted: %s", held.reason)
                self._record_outcome(context, plan, published, decision, held)
                return _returned(run_id, held)
        return {
            **_returned(run_id, outcome),
            "model_version": registered.version if registered else None,
            "registry_uri": registered.uri if registered else None,
            "replaced": decision.champion_run_id,
        }

    def _outcome(
        self,
        plan: ArtifactsPlan,
        decision: Decision,
        answer: ApprovalAnswer | None,
        current: Champion | None,
        run_id: str,
    ) -> Outcome:
        """What becomes of the candidate: promoted only where the gate passed it, the approval (where
        the rule asks for one) granted it, and the champion is still the one the gate compared with."""
        if not decision.promoted:
            self.log.info("Not promoted: %s", decision.reason)
            return Outcome.at_publication(decision, run_id)
        refusal = self._unapproved(plan, decision, answer, run_id)
        if refusal:
            self.log.warning("Not promoted: %s", refusal)
            return Outcome.refused(answer, refusal)
        approver = (answer.responder or None) if answer else None
        if current is not None and current.run_id == run_id:
            self.log.info("This run's model is the champion already (a retry): nothing to move")
            return Outcome(state="promoted", reason="already the champion", responder=approver)
        if moved_since(current, decision.champion_run_id):
            held = _held(ChampionChanged(current, decision.champion_run_id))
            self.log.warning("Not promoted: %s", held.reason)
            return held
        return Outcome(state="promoted", reason=decision.reason, responder=approver)

    def _record_outcome(
        self,
        context: Context,
        plan: ArtifactsPlan,
        published: ArtifactSet,
        decision: Decision,
        outcome: Outcome,
    ) -> None:
        """Rewrite the set's manifest and report with the outcome, which was not known when it was
        published."""
        run = context["dag_run"]
        try:
            rewritten = record_outcome(
                published, decision, outcome, (run.dag_id, run.run_id), oss_config(plan, published.uri)
            )
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        if rewritten:
            self.log.info(
                "Recorded the outcome (%s) in %s and %s",
                outcome.headline,
                published.manifest_uri,
                published.report_uri,
            )

    def _move(
        self,
        context: Context,
        pointer: ChampionPointer,
        plan: ArtifactsPlan,
        published: ArtifactSet,
        decision: Decision,
    ) -> RegisteredVersion | None:
        """Make this run's model the champion, if the pointer still names the one the gate compared
        with (``ChampionChanged`` otherwise), and announce it; the registered version it points at."""
        run_id = context["dag_run"].run_id
        registered = RegisteredVersion.model_validate(published.registered) if published.registered else None
        job = validate_record(JobResult, self.job_result) if self.job_result else None
        champion = Champion(
            run_id=run_id,
            dataset_version=published.dataset_version,
            artifacts=published,
            metrics=decision.metrics,
            outputs_uri=job.output_uri if job else None,
            registered=registered,
            registry=plan.registry if registered else None,
        )
        pointer.compare_and_set(decision.champion_run_id, champion, _registry(plan) if registered else None)
        context["outlet_events"][self.promotions].add(
            self.champion, extra=announcement(champion, decision.champion_run_id)
        )
        self.log.info(
            "PROMOTED: %s is the champion (%s), replacing %s",
            run_id,
            registered.uri if registered else published.uri,
            decision.champion_run_id or "nothing",
        )
        return registered

    def _unapproved(
        self, plan: ArtifactsPlan, decision: Decision, answer: ApprovalAnswer | None, run_id: str
    ) -> str | None:
        """Why the promotion lacks the approval the plan's rule asks for; None when it has it (or
        needs none: this run is the champion already, a retry after its promotion).

        The rule is the plan's and the answer the approval task's own, both sealed records: a
        record written in their place is refused before this runs.
        """
        rule = plan.promotion
        if rule is None or rule.approval is None or decision.champion_run_id == run_id:
            return None
        if answer is None:
            return (
                "the rule asks for approval, and approve_promotion left no answer (it was marked "
                "successful, or never answered); clear approve_promotion to ask again"
            )
        return answer.refusal(rule.approval.approvers)


def _held(changed: ChampionChanged) -> Outcome:
    """The outcome of a candidate the gate compared with a champion that is not the champion now."""
    return Outcome(state="held", reason=f"{changed}: not promoted (clear evaluate to compare again)")


def _returned(run_id: str, outcome: Outcome) -> dict[str, Any]:
    """What the task returns of ``outcome`` (``promoted`` true only where the pointer moved to the run)."""
    return {
        "promoted": outcome.promoted,
        "run_id": run_id,
        "reason": outcome.reason,
        "outcome": outcome.model_dump(mode="json"),
    }


def _registry(plan: ArtifactsPlan) -> ModelRegistry:
    """The plan's model registry, as this installation sees it (``ownership.installation_registry``)."""
    from aliyun_training.operators.ownership import installation_registry

    registry = installation_registry(plan)
    assert registry is not None, "a registered candidate has a registry"
    return registry
