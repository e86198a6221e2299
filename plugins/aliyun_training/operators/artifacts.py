"""Publish a finished run's artifacts and announce the model as an Airflow Asset event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training.artifacts import ArtifactError, publish_artifacts
from aliyun_training.spec import (
    BandwidthCheck,
    BuiltImage,
    FixedDataset,
    JobResult,
    SpecError,
    StagedDataset,
    validate_record,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.staging.oss import OssClientConfig


class ArtifactsOperator(BaseOperator):
    """Collect checkpoints, metrics and a run report into a versioned directory with a manifest.

    The first Asset in ``outlets`` receives an event whose extra names the manifest, the dataset
    version and the job, so consumer DAGs scheduled on the model know exactly what changed.

    Records of stages that sit on alternative branches (a local runtime probe or a verified image;
    a staged version or none) arrive as None from the branch that did not run, so ``runtime`` may
    list candidates and ``fixed_dataset`` stands in when nothing was staged.

    :param model: model name; the first path segment under ``artifact_root``.
    :param artifact_root: root of the versioned artifact store (templated).
    :param job_result: the training task's JobResult (an XComArg or templated); None (the training
        task was skipped) skips this task.
    :param dataset: the staging task's StagedDataset, or None when the run staged nothing.
    :param fixed_dataset: the FixedDataset the job mounted instead, recorded when ``dataset`` is None.
    :param runtime: the BuiltImage the job ran in, or a list of candidates of which the first present
        one is used.
    :param bandwidth: the RDMA bandwidth check's BandwidthCheck, if the run measured one.
    :param unavailable: why this run cannot publish (a setting left blank); when set, the task is
        skipped with this message.
    :param alibaba_cloud_conn_id: connection whose OSS endpoint and credentials read an ``oss://``
        job output and write an ``oss://`` artifact root (templated).
    """

    template_fields = (
        "artifact_root",
        "job_result",
        "dataset",
        "fixed_dataset",
        "runtime",
        "bandwidth",
        "unavailable",
        "alibaba_cloud_conn_id",
    )

    def __init__(
        self,
        *,
        model: str,
        artifact_root: Any,
        job_result: Any,
        runtime: Any,
        dataset: Any = None,
        fixed_dataset: Any = None,
        bandwidth: Any = None,
        unavailable: Any = None,
        alibaba_cloud_conn_id: str = "alibaba_cloud_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.model = model
        self.artifact_root = artifact_root
        self.job_result = job_result
        self.dataset = dataset
        self.fixed_dataset = fixed_dataset
        self.runtime = runtime
        self.bandwidth = bandwidth
        self.unavailable = unavailable

    def execute(self, context: Context) -> dict[str, Any]:
        if self.unavailable:
            self.log.warning("!!! NO ARTIFACTS PUBLISHED for this run: %s !!!", self.unavailable)
            raise AirflowSkipException(self.unavailable)
        if not self.job_result:
            raise AirflowSkipException("the training task did not run: there is nothing to publish")
        try:
            job = validate_record(JobResult, self.job_result)
            dataset = (
                validate_record(StagedDataset, self.dataset)
                if self.dataset
                else validate_record(FixedDataset, self.fixed_dataset)
            )
            runtime = validate_record(BuiltImage, _first_present(self.runtime))
            artifacts = publish_artifacts(
                model=self.model,
                artifact_root=self.artifact_root,
                job=job,
                dataset=dataset,
                runtime=runtime,
                oss=self._oss_config(job),
                bandwidth=validate_record(BandwidthCheck, self.bandwidth) if self.bandwidth else None,
            )
        except (SpecError, ArtifactError) as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("Published artifacts at %s (manifest %s)", artifacts.uri, artifacts.manifest_uri)
        self.log.info("Train loss per epoch: %s", artifacts.metrics["train_loss"])
        assets = [outlet for outlet in self.outlets if isinstance(outlet, Asset)]
        if assets:
            context["outlet_events"][assets[0]].extra = {
                "manifest_uri": artifacts.manifest_uri,
                "dataset_version": dataset.version,
                "job_id": job.job_id,
                "final_train_loss": artifacts.metrics["final_train_loss"],
            }
        return artifacts.model_dump(mode="json")

    def _oss_config(self, job: JobResult) -> OssClientConfig | None:
        if not any(uri.startswith("oss://") for uri in (self.artifact_root, job.output_uri or "")):
            return None
        from aliyun_training.staging.oss import OssClientConfig

        return OssClientConfig.from_connection(self.alibaba_cloud_conn_id)


def _first_present(candidates: Any) -> Any:
    """A record, or the first present one of a list of records from alternative branches."""
    if isinstance(candidates, list | tuple):
        return next((record for record in candidates if record), None)
    return candidates
