"""A CPU-only torch in a GPU job, read from what torch itself prints when asked for CUDA or NCCL.

This machine's torch is the CPU build, so the errors are caused here for real: a tensor moved to
the GPU (torch/cuda/__init__.py's "Torch not compiled with CUDA enabled") and an NCCL process group
(distributed_c10d's "Distributed package doesn't have NCCL built in"). The image's torch is the
job's own dependency: ``user_code``, failed at once, with torch's words as the evidence, on every
backend.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.backends.dlc.failures import classify_dlc
from aliyun_training.backends.local import classify_local
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryAction

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SCRIPTS = {
    "a tensor moved to the GPU": "import torch; torch.zeros(1).cuda()",
    "an NCCL process group": (
        "import torch.distributed as dist; "
        f"dist.init_process_group('nccl', init_method='tcp://127.0.0.1:{_free_port()}', rank=0, world_size=1)"
    ),
}
SAID = {
    "a tensor moved to the GPU": "Torch not compiled with CUDA enabled",
    "an NCCL process group": "Distributed package doesn't have NCCL built in",
}


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_a_cpu_only_torch_asked_for_cuda_or_nccl_is_the_scripts_failure_on_every_backend(case: str) -> None:
    ran = subprocess.run([sys.executable, "-c", SCRIPTS[case]], capture_output=True, text=True, timeout=120)
    output = [*ran.stdout.splitlines(), *ran.stderr.splitlines()]
    assert ran.returncode == 1 and any(line.startswith("Traceback") for line in output), output
    failed = JobStatus(state=JobState.FAILED, raw="Failed", failed_node=0, exit_code=1)

    failures = [
        classify_local(failed, output),
        classify_dlc(failed, [], output),
        AckBackend(namespace="training").classify(failed, [], output),
    ]

    assert [failure.failure_class for failure in failures] == [FailureClass.USER_CODE] * 3
    assert DEFAULT_RECOVERY[FailureClass.USER_CODE].action is RecoveryAction.FAIL
    for failure in failures:
        assert any(SAID[case] in line for line in failure.evidence), failure.evidence
