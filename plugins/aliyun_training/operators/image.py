"""The training image: build it when its content changed, verify it, and prove RDMA bandwidth.

- ``ImageBuildOperator`` computes the content-addressed tag, asks the registry whether it exists,
  and builds it (a kaniko pod on ACK, or ACR Enterprise's build service) only when it does not;
  the task defers while the build runs.
- ``ImageVerifyOperator`` runs the check script inside the image as a one-node job on the run's
  backend and fails, naming what is wrong, when CUDA < 11.2, NCCL < 2.12.10, Python is not 3 or
  the RDMA libraries are missing.
- ``RdmaBandwidthOperator`` runs a two-node bandwidth test on the same resources (``ib_write_bw``
  between two pods on ACK, nccl-tests ``all_reduce_perf`` on DLC) and compares it with the link.

The two job stages are training jobs of their own (same backends, same reattach, timeout and
stop-on-kill rules as ``TrainingJobOperator``), which read their verdict from the job's log.
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from aliyun_training.backends.base import JobHandle, TrainingBackend
from aliyun_training.operators.remote import RemoteRunMixin
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.spec import (
    Backend,
    BandwidthCheck,
    BuiltImage,
    Framework,
    ImageRef,
    SpecError,
    TrainingJobSpec,
    validate_record,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: task_state_store key of a running build, for stopping it after a timeout.
BUILD_HANDLE_KEY = "image_build_handle"
#: Log lines read back from a check job: the probe prints one JSON line; NCCL's INFO lines of 16
#: ranks run to thousands, and the NET/IB or NET/Socket lines come early.
CHECK_LOG_LINES = 400
BANDWIDTH_LOG_LINES = 5000
#: NCCL settings DLC injects into every pod, forwarded by mpirun to the ranks it starts.
NCCL_FORWARDED = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_SOCKET_IFNAME")


def check_command() -> str:
    """The probe, passed inline: it runs in any image with python3, not only in images we built."""
    import base64

    from aliyun_training import runtime_probe

    source = base64.b64encode(Path(runtime_probe.__file__).read_bytes()).decode()
    return 'python3 -c "$(echo ' + source + ' | base64 -d)"'


class ImageBuildOperator(RemoteRunMixin, BaseOperator):
    """Return the run's image as an ``ImageRef``, building it only when its tag is not in the registry.

    :param context_dir: the build context (``include/docker``); the check script is added to it.
    :param code_dir: the training code (``include/training``), copied into the image.
    :param repository: ``registry/namespace/repo`` the tag is pushed to (templated).
    :param mode: ``kaniko`` or ``acr``; empty: no build, use ``fixed_image`` (templated).
    :param builder: the builder's settings (kaniko: namespace, registry_secret, builder_image...;
        acr: instance_id, repo_id, build_rule_id) (templated).
    :param build_args: Dockerfile build arguments; part of the tag (templated).
    :param registry_conn_id: connection (host, login, password) the registry is asked with.
    :param pinned_image: an image the trigger form names: no build and no verification (templated).
    :param fixed_image: the environment's image when no build is configured (templated).
    :param force_rebuild: build even when the tag exists (templated).
    """

    template_fields = (
        "repository",
        "mode",
        "builder",
        "build_args",
        "registry_conn_id",
        "pinned_image",
        "fixed_image",
        "force_rebuild",
    )
    ui_color = "#ffe0b2"
    remote_kind = "image"
    remote_key = BUILD_HANDLE_KEY

    def __init__(
        self,
        *,
        context_dir: str,
        code_dir: str | None = None,
        repository: str | None = None,
        mode: str | None = None,
        builder: dict[str, Any] | None = None,
        build_args: dict[str, str] | None = None,
        registry_conn_id: str | None = None,
        pinned_image: str | None = None,
        fixed_image: str | None = None,
        force_rebuild: Any = False,
        poll_interval: float = 15.0,
        build_timeout: timedelta = timedelta(hours=2),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.context_dir = context_dir
        self.code_dir = code_dir
        self.repository = repository
        self.mode = mode
        self.builder = builder or {}
        self.build_args = build_args or {}
        self.registry_conn_id = registry_conn_id
        self.pinned_image = pinned_image
        self.fixed_image = fixed_image
        self.force_rebuild = force_rebuild
        self.poll_interval = poll_interval
        self.build_timeout = build_timeout

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            if self.pinned_image:
                self.log.warning(
                    "Image %s is pinned by the trigger form: not built, not verified", self.pinned_image
                )
                return ImageRef(uri=self.pinned_image, source="pinned").model_dump(mode="json")
            if not self.mode:
                if not self.fixed_image:
                    raise SpecError(
                        "image: the environment names no image and builds none "
                        "(fix: set image, or image_build.mode and image_build.repository)"
                    )
                return ImageRef(uri=self.fixed_image, source="existing").model_dump(mode="json")
            return self._build_unless_present(context)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None

    def _build_unless_present(self, context: Context) -> dict[str, Any]:
        from aliyun_training.image.context import build_context, image_reference, image_tag
        from aliyun_training.image.registry import RegistryAuthError, image_digest
        from aliyun_training.remote import remote_run

        files = build_context(Path(self.context_dir), self.code_dir)
        tag = image_tag(files, self.build_args)
        reference = image_reference(self.repository or "", tag)
        if not _truthy(self.force_rebuild):
            try:
                digest = image_digest(reference, self.registry_conn_id)
            except RegistryAuthError as exc:
                raise AirflowFailException(str(exc)) from None  # a retry cannot fix credentials
            if digest:
                self.log.info("Image %s already exists (%s): nothing to build", reference, digest)
                return ImageRef(uri=reference, digest=digest, tag=tag, source="existing").model_dump(
                    mode="json"
                )
        config = self._builder_config(files, tag, reference)
        handle = remote_run("image", self.mode or "", config).submit()
        self.log.info("Building %s with %s: %s", reference, self.mode, handle)
        self.defer_to_remote(context, self.mode or "", config, handle, self.poll_interval, self.build_timeout)

    def _builder_config(self, files: dict[str, str], tag: str, reference: str) -> dict[str, Any]:
        if self.mode == "kaniko":
            return {
                **self.builder,
                "destination": reference,
                "tag": tag,
                "context_files": files,
                "build_args": self.build_args,
            }
        return {**self.builder, "tag": tag, "image": reference, "force": _truthy(self.force_rebuild)}

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The build ended: return the pushed image, or fail with the build's failing step."""
        if event["status"] != "succeeded":
            raise AirflowException(f"Image build ({self.mode}) failed: {event.get('message')}")
        result = self.remote_result(self.mode or "", event)
        tail = result.get("log_tail", [])[-20:]
        for line in tail:
            self.log.info("build | %s", line)
        return ImageRef(
            uri=result["image"],
            digest=result.get("digest"),
            tag=event["config"]["tag"],
            source="built",
            log_tail=tail,
        ).model_dump(mode="json")


def _truthy(value: Any) -> bool:
    """A templated flag arrives as a bool or as its rendered string."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


class _CheckJobOperator(TrainingJobOperator):
    """A training job whose verdict is read from its own log once it succeeded."""

    #: How many of the job's last log lines hold the verdict.
    log_lines = CHECK_LOG_LINES

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _finish(
        self, spec: TrainingJobSpec, backend: TrainingBackend, event: dict[str, Any]
    ) -> dict[str, Any]:
        super()._finish(spec, backend, event)  # raises when the job failed
        handle = JobHandle.model_validate(event["handle"])
        backend.status(handle)  # a fresh worker knows the job's pods only after a status call
        return self._verdict(spec, backend.tail(handle, 0, self.log_lines))


class ImageVerifyOperator(_CheckJobOperator):
    """Run the check script in the image on one GPU node of the run's backend; return a ``BuiltImage``.

    ``image`` is the build stage's ``ImageRef``; a pinned image is passed through unverified. A
    failed check fails the task without retries: the image has to be fixed, not re-run.
    """

    def __init__(self, *, image: Any, timeout_minutes: int = 30, **kwargs: Any) -> None:
        super().__init__(image=image, **kwargs)
        self.timeout_minutes = timeout_minutes

    def execute(self, context: Context) -> dict[str, Any]:
        ref = validate_record(ImageRef, self.image)
        if ref.source == "pinned":
            self.log.warning("Image %s is pinned: not verified", ref.uri)
            return BuiltImage(uri=ref.uri, digest=ref.digest or "", python="").model_dump(mode="json")
        return super().execute(context)

    def _spec(self) -> TrainingJobSpec:
        spec = super()._spec()
        return spec.model_copy(
            update={
                "nodes": 1,
                "gpus_per_node": 1,  # NCCL reports its version only with a GPU
                "command": check_command(),
                "datasets": [],
                "timeout_minutes": self.timeout_minutes,
            }
        )

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        from aliyun_training.image.checks import parse_probe_output, verify_probe
        from aliyun_training.preflight.report import PreflightReport, Verdict

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


class RdmaBandwidthOperator(_CheckJobOperator):
    """Measure RDMA bandwidth between two nodes before a multi-node run; return a ``BandwidthCheck``.

    On ACK (and locally) two pods run ``ib_write_bw``: rank 0 serves, rank 1 connects to it. On
    DLC an MPI job runs nccl-tests ``all_reduce_perf`` with ``NCCL_DEBUG=INFO``, whose bus bandwidth
    is compared with the link and whose log must show ``NET/IB``, not ``NET/Socket``. PASS at
    ``pass_ratio`` x ``line_rate_gbps`` or more; FAIL fails the task (the run would crawl over TCP).

    :param image: the verified image (``BuiltImage``) or an image reference (templated).
    :param line_rate_gbps: the RDMA bandwidth of one node in Gb/s (NICs x line rate, e.g. 200 for two
        100 Gb/s ports): ib_write_bw's average and all_reduce_perf's bus bandwidth at the largest
        message size are compared with it.
    :param skip: skip the check (templated; the trigger form's switch); single-node runs always skip.
    :param device: the RDMA device ``ib_write_bw`` uses; ``gid_index`` its GID index.
    """

    template_fields = (
        *TrainingJobOperator.template_fields,
        "line_rate_gbps",
        "pass_ratio",
        "device",
        "gid_index",
        "skip",
    )

    def __init__(
        self,
        *,
        image: Any,
        line_rate_gbps: Any,
        pass_ratio: Any = 0.9,
        skip: Any = False,
        device: str = "mlx5_0",
        gid_index: Any = 3,
        timeout_minutes: int = 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(image=image, **kwargs)
        self.line_rate_gbps = line_rate_gbps
        self.pass_ratio = pass_ratio
        self.skip = skip
        self.device = device
        self.gid_index = gid_index
        self.timeout_minutes = timeout_minutes

    log_lines = BANDWIDTH_LOG_LINES

    def execute(self, context: Context) -> dict[str, Any]:
        why = self._skip_reason(TrainingJobSpec.parse(self.spec))
        if why:
            self.log.warning("RDMA bandwidth check skipped: %s", why)
            return BandwidthCheck(verdict="SKIPPED", message=why).model_dump(mode="json")
        return super().execute(context)

    def _skip_reason(self, spec: TrainingJobSpec) -> str:
        """Why this run gets no bandwidth check, or "" when it gets one."""
        if _truthy(self.skip):
            return "skipped by the trigger form"
        if spec.nodes < 2:
            return "a single-node run uses no RDMA link"
        if not spec.rdma:
            return "the run does not use RDMA (rdma is off in the environment)"
        if spec.backend is Backend.DLC and spec.gpus_per_node == 0:
            return "all_reduce_perf needs GPUs and this run has none"
        image = self.image if isinstance(self.image, dict) else {}
        if not image.get("verified"):
            return "the image was pinned: not verified, so its test programs are unknown"
        needed = ["mpirun", "all_reduce_perf"] if spec.backend is Backend.DLC else ["ib_write_bw"]
        missing = [tool for tool in needed if tool not in (image.get("tools") or [])]
        if missing:
            return f"the image lacks {', '.join(missing)} (build it from include/docker to get them)"
        return ""

    def _spec(self) -> TrainingJobSpec:
        spec = super()._spec()
        gpus = max(spec.gpus_per_node, 1)
        if spec.backend is Backend.DLC:
            forwarded = " ".join(f"-x {name}" for name in NCCL_FORWARDED)
            command = (
                f"mpirun --allow-run-as-root -np {2 * gpus} -npernode {gpus} -x NCCL_DEBUG=INFO {forwarded} "
                "all_reduce_perf -b 8M -e 1G -f 2 -g 1"
            )
            framework = Framework.MPI
        else:
            # A PyTorchJob sets RANK on both pods and MASTER_ADDR to the master; the client retries
            # until the server listens, so a slow start is not a failed check.
            test = (
                f"ib_write_bw -d {shlex.quote(self.device)} -x {int(self.gid_index)} -F --report_gbits -D 15"
            )
            command = (
                f'if [ "$RANK" = "0" ]; then {test}; else for i in $(seq 30); do '
                f'{test} "$MASTER_ADDR" && exit 0; sleep 2; done; exit 1; fi'
            )
            framework = Framework.PYTORCH
        return spec.model_copy(
            update={
                "nodes": 2,
                "framework": framework,
                "command": command,
                "datasets": [],
                "env": {**spec.env, "NCCL_DEBUG": "INFO"},
                "timeout_minutes": self.timeout_minutes,
            }
        )

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        from aliyun_training.image.checks import (
            all_reduce_verdict,
            ib_write_bw_verdict,
            parse_all_reduce_perf,
            parse_ib_write_bw,
        )
        from aliyun_training.preflight.report import Verdict

        text = "\n".join(lines)
        line_rate = float(self.line_rate_gbps)
        ratios = {"pass_ratio": float(self.pass_ratio)}
        try:
            if spec.framework is Framework.MPI:
                perf = parse_all_reduce_perf(text)
                tool, measured, transport = "all_reduce_perf", perf.peak_busbw_gbps, perf.transport
                finding = all_reduce_verdict(perf, slowest_link_gbps=line_rate, **ratios)
            else:
                bw = parse_ib_write_bw(text)
                tool, measured, transport = "ib_write_bw", bw.bw_average_gbps, "ib"
                finding = ib_write_bw_verdict(bw, line_rate_gbps=line_rate, **ratios)
        except ValueError as exc:
            # The job succeeded; reading its log again on a retry would find the same nothing.
            raise AirflowFailException(
                f"RDMA bandwidth check: no result in the {spec.backend} job's log ({exc})"
            ) from None
        check = BandwidthCheck(
            verdict=finding.verdict.value,
            tool=tool,
            measured_gbps=round(measured, 2),
            line_rate_gbps=line_rate,
            transport=transport,
            message=finding.found + (f" (fix: {finding.fix})" if finding.fix else ""),
        )
        self.log.info("RDMA bandwidth %s: %s", check.verdict, check.message)
        if finding.verdict is Verdict.FAIL:
            raise AirflowFailException(f"RDMA bandwidth check failed: {check.message}")
        return check.model_dump(mode="json")
