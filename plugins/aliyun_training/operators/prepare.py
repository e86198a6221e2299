"""Convert a raw dataset version into training shards with a CPU job, once per raw version and code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.plan.models import JobPlan, PreparePlan
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.backends.base import TrainingBackend
    from aliyun_training.monitor import JobOutcome
    from aliyun_training.spec import TrainingJobSpec


class DatasetPrepareOperator(TrainingJobOperator):
    """Run the plan's prepare job unless its shards are already complete; return where they are.

    The job runs on the run's backend like a training job (deferred while it runs, stopped when the
    task is killed, reattached on retry), with ``RAW_DIR`` the raw version and ``OUTPUT_DIR`` the
    derived version's folder. When it succeeds a marker is written last into that folder, so a rerun
    of the same raw version (with the same command and code: the derived version's name says so)
    reuses the shards without submitting anything, and a job that died mid-write leaves no marker.

    :param prepare: the run plan's ``PreparePlan`` (templated).
    :param image: as for ``TrainingJobOperator`` (cloud runs: the verified training image).
    """

    template_fields = (*TrainingJobOperator.template_fields, "prepare")
    ui_color = "#ffd180"
    #: A conversion writes its shards once; a rerun converts again (the marker is written last).
    resumable = False
    live_record = False

    def __init__(self, *, prepare: PreparePlan | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(job={}, **kwargs)
        self.prepare = prepare.model_dump(mode="json") if isinstance(prepare, PreparePlan) else prepare

    @property
    def prepared(self) -> PreparePlan:
        return validate_record(PreparePlan, self.prepare)

    @property
    def plan(self) -> JobPlan:
        return self.prepared.job

    def execute(self, context: Context) -> dict[str, Any]:
        from aliyun_training.staging.versions import is_prepared

        prepared = self.prepared
        if is_prepared(prepared.output_uri, prepared.alibaba_cloud_conn_id):
            self.log.info(
                "Reusing the shards of %s at %s: nothing to prepare", prepared.raw_uri, prepared.output_uri
            )
            return {"output_uri": prepared.output_uri, "raw_uri": prepared.raw_uri, "reused": True}
        self.log.info("Preparing %s into %s", prepared.raw_uri, prepared.output_uri)
        return super().execute(context)

    def _finish(
        self, context: Context, spec: TrainingJobSpec, backend: TrainingBackend, outcome: JobOutcome
    ) -> dict[str, Any]:
        from aliyun_training.staging.versions import mark_prepared

        result = super()._finish(context, spec, backend, outcome)
        prepared = self.prepared
        record = {"raw_uri": prepared.raw_uri, "job_id": result["job_id"], "command": spec.command}
        mark_prepared(prepared.output_uri, prepared.alibaba_cloud_conn_id, record)
        self.log.info("Shards of %s are complete at %s", prepared.raw_uri, prepared.output_uri)
        return {
            "output_uri": prepared.output_uri,
            "raw_uri": prepared.raw_uri,
            "reused": False,
            "job": result,
        }
