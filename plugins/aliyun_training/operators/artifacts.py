"""Publish a finished run's artifacts and announce the model as an Airflow Asset event."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.artifacts.collect import KeptOutputs, RunInfo, publish_artifacts
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.champion import ChampionPointer, pointer_drift
from aliyun_training.installation import installation_id
from aliyun_training.links import RunReportLink
from aliyun_training.model_registry.base import RegisteredVersion
from aliyun_training.operators.ownership import installation_registry
from aliyun_training.pages.urls import airflow_run_url
from aliyun_training.plan.models import ArtifactsPlan, DatasetPlan
from aliyun_training.promotion import Comparison, Decision, decide
from aliyun_training.stage_records import BandwidthCheck, BuiltImage, FixedDataset, JobResult, StagedDataset
from aliyun_training.staging.versions import version_order
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from airflow.sdk import Context

    from aliyun_training.model_registry.base import ModelRegistry, PublishedFiles
    from aliyun_training.stage_records import ArtifactSet
    from aliyun_training.staging.oss import OssClientConfig


class ArtifactsOperator(ReturnedRecordsMixin, BaseOperator):
    """Collect checkpoints, metrics and a run report into a versioned directory with a manifest.

    The first Asset in ``outlets`` receives an event whose extra names the manifest, the dataset
    version and the job, so consumer DAGs scheduled on the model know exactly what changed.

    Records of stages that sit on alternative branches (a local runtime probe or a verified image;
    a staged version or none) arrive as None from the branch that did not run, so ``runtime`` may
    list candidates and the plan's fixed dataset stands in when nothing was staged.

    The manifest and the report also record the DAG run (``RunInfo``): its ids, the trigger form's
    values as the run used them and the run's address in the Airflow UI (``[api] base_url``), so
    a published model leads back to the run that made it.

    :param artifacts: the run plan's ``ArtifactsPlan`` (or its dict form, or an XComArg of it;
        templated): the model, the artifact root, why nothing can be published (a setting left
        blank: the task then skips with that message) and the alibaba_cloud connection whose OSS
        endpoint and credentials read ``oss://`` job outputs and write an ``oss://`` artifact root.
    :param planned_dataset: the run plan's ``DatasetPlan``; its ``fixed`` dataset is recorded when
        ``dataset`` is None.
    :param job_result: the training task's JobResult (an XComArg or templated); None (the training
        task was skipped) skips this task.
    :param dataset: the staging task's StagedDataset, or None when the run staged nothing.
    :param runtime: the BuiltImage the job ran in, or a list of candidates of which the first present
        one is used.
    :param bandwidth: the RDMA bandwidth check's BandwidthCheck, if the run measured one.
    :param champion: the Asset whose state holds the champion pointer (an inlet: the gate reads
        it), given where the pipeline declares a promotion rule; the gate applies the plan's rule
        (``ArtifactsPlan.promotion``; None: every published model is only a candidate), and the
        ``promote`` task moves the pointer.
    :param evaluation: the evaluation task's record (its ``comparison``: candidate and champion
        scored on the same data), or None: the gate compares final metrics.

    Every published model is registered in the plan's model registry as a candidate, with its
    metrics and lineage; the registered version is in the returned record and the model's event.
    """

    template_fields = (
        "artifacts",
        "planned_dataset",
        "job_result",
        "dataset",
        "runtime",
        "bandwidth",
        "evaluation",
    )
    operator_extra_links = (RunReportLink(),)

    def __init__(
        self,
        *,
        artifacts: ArtifactsPlan | dict[str, Any],
        job_result: Any,
        runtime: Any,
        planned_dataset: DatasetPlan | dict[str, Any] | None = None,
        dataset: Any = None,
        bandwidth: Any = None,
        champion: Asset | None = None,
        evaluation: Any = None,
        **kwargs: Any,
    ) -> None:
        if champion is not None:
            kwargs["inlets"] = [*kwargs.get("inlets", []), champion]
        super().__init__(**kwargs)
        self.champion = champion
        self.evaluation = evaluation
        self.artifacts = (
            artifacts.model_dump(mode="json") if isinstance(artifacts, ArtifactsPlan) else artifacts
        )
        self.planned_dataset = (
            planned_dataset.model_dump(mode="json")
            if isinstance(planned_dataset, DatasetPlan)
            else planned_dataset
        )
        self.job_result = job_result
        self.dataset = dataset
        self.runtime = runtime
        self.bandwidth = bandwidth

    def execute(self, context: Context) -> dict[str, Any]:
        plan = validate_record(ArtifactsPlan, self.artifacts)
        if plan.unavailable:
            self.log.warning("!!! NO ARTIFACTS PUBLISHED for this run: %s !!!", plan.unavailable)
            raise AirflowSkipException(plan.unavailable)
        if not self.job_result:
            raise AirflowSkipException("the training task did not run: there is nothing to publish")
        if plan.promotion is not None and self.champion is None:
            raise AirflowFailException(
                "a promotion rule needs the champion Asset its pointer is kept on (fix: build the task "
                "with champion=, as the pipeline's DAG does for a declaration with a promotion rule)"
            )
        try:
            job = validate_record(JobResult, self.job_result)
            dataset = validate_record(StagedDataset, self.dataset) if self.dataset else self._fixed_dataset()
            runtime = validate_record(BuiltImage, _first_present(self.runtime))
            check_collectable(job, plan.outputs_root)
            # Opened once: the gate reads its champion pointer, and the set is registered in it.
            registry = installation_registry(plan)
            gate = self._gate(context, plan, dataset.version, registry)
            artifacts = publish_artifacts(
                model=plan.model,
                artifact_root=plan.artifact_root or "",
                job=job,
                dataset=dataset,
                runtime=runtime,
                oss=oss_config(plan, plan.artifact_root or "", job.output_uri or ""),
                bandwidth=validate_record(BandwidthCheck, self.bandwidth) if self.bandwidth else None,
                kept=KeptOutputs(tuple(plan.collect), tuple(plan.report_metrics)),
                run=self._run_info(context),
                gate=gate,
                register=self._registration(context, plan, registry, dataset.version, job, runtime),
            )
        except (SpecError, ArtifactError) as exc:
            raise AirflowFailException(str(exc)) from None
        artifacts = artifacts.model_copy(update={"dataset_version": dataset.version})
        registered = RegisteredVersion.model_validate(artifacts.registered) if artifacts.registered else None
        self.log.info("Published artifacts at %s (manifest %s)", artifacts.uri, artifacts.manifest_uri)
        RunReportLink().persist(context, artifacts.report_uri)
        self.log.info(
            "Final metrics: %s", {k: v for k, v in artifacts.metrics.items() if k.startswith("final_")}
        )
        assets = [outlet for outlet in self.outlets if isinstance(outlet, Asset)]
        if assets:
            context["outlet_events"][assets[0]].extra = {
                "manifest_uri": artifacts.manifest_uri,
                "dataset_version": dataset.version,
                "job_id": job.job_id,
                # Every final metric the job reported: a pipeline's series are its own.
                **{key: value for key, value in artifacts.metrics.items() if key.startswith("final_")},
                **(
                    {"model_version": registered.version, "registry_uri": registered.uri}
                    if registered
                    else {}
                ),
            }
        if artifacts.promotion is not None:
            decision = Decision.model_validate(artifacts.promotion)
            self.log.info(
                "Promotion gate (%s): %s: %s",
                decision.basis,
                ("PASSED, awaiting approval" if decision.needs_approval else "PASSED")
                if decision.promoted
                else "not promoted",
                decision.reason,
            )
        return artifacts.model_dump(mode="json")

    def _gate(
        self, context: Context, plan: ArtifactsPlan, version: str, registry: ModelRegistry | None
    ) -> Callable[[dict[str, Any]], Decision] | None:
        """The decision of the plan's rule on this run's numbers, trained on ``version``, against
        the champion as it is now; None without a rule.

        With an evaluation record the numbers are its scores of both models on the same data; when
        that job could not read the champion's outputs, the champion's recorded numbers stand in.
        Where the registry's pointer was moved away from the champion (``champion.pointer_drift``),
        the log and the decision say so before it is applied.
        """
        rule, champion_asset = plan.promotion, self.champion
        if rule is None or champion_asset is None:
            return None
        champion = ChampionPointer(context["asset_state_store"][champion_asset]).read()
        drift = (
            pointer_drift(champion, registry.champion())
            if registry is not None and champion is not None and champion.registered is not None
            else None
        )
        if drift:
            self.log.warning("The champion pointer disagrees: %s", drift)
        run = context["dag_run"]
        evaluated = Comparison.model_validate(self.evaluation["comparison"]) if self.evaluation else None
        if evaluated is not None and champion is not None and evaluated.champion_run_id != champion.run_id:
            evaluated = evaluated.model_copy(
                update={
                    "champion": champion.metrics or None,
                    "champion_run_id": champion.run_id,
                    "basis": "recorded scores",
                }
            )

        older = (
            champion.dataset_version
            if champion and version_order(version) < version_order(champion.dataset_version)
            else None
        )

        def gate(metrics: dict[str, Any]) -> Decision:
            comparison = evaluated or Comparison.of_final_metrics(metrics, champion)
            decision = decide(rule, comparison, run.run_id, str(run.run_type.value), older)
            return (
                decision.model_copy(update={"reason": f"{decision.reason}; {drift}"}) if drift else decision
            )

        return gate

    def _registration(
        self,
        context: Context,
        plan: ArtifactsPlan,
        registry: ModelRegistry | None,
        version: str,
        job: JobResult,
        runtime: BuiltImage,
    ) -> Callable[[PublishedFiles, ArtifactSet], RegisteredVersion] | None:
        """What registers the published model as a candidate from its files (once per DAG run,
        whatever the tries); None without a registry."""
        if registry is None:
            return None

        def register(files: PublishedFiles, artifacts: ArtifactSet) -> RegisteredVersion:
            return self._register(context, plan, registry, files, artifacts, version, job, runtime)

        return register

    def _register(
        self,
        context: Context,
        plan: ArtifactsPlan,
        registry: ModelRegistry,
        files: PublishedFiles,
        artifacts: ArtifactSet,
        version: str,
        job: JobResult,
        runtime: BuiltImage,
    ) -> RegisteredVersion:
        from aliyun_training.model_registry.base import Candidate

        decision = Decision.model_validate(artifacts.promotion) if artifacts.promotion else None
        measured = decision.metrics if decision else artifacts.metrics
        run = context["dag_run"]
        candidate = Candidate(
            installation=installation_id(),
            run_id=run.run_id,
            dag_id=run.dag_id,
            dataset_version=version,
            metrics={
                k: float(v)
                for k, v in measured.items()
                if isinstance(v, int | float)
                and not isinstance(v, bool)
                and (decision or k.startswith("final_"))
            },
            artifacts_uri=artifacts.uri,
            manifest_uri=artifacts.manifest_uri,
            job_id=job.job_id,
            image=runtime.uri,
            code_digest=plan.code_digest,
            declaration=plan.declaration,
            passed_gate=decision.promoted if decision else True,
            held=decision is not None and decision.held,
        )
        # A RegistryError fails the try: the next one finds what this one may have registered.
        registered = registry.register(candidate, files)
        self.log.info(
            "Registered the candidate as %s version %s (%s)",
            registered.model,
            registered.version,
            registered.uri,
        )
        return registered

    def _run_info(self, context: Context) -> RunInfo:
        """This DAG run as the manifest records it; of its params only the trigger form's fields
        (the DAG's params), not whatever else a run's conf carried."""
        dag_run, params = context["dag_run"], context["params"]
        return RunInfo(
            dag_id=dag_run.dag_id,
            run_id=dag_run.run_id,
            logical_date=_iso(dag_run.logical_date),
            run_type=dag_run.run_type.value,
            params={name: params[name] for name in self.dag.params if name in params},
            url=airflow_run_url(dag_run.dag_id, dag_run.run_id),
            started=_iso(dag_run.start_date),
        )

    def _fixed_dataset(self) -> FixedDataset:
        """The dataset the job mounted as the environment configures it, when nothing was staged."""
        planned = validate_record(DatasetPlan, self.planned_dataset) if self.planned_dataset else None
        if planned is None or planned.fixed is None:
            raise SpecError("dataset: the run staged nothing and its plan names no fixed dataset")
        return planned.fixed


def check_collectable(job: JobResult, outputs_root: str | None) -> None:
    """Refuse a job whose outputs are not under the environment's output root, before reading any.

    A job result names where its job wrote (the job's own OUTPUT_DIR, read back from the platform):
    collecting from anywhere else would publish, as this run's model, files of another job, another
    team's bucket or this machine.
    """
    where = job.output_uri or ""
    if outputs_root and where.startswith("oss://") and outputs_root.startswith("oss://"):
        from aliyun_training.oss_location import parse_oss_uri

        found, root = (
            parse_oss_uri(where, field="output_uri"),
            parse_oss_uri(outputs_root, field="output_uri"),
        )
        # parse_oss_uri refuses '..' in a prefix: a prefix match is containment.
        inside = found.bucket_name == root.bucket_name and found.prefix.startswith(root.prefix)
    elif outputs_root and not where.startswith("oss://") and not outputs_root.startswith("oss://"):
        inside = bool(where) and Path(where).resolve().is_relative_to(Path(outputs_root).resolve())
    else:
        inside = False
    if not inside:
        raise SpecError(
            f"output_uri: job {job.job_id} wrote to {where or 'nowhere it reported'}, which is not under the "
            f"environment's output root {outputs_root or '(none configured)'}; nothing was collected (fix: "
            "check that the job is this run's and writes to $OUTPUT_DIR, and that output_uri is the location "
            "mounted at output_root)"
        )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def oss_config(plan: ArtifactsPlan, *uris: str) -> OssClientConfig | None:
    """The OSS settings of the plan's connection where one of ``uris`` is on OSS; None otherwise (a
    run that never touches OSS needs no connection)."""
    if not any(uri.startswith("oss://") for uri in uris):
        return None
    from aliyun_training.staging.oss import OssClientConfig

    return OssClientConfig.from_connection(plan.alibaba_cloud_conn_id)


def _first_present(candidates: Any) -> Any:
    """A record, or the first present one of a list of records from alternative branches."""
    if isinstance(candidates, list | tuple):
        return next((record for record in candidates if record), None)
    return candidates
