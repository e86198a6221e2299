"""Publish a finished run's artifacts and announce the model as an Airflow Asset event."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.artifacts.collect import ArtifactError, KeptOutputs, RunInfo, publish_artifacts
from aliyun_training.links import RunReportLink
from aliyun_training.operators.upstream import ReturnedRecordsMixin
from aliyun_training.pages.urls import airflow_run_url
from aliyun_training.plan.models import ArtifactsPlan, DatasetPlan
from aliyun_training.promotion import Champion, Decision, PromotionRule, decide
from aliyun_training.records import BandwidthCheck, BuiltImage, FixedDataset, JobResult, StagedDataset
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from airflow.sdk import Context

    from aliyun_training.records import ArtifactSet
    from aliyun_training.staging.oss import OssClientConfig


#: The key of the champion pointer in the champion Asset's state.
CHAMPION_KEY = "champion"


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
    :param promotion: the declaration's ``PromotionRule``; None: every published model is only a
        candidate. With a rule, ``champion`` is the Asset whose state holds the champion pointer
        (an inlet: the decision reads it) and whose event announces a promotion, emitted through an
        AssetAlias outlet only when the pointer moves; one run of the DAG decides at a time.
    """

    template_fields = ("artifacts", "planned_dataset", "job_result", "dataset", "runtime", "bandwidth")
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
        promotion: PromotionRule | None = None,
        champion: Asset | None = None,
        **kwargs: Any,
    ) -> None:
        # What a promotion emits the champion's event through: a plain outlet would fire every run.
        promotions = AssetAlias(name=f"{champion.name}_promotions") if champion else None
        if promotion is not None:
            if champion is None:
                raise ValueError("a promotion rule needs the champion Asset its pointer is kept on")
            kwargs["inlets"] = [*kwargs.get("inlets", []), champion]
            kwargs["outlets"] = [*kwargs.get("outlets", []), promotions]
            # Reading the pointer, deciding and moving it is one step: runs of the DAG take turns.
            kwargs.setdefault("max_active_tis_per_dag", 1)
        super().__init__(**kwargs)
        self.promotion = promotion
        self.champion = champion
        self.promotions = promotions
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
        try:
            job = validate_record(JobResult, self.job_result)
            dataset = validate_record(StagedDataset, self.dataset) if self.dataset else self._fixed_dataset()
            runtime = validate_record(BuiltImage, _first_present(self.runtime))
            check_collectable(job, plan.outputs_root)
            gate = self._gate(context)
            artifacts = publish_artifacts(
                model=plan.model,
                artifact_root=plan.artifact_root or "",
                job=job,
                dataset=dataset,
                runtime=runtime,
                oss=_oss_config(plan, job),
                bandwidth=validate_record(BandwidthCheck, self.bandwidth) if self.bandwidth else None,
                kept=KeptOutputs(tuple(plan.collect), tuple(plan.report_metrics)),
                run=self._run_info(context),
                gate=gate,
            )
        except (SpecError, ArtifactError) as exc:
            raise AirflowFailException(str(exc)) from None
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
            }
        if artifacts.promotion is not None:
            self._conclude(context, Decision.model_validate(artifacts.promotion), artifacts, dataset.version)
        return artifacts.model_dump(mode="json")

    def _gate(self, context: Context) -> Callable[[dict[str, Any]], Decision] | None:
        """The decision on this run's metrics against the champion as it is now; None without a rule."""
        rule, champion_asset = self.promotion, self.champion
        if rule is None or champion_asset is None:
            return None
        stored = context["asset_state_store"][champion_asset].get(CHAMPION_KEY)
        champion = Champion.model_validate(stored) if stored else None
        run = context["dag_run"]
        return lambda metrics: decide(rule, metrics, champion, run.run_id, str(run.run_type.value))

    def _conclude(self, context: Context, decision: Decision, artifacts: ArtifactSet, version: str) -> None:
        """Log the decision; on a promotion move the pointer and announce the champion."""
        self.log.info(
            "Promotion: %s: %s", "PROMOTED" if decision.promoted else "not promoted", decision.reason
        )
        if not decision.promoted or self.champion is None or self.promotions is None:
            return
        run_id = context["dag_run"].run_id
        champion = Champion(run_id=run_id, dataset_version=version, artifacts=artifacts)
        context["asset_state_store"][self.champion].set(CHAMPION_KEY, champion.model_dump(mode="json"))
        context["outlet_events"][self.promotions].add(
            self.champion,
            extra={
                "run_id": run_id,
                "dataset_version": version,
                "manifest_uri": artifacts.manifest_uri,
                decision.metric: decision.candidate,
                "replaced": decision.champion_run_id,
            },
        )

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


def _oss_config(plan: ArtifactsPlan, job: JobResult) -> OssClientConfig | None:
    if not any(uri.startswith("oss://") for uri in (plan.artifact_root or "", job.output_uri or "")):
        return None
    from aliyun_training.staging.oss import OssClientConfig

    return OssClientConfig.from_connection(plan.alibaba_cloud_conn_id)


def _first_present(candidates: Any) -> Any:
    """A record, or the first present one of a list of records from alternative branches."""
    if isinstance(candidates, list | tuple):
        return next((record for record in candidates if record), None)
    return candidates
