"""The training image: build it when its content changed, and verify it.

- ``ImageBuildOperator`` computes the content-addressed tag, asks the registry whether it exists,
  and builds it (a kaniko pod on ACK, or ACR Enterprise's build service) only when it does not;
  the task defers while the build runs.
- ``ImageVerifyOperator`` runs the check script inside the image as a one-node job on the run's
  backend and fails, naming what is wrong, when CUDA < 11.2, NCCL < 2.12.10, Python is not 3 or
  the RDMA libraries are missing.

The verification is a training job of its own (``CheckJobOperator``: same backends, same
reattach, timeout and stop-on-kill rules as ``TrainingJobOperator``; its spec is ``image.jobs``'),
which reads its verdict from the job's log, as the fabric's bandwidth check does
(``operators.bandwidth``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.image.jobs import VERIFY_TIMEOUT_MINUTES, verification_spec
from aliyun_training.operators.remote import RemoteRunMixin
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.plan.models import ImagePlan
from aliyun_training.stage_records import BuiltImage, ImageRef
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.backends.base import TrainingBackend
    from aliyun_training.monitor import JobOutcome
    from aliyun_training.spec import TrainingJobSpec

#: task_state_store key of a running build, for stopping it after a timeout.
BUILD_HANDLE_KEY = "image_build_handle"
#: Log lines read back from a check job: the probe prints one JSON line.
CHECK_LOG_LINES = 400


class ImageBuildOperator(RemoteRunMixin, ReturnedRecordsMixin, BaseOperator):
    """Return the run's image as an ``ImageRef``, building it only when its tag is not in the registry.

    :param build: the run plan's ``ImagePlan`` (or its dict form, or an XComArg of it; templated):
        a pinned image (no build, no verification), the environment's fixed image, or a build
        (``kaniko`` or ``acr``) of ``context_dir`` and ``code_dir`` pushed to ``repository`` under
        the content-addressed tag, asked of the registry with ``registry_conn_id`` first.
    :param poll_interval: seconds between checks of a running build.
    :param build_timeout: how long a build may take before it is stopped and the task fails.
    """

    template_fields = ("build",)
    ui_color = "#ffe0b2"
    remote_kind = "image"
    remote_key = BUILD_HANDLE_KEY

    def __init__(
        self,
        *,
        build: ImagePlan | dict[str, Any],
        poll_interval: float = 15.0,
        build_timeout: timedelta = timedelta(hours=2),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.build = build.model_dump(mode="json") if isinstance(build, ImagePlan) else build
        self.poll_interval = poll_interval
        self.build_timeout = build_timeout

    @property
    def plan(self) -> ImagePlan:
        """The image's part of the run plan, once templates are rendered."""
        return validate_record(ImagePlan, self.build)

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            plan = self.plan
            if plan.pinned:
                self.log.warning(
                    "Image %s is pinned by the trigger form: not built, not verified", plan.pinned
                )
                return ImageRef(uri=plan.pinned, source="pinned").model_dump(mode="json")
            if not plan.mode:
                if not plan.fixed:
                    raise SpecError(
                        "image: the environment names no image and builds none "
                        "(fix: set image, or image_build.mode and image_build.repository)"
                    )
                return ImageRef(uri=plan.fixed, source="existing").model_dump(mode="json")
            return self._build_unless_present(context, plan)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None

    def _build_unless_present(self, context: Context, plan: ImagePlan) -> dict[str, Any]:
        from aliyun_training.image.container_registry import RegistryAuthError, image_digest
        from aliyun_training.image.context import build_context, image_reference, image_tag
        from aliyun_training.remote_runs import remote_run

        files = build_context(plan.context_path, plan.code_dir)
        tag = image_tag(files, plan.build_args)
        if plan.tag and tag != plan.tag:
            raise SpecError(
                f"image: the build context changed since the run was planned (tag {plan.tag}, now {tag}) "
                "(fix: clear the run's configure task so it plans the current code)"
            )
        reference = image_reference(plan.repository or "", tag)
        if not plan.force_rebuild:
            try:
                digest = image_digest(reference, plan.registry_conn_id)
            except RegistryAuthError as exc:
                raise AirflowFailException(str(exc)) from None  # a retry cannot fix credentials
            if digest:
                self.log.info("Image %s already exists (%s): nothing to build", reference, digest)
                return ImageRef(uri=reference, digest=digest, tag=tag, source="existing").model_dump(
                    mode="json"
                )
        mode = plan.mode or ""
        config = _builder_config(plan, files, tag, reference)
        handle = remote_run("image", mode, config).submit()
        self.log.info("Building %s with %s: %s", reference, mode, handle)
        self.defer_to_remote(context, mode, config, handle, self.poll_interval, self.build_timeout)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The build ended: return the pushed image, or fail with the build's failing step."""
        from aliyun_training.stage_records import OutcomeStatus

        mode = self.plan.mode or ""
        outcome = self.remote_outcome(event)
        if outcome.status is not OutcomeStatus.SUCCEEDED:
            raise AirflowException(f"Image build ({mode}) failed: {outcome.message}")
        result = self.remote_result(mode, outcome)
        tail = result.get("log_tail", [])[-20:]
        for line in tail:
            self.log.info("build | %s", line)
        return ImageRef(
            uri=result["image"],
            digest=result.get("digest"),
            tag=outcome.config["tag"],
            source="built",
            log_tail=tail,
        ).model_dump(mode="json")


def _builder_config(plan: ImagePlan, files: dict[str, str], tag: str, reference: str) -> dict[str, Any]:
    """The remote build's settings: the plan's builder block with this build's inputs."""
    if plan.mode == "kaniko":
        return {
            **plan.builder,
            "destination": reference,
            "tag": tag,
            "context_files": files,
            "build_args": plan.build_args,
        }
    return {**plan.builder, "tag": tag, "image": reference, "force": plan.force_rebuild}


class CheckJobOperator(TrainingJobOperator):
    """A training job whose verdict is read from its own log once it succeeded."""

    resumable = False
    live_record = False
    #: How many of the job's last log lines hold the verdict.
    log_lines = CHECK_LOG_LINES

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _finish(
        self, context: Context, spec: TrainingJobSpec, backend: TrainingBackend, outcome: JobOutcome
    ) -> dict[str, Any]:
        super()._finish(context, spec, backend, outcome)  # raises when the job failed
        return self._verdict(spec, backend.tail(outcome.handle, 0, self.log_lines))


class ImageVerifyOperator(CheckJobOperator):
    """Run the check script in the image on one GPU node of the run's backend; return a ``BuiltImage``.

    ``image`` is the build stage's ``ImageRef``; a pinned image is passed through unverified. A
    failed check fails the task without retries: the image has to be fixed, not re-run.
    """

    def __init__(self, *, image: Any, timeout_minutes: int = VERIFY_TIMEOUT_MINUTES, **kwargs: Any) -> None:
        super().__init__(image=image, **kwargs)
        self.timeout_minutes = timeout_minutes

    def execute(self, context: Context) -> dict[str, Any]:
        ref = validate_record(ImageRef, self.image)
        if ref.source == "pinned":
            self.log.warning("Image %s is pinned: not verified", ref.uri)
            return BuiltImage(uri=ref.uri, digest=ref.digest or "", python="").model_dump(mode="json")
        return super().execute(context)

    def _spec(self) -> TrainingJobSpec:
        return verification_spec(super()._spec(), self.timeout_minutes)

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        from aliyun_training.findings import PreflightReport, Verdict
        from aliyun_training.image.probe_checks import parse_probe_output, verify_probe

        ref = validate_record(ImageRef, self.image)
        try:
            report = parse_probe_output(lines)
        except ValueError as exc:
            raise AirflowFailException(
                f"Image {ref.uri}: the check script printed no result ({exc})"
            ) from None
        findings = verify_probe(report, require_rdma=spec.rdma)
        rendered = PreflightReport(findings=findings).render()
        self.log.info("Image %s checks:\n%s", ref.uri, rendered)
        if any(f.verdict is Verdict.FAIL for f in findings):
            raise AirflowFailException(f"Image {ref.uri} cannot run this training:\n{rendered}")
        return BuiltImage(
            uri=ref.uri,
            digest=ref.digest or "",
            python=report.get("python") or "",
            torch=report.get("torch"),
            cuda=report.get("cuda"),
            nccl=report.get("nccl"),
            rdma_libs=report.get("rdma_libs") or [],
            ibv_devices=report.get("ibv_devices") or [],
            tools=report.get("tools") or [],
            verified=True,
        ).model_dump(mode="json")
