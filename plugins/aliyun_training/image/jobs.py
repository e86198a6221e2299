"""The check jobs: what the image verification and the RDMA bandwidth test run, as job specs.

Each is the run's own ``TrainingJobSpec`` with another command, node count and timeout, so it runs
on the same backend, resources and image as the training it vouches for. The image stage's
operators submit them; a dry run renders the same specs.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from aliyun_training.backend_catalog import BandwidthTest, backend_record
from aliyun_training.spec import Framework, TrainingJobSpec

#: The programs each bandwidth test runs, which the image's verification must have found.
BANDWIDTH_TEST_TOOLS: dict[BandwidthTest, list[str]] = {
    "nccl_tests": ["mpirun", "all_reduce_perf"],
    "ib_write_bw": ["ib_write_bw"],
}
#: NCCL settings DLC injects into every pod, forwarded by mpirun to the ranks it starts.
NCCL_FORWARDED = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_SOCKET_IFNAME")


def check_command() -> str:
    """The probe, passed inline: it runs in any image with python3, not only in images we built."""
    import base64

    from aliyun_training import runtime_probe

    source = base64.b64encode(Path(runtime_probe.__file__).read_bytes()).decode()
    return 'python3 -c "$(echo ' + source + ' | base64 -d)"'


#: How long each image check may run: its operator's default and the dry run's cost ceiling's.
VERIFY_TIMEOUT_MINUTES = 30
BANDWIDTH_TIMEOUT_MINUTES = 20


def verification_spec(
    spec: TrainingJobSpec, timeout_minutes: int = VERIFY_TIMEOUT_MINUTES
) -> TrainingJobSpec:
    """The image check job: the check script on one GPU node of the run's backend, in its image."""
    return spec.model_copy(
        update={
            "nodes": 1,
            "gpus_per_node": 1,  # NCCL reports its version only with a GPU
            "command": check_command(),
            "datasets": [],
            "timeout_minutes": timeout_minutes,
        }
    )


def bandwidth_spec(
    spec: TrainingJobSpec, *, device: str, gid_index: int, timeout_minutes: int = BANDWIDTH_TIMEOUT_MINUTES
) -> TrainingJobSpec:
    """The two-node bandwidth job: nccl-tests under mpirun on DLC, ib_write_bw between two pods else.

    ``device`` and ``gid_index`` are the RDMA device and GID index ``ib_write_bw`` uses.
    """
    gpus = max(spec.gpus_per_node, 1)
    if backend_record(spec.backend).bandwidth_test == "nccl_tests":
        forwarded = " ".join(f"-x {name}" for name in NCCL_FORWARDED)
        command = (
            f"mpirun --allow-run-as-root -np {2 * gpus} -npernode {gpus} -x NCCL_DEBUG=INFO {forwarded} "
            "all_reduce_perf -b 8M -e 1G -f 2 -g 1"
        )
        framework = Framework.MPI
    else:
        # A PyTorchJob sets RANK on both pods and MASTER_ADDR to the master; the client retries
        # until the server listens, so a slow start is not a failed check.
        test = f"ib_write_bw -d {shlex.quote(device)} -x {gid_index} -F --report_gbits -D 15"
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
            "timeout_minutes": timeout_minutes,
        }
    )
