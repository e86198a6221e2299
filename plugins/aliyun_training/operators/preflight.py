"""Preflight for the local backend: every check runs, one report lists every finding with its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.preflight import local as checks
from aliyun_training.preflight.report import Finding, PreflightReport, Verdict
from aliyun_training.spec import SpecError, TrainingJobSpec

if TYPE_CHECKING:
    from airflow.sdk import Context


class LocalPreflightOperator(BaseOperator):
    """Fail fast, before staging or launching, when this machine cannot run the job.

    :param spec: the training job (templated) whose nodes and GPUs are checked.
    :param source_uri: the dataset version to be staged (templated), for the disk check.
    :param target_root: where it will be staged (templated).
    :param master_port: the rendezvous port the local backend is configured with, if any.
    """

    template_fields = ("spec", "source_uri", "target_root")

    def __init__(
        self,
        *,
        spec: dict[str, Any],
        source_uri: str,
        target_root: str,
        master_port: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.source_uri = source_uri
        self.target_root = target_root
        self.master_port = master_port

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            spec = TrainingJobSpec.parse(self.spec)
        except SpecError as exc:
            raise AirflowFailException(str(exc)) from None
        report = PreflightReport(
            findings=[
                _run("cpus", lambda: checks.check_processors(spec)),
                _run("gpus", lambda: checks.check_gpus(spec)),
                _run("disk", lambda: checks.check_disk(self.source_uri, self.target_root)),
                _run("master_port", lambda: checks.check_master_port(self.master_port)),
            ]
        )
        self.log.info("Preflight report:\n%s", report.render())
        if report.failed:
            raise AirflowFailException(
                f"Preflight failed; fix every FAIL below and rerun:\n{report.render()}"
            )
        return report.model_dump(mode="json")


def _run(name: str, check: Callable[[], Finding]) -> Finding:
    """A check that cannot even run (bad input) is itself a failing finding, not a crash of the report."""
    try:
        return check()
    except SpecError as exc:
        found, _, fix = str(exc).partition(" (fix: ")
        return Finding(check=name, verdict=Verdict.FAIL, found=found, fix=fix.rstrip(")"))
