"""Preflight: every check for the run's backend runs, then one report lists every finding with its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.backends import get_backend
from aliyun_training.preflight import local as checks
from aliyun_training.preflight.report import Finding, PreflightReport, Verdict
from aliyun_training.spec import Backend, SpecError, TrainingJobSpec

if TYPE_CHECKING:
    from airflow.sdk import Context


class PreflightOperator(BaseOperator):
    """Fail fast, before staging or launching, when the chosen backend cannot run the job.

    Local runs check this machine (CPUs/GPUs, disk for the dataset, the rendezvous port); DLC runs
    check that the connection reaches DLC and may list jobs in the workspace.

    :param spec: the training job (templated).
    :param backend_config: the backend's settings (templated).
    :param source_uri: the dataset version to be staged (templated), for the disk check.
    :param target_root: where it will be staged (templated).
    """

    template_fields = ("spec", "backend_config", "source_uri", "target_root")

    def __init__(
        self,
        *,
        spec: dict[str, Any],
        source_uri: str,
        target_root: str,
        backend_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.backend_config = backend_config or {}
        self.source_uri = source_uri
        self.target_root = target_root

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            spec = TrainingJobSpec.parse(self.spec)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        report = PreflightReport(findings=self._findings(spec))
        self.log.info("Preflight report:\n%s", report.render())
        if report.failed:
            raise AirflowFailException(
                f"Preflight failed; fix every FAIL below and rerun:\n{report.render()}"
            )
        return report.model_dump(mode="json")

    def _findings(self, spec: TrainingJobSpec) -> list[Finding]:
        if spec.backend is Backend.DLC:
            from aliyun_training.preflight.dlc import check_dlc_access

            backend = get_backend(spec.backend, self.backend_config)
            return [_run("dlc_access", lambda: check_dlc_access(backend))]  # type: ignore[arg-type]
        if spec.backend is Backend.ARENA:
            from aliyun_training.preflight.arena import check_dataset_pvcs

            try:
                return check_dataset_pvcs(get_backend(spec.backend, self.backend_config), spec)  # type: ignore[arg-type]
            except SpecError as exc:
                return [_failed("pvc", exc)]
        master_port = self.backend_config.get("master_port")
        return [
            _run("cpus", lambda: checks.check_processors(spec)),
            _run("gpus", lambda: checks.check_gpus(spec)),
            _run("disk", lambda: checks.check_disk(self.source_uri, self.target_root)),
            _run("master_port", lambda: checks.check_master_port(master_port)),
        ]


def _run(name: str, check: Callable[[], Finding]) -> Finding:
    """A check that cannot even run (bad input) is itself a failing finding, not a crash of the report."""
    try:
        return check()
    except SpecError as exc:
        return _failed(name, exc)


def _failed(name: str, exc: SpecError) -> Finding:
    found, _, fix = str(exc).partition(" (fix: ")
    return Finding(check=name, verdict=Verdict.FAIL, found=found, fix=fix.rstrip(")"))
