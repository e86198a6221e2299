"""Score the candidate and the champion in one job, on the same data, before the gate compares them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.backend_catalog import backend_record
from aliyun_training.champion import ChampionPointer
from aliyun_training.operators.training import TrainingJobOperator, image_reference
from aliyun_training.plan.models import EVALUATION_FILE, EvaluationContract, EvaluationPlan, JobPlan
from aliyun_training.spec import node_output_path
from aliyun_training.stage_records import JobResult, StagedDataset
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

    from aliyun_training.backends.base import TrainingBackend
    from aliyun_training.monitor import JobOutcome
    from aliyun_training.spec import TrainingJobSpec

#: The task state key of what the first try chose to score (a retry scores the same models).
INPUTS_KEY = "evaluation_inputs"


class EvaluationOperator(TrainingJobOperator):
    """Run the declaration's evaluation job; return its scores (``comparison``: a ``Comparison``),
    the version they were measured on and the job's id.

    The job runs on the run's backend like the prepare job (deferred while it runs, stopped when
    the task is killed) under its ``EvaluationContract``: ``CANDIDATE_DIR`` (the training job's
    outputs), ``CHAMPION_DIR`` (the champion's job outputs, read from the champion pointer; empty
    without a champion, or when they are not under this environment's outputs any more) and
    ``EVAL_DATA_DIR``. The champion is chosen once, at the first try, and kept in the task's state:
    a retry scores the same two models.

    :param evaluation: the run plan's ``EvaluationPlan`` (templated); None skips the task.
    :param job_result: the training task's JobResult (an XComArg): the candidate.
    :param champion: the Asset whose state holds the champion pointer (an inlet).
    """

    template_fields = (*TrainingJobOperator.template_fields, "evaluation", "job_result")
    ui_color = "#b39ddb"
    resumable = False
    live_record = False

    def __init__(
        self,
        *,
        evaluation: EvaluationPlan | dict[str, Any] | None,
        job_result: Any,
        champion: Asset,
        **kwargs: Any,
    ) -> None:
        kwargs["inlets"] = [*kwargs.get("inlets", []), champion]
        super().__init__(job={}, **kwargs)
        self.evaluation = (
            evaluation.model_dump(mode="json") if isinstance(evaluation, EvaluationPlan) else evaluation
        )
        self.job_result = job_result
        self.champion = champion
        self._inputs: EvaluationContract | None = None

    @property
    def evaluated(self) -> EvaluationPlan:
        assert self.evaluation is not None, "execute skips a run planned without an evaluation"
        return validate_record(EvaluationPlan, self.evaluation)

    @property
    def plan(self) -> JobPlan:
        return self.evaluated.job

    def execute(self, context: Context) -> dict[str, Any]:
        if not self.evaluation:
            raise AirflowSkipException("the pipeline declares no evaluation: the gate reads final metrics")
        if not self.job_result:
            raise AirflowSkipException("the training task did not run: there is nothing to evaluate")
        plan = self.plan
        if backend_record(plan.spec.backend).cloud and not plan.output_uri:
            # The job's nodes, and what they wrote, are gone: publishing skips for the same reason.
            raise AirflowSkipException(
                "the training job's outputs are not kept (output_uri is blank in the environment file): "
                "there is nothing to evaluate"
            )
        return super().execute(context)

    def _prepare(
        self, context: Context, announce: bool = True
    ) -> tuple[TrainingJobSpec, TrainingBackend, str]:
        self._inputs = self._chosen_inputs(context)
        return super()._prepare(context, announce)

    def _spec(self) -> TrainingJobSpec:
        plan, inputs = self.evaluated, self._inputs
        assert inputs is not None, "_prepare chooses the inputs first"
        staged = validate_record(StagedDataset, self.dataset) if self.dataset and plan.own_version else None
        spec = plan.job.shaped(staged, image_reference(self.image) if self.image else None)
        env = inputs.env(spec.env.get("DATA_DIR", "") if plan.own_version else None)
        return spec.model_copy(update={"env": {**spec.env, **env}})

    def _chosen_inputs(self, context: Context) -> EvaluationContract:
        """The models this task scores: the first try's choice, else the candidate and the
        champion as they are now.

        The choice is kept sealed (``seals.sealed_state``): a user who may edit task state could
        otherwise point the job at any folder it mounts, or name the champion it compared with.
        """
        from aliyun_training.seals import opened_state, sealed_state

        store, ti = context["task_state_store"], context["ti"]
        kept = opened_state(store.get(INPUTS_KEY), ti, INPUTS_KEY)
        if kept:
            return EvaluationContract.model_validate(kept)
        if store.get(INPUTS_KEY):
            self.log.warning("The kept evaluation inputs are not the ones this task kept: chosen again")
        candidate = validate_record(JobResult, self.job_result)
        champion = ChampionPointer(context["asset_state_store"][self.champion]).read()
        champion_dir = self._node_path(champion.outputs_uri) if champion and champion.outputs_uri else None
        if champion and champion_dir is None:
            where = (
                f"wrote to {champion.outputs_uri}, which this run's jobs do not mount"
                if champion.outputs_uri
                else "has no recorded outputs"
            )
            self.log.warning(
                "The champion (%s) %s: only the candidate is scored, and the gate compares with the "
                "champion's recorded metrics",
                champion.run_id,
                where,
            )
        inputs = EvaluationContract(
            candidate_dir=self._node_path(candidate.output_uri) or "",
            champion_dir=champion_dir or "",
            champion_run_id=champion.run_id if champion_dir and champion else None,
        )
        if not inputs.candidate_dir:
            raise AirflowFailException(
                f"output_uri: the training job {candidate.job_id} wrote to {candidate.output_uri}, which the "
                "evaluation job does not mount (fix: jobs must write under the environment's output_uri)"
            )
        store.set(INPUTS_KEY, sealed_state(inputs.model_dump(), ti, INPUTS_KEY))
        return inputs

    def _node_path(self, uri: str | None) -> str | None:
        """``uri`` as the evaluation job's node sees it (``spec.node_output_path``)."""
        return node_output_path(uri, self.plan.output_root, self.plan.output_uri)

    def _finish(
        self, context: Context, spec: TrainingJobSpec, backend: TrainingBackend, outcome: JobOutcome
    ) -> dict[str, Any]:
        from aliyun_training.staging.versions import read_json_object

        result = super()._finish(context, spec, backend, outcome)
        inputs, plan = self._inputs, self.evaluated
        assert inputs is not None
        folder = result.get("output_uri") or spec.output_dir or ""
        try:
            document = read_json_object(
                folder, EVALUATION_FILE, plan.alibaba_cloud_conn_id, field="output_uri"
            )
            comparison = inputs.comparison(document, folder)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "Evaluated on %s: candidate %s; champion %s %s",
            plan.dataset_version,
            comparison.candidate,
            comparison.champion_run_id or "(none)",
            comparison.champion if comparison.champion is not None else "",
        )
        return {
            "comparison": comparison.model_dump(mode="json"),
            "dataset_version": plan.dataset_version,
            "job_id": result["job_id"],
        }
