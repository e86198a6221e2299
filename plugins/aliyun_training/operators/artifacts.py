"""Publish a finished run's artifacts and announce the model as an Airflow Asset event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.artifacts import ArtifactError, publish_artifacts
from aliyun_training.spec import (
    BandwidthCheck,
    BuiltImage,
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

    :param model: model name; the first path segment under ``artifact_root``.
    :param artifact_root: root of the versioned artifact store (templated).
    :param job_result: the training task's JobResult (an XComArg or templated).
    :param dataset: the staging task's StagedDataset.
    :param runtime: the image/runtime task's BuiltImage.
    :param bandwidth: the RDMA bandwidth check's BandwidthCheck, if the run measured one.
    :param alibaba_cloud_conn_id: connection whose OSS endpoint and credentials an ``oss://``
        artifact root is written with.
    """

    template_fields = ("artifact_root", "job_result", "dataset", "runtime", "bandwidth")

    def __init__(
        self,
        *,
        model: str,
        artifact_root: str,
        job_result: Any,
        dataset: Any,
        runtime: Any,
        bandwidth: Any = None,
        alibaba_cloud_conn_id: str = "alibaba_cloud_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.alibaba_cloud_conn_id = alibaba_cloud_conn_id
        self.model = model
        self.artifact_root = artifact_root
        self.job_result = job_result
        self.dataset = dataset
        self.runtime = runtime
        self.bandwidth = bandwidth

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            job = validate_record(JobResult, self.job_result)
            dataset = validate_record(StagedDataset, self.dataset)
            runtime = validate_record(BuiltImage, self.runtime)
            artifacts = publish_artifacts(
                model=self.model,
                artifact_root=self.artifact_root,
                job=job,
                dataset=dataset,
                runtime=runtime,
                oss=self._oss_config(),
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

    def _oss_config(self) -> OssClientConfig | None:
        if not self.artifact_root.startswith("oss://"):
            return None
        from aliyun_training.staging.oss import OssClientConfig

        return OssClientConfig.from_connection(self.alibaba_cloud_conn_id)
