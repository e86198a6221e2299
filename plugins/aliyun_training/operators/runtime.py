"""Record the local training runtime, the local counterpart of building and verifying an image."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training import runtime_probe
from aliyun_training.plan.models import JobPlan
from aliyun_training.stage_records import BuiltImage
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from airflow.sdk import Context


class LocalRuntimeOperator(ReturnedRecordsMixin, BaseOperator):
    """Probe the interpreter that local jobs run with; fail clearly when it cannot train.

    :param python: the training interpreter; default: the one running this task, whose directory the
        local backend puts first on the jobs' PATH.
    :param job: the run plan's ``JobPlan`` (templated); torch is required when its command runs
        torchrun (without a job: always), since a declared pipeline's script may need only Python.
    """

    template_fields = ("python", "job")

    def __init__(self, *, python: str | None = None, job: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.python = python
        self.job = job

    def execute(self, context: Context) -> dict[str, Any]:
        python = self.python or sys.executable
        probe = subprocess.run(
            [python, str(Path(runtime_probe.__file__))],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if probe.returncode != 0:
            raise AirflowFailException(f"Runtime probe failed with {python}:\n{probe.stderr[-2000:]}")
        found = json.loads(probe.stdout.strip().splitlines()[-1])
        self.log.info("Training runtime %s: %s", python, found)
        needs_torch = self.job is None or "torchrun" in validate_record(JobPlan, self.job).spec.command
        if not found["torch"] and needs_torch:
            raise AirflowFailException(
                f"torch is not installed in the training runtime {python} ({found.get('torch_error')}) "
                f"(fix: install it into that interpreter, e.g. {python} -m pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu for a CPU-only worker; in a checkout of the "
                "project, pip install -r requirements-training.txt pins the tested version)"
            )
        identity = json.dumps(found, sort_keys=True).encode()
        runtime = BuiltImage(
            uri=f"local://{python}",
            digest=f"sha256:{hashlib.sha256(identity).hexdigest()}",
            python=found["python"],
            torch=found["torch"],
            cuda=found["cuda"],
            nccl=found["nccl"],
            rdma_libs=found["rdma_libs"],
        )
        return runtime.model_dump(mode="json")
