"""The network fabric's check: RDMA bandwidth between two nodes, measured before a multi-node run.

``RdmaBandwidthOperator`` runs a two-node bandwidth test on the run's resources (``ib_write_bw``
between two pods on ACK, nccl-tests ``all_reduce_perf`` on DLC: the backend's record says which),
and compares it with the link; ``image.fabric_checks`` reads the tools' output into a verdict. Like
the image's verification it is a check job (``operators.image.CheckJobOperator``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.backend_catalog import backend_record
from aliyun_training.image.jobs import BANDWIDTH_TEST_TOOLS, BANDWIDTH_TIMEOUT_MINUTES, bandwidth_spec
from aliyun_training.operators.image import CheckJobOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.plan.models import RdmaCheckPlan
from aliyun_training.spec import Framework
from aliyun_training.stage_records import BandwidthCheck
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context

    from aliyun_training.spec import TrainingJobSpec

#: Log lines read back from a bandwidth job: NCCL's INFO lines of 16 ranks run to thousands, and
#: the NET/IB or NET/Socket lines come early.
BANDWIDTH_LOG_LINES = 5000


class RdmaBandwidthOperator(CheckJobOperator):
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

    template_fields = (*TrainingJobOperator.template_fields, "check")

    def __init__(
        self,
        *,
        image: Any,
        check: RdmaCheckPlan | dict[str, Any],
        timeout_minutes: int = BANDWIDTH_TIMEOUT_MINUTES,
        **kwargs: Any,
    ) -> None:
        super().__init__(image=image, **kwargs)
        self.check = check.model_dump(mode="json") if isinstance(check, RdmaCheckPlan) else check
        self.timeout_minutes = timeout_minutes

    @property
    def settings(self) -> RdmaCheckPlan:
        """The bandwidth check's part of the run plan, once templates are rendered."""
        return validate_record(RdmaCheckPlan, self.check)

    log_lines = BANDWIDTH_LOG_LINES

    def execute(self, context: Context) -> dict[str, Any]:
        why = self._skip_reason(self.plan.spec)
        if why:
            self.log.warning("RDMA bandwidth check skipped: %s", why)
            return BandwidthCheck(verdict="SKIPPED", message=why).model_dump(mode="json")
        return super().execute(context)

    def _skip_reason(self, spec: TrainingJobSpec) -> str:
        """Why this run gets no bandwidth check, or "" when it gets one."""
        if self.settings.skip:
            return "skipped by the trigger form"
        if spec.nodes < 2:
            return "a single-node run uses no RDMA link"
        if not spec.rdma:
            return "the run does not use RDMA (rdma is off in the environment)"
        test = backend_record(spec.backend).bandwidth_test
        if test is None:
            return f"the {spec.backend.value} backend has no RDMA bandwidth check"
        if test == "nccl_tests" and spec.gpus_per_node == 0:
            return "all_reduce_perf needs GPUs and this run has none"
        image = self.image if isinstance(self.image, dict) else {}
        if not image.get("verified"):
            return "the image was pinned: not verified, so its test programs are unknown"
        needed = BANDWIDTH_TEST_TOOLS[test]
        missing = [tool for tool in needed if tool not in (image.get("tools") or [])]
        if missing:
            return f"the image lacks {', '.join(missing)} (build it from include/docker to get them)"
        return ""

    def _spec(self) -> TrainingJobSpec:
        check = self.settings
        return bandwidth_spec(
            super()._spec(),
            device=check.device,
            gid_index=check.gid_index,
            timeout_minutes=self.timeout_minutes,
        )

    def _verdict(self, spec: TrainingJobSpec, lines: list[str]) -> dict[str, Any]:
        from aliyun_training.findings import Verdict
        from aliyun_training.image.fabric_checks import (
            all_reduce_verdict,
            ib_write_bw_verdict,
            parse_all_reduce_perf,
            parse_ib_write_bw,
        )

        text = "\n".join(lines)
        line_rate = self.settings.line_rate_gbps
        ratios = {"pass_ratio": self.settings.pass_ratio}
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
