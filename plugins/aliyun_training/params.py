"""The trigger form of a training DAG: one validated Param per field of ``form.RunForm``.

The Params validate the form in the UI before a run exists; ``form.RunForm`` is what the run itself
trusts. Both read the same bounds from here, so the form and the model cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from aliyun_training.backends import IMPLEMENTED_BACKENDS
from aliyun_training.form import overrides_schema
from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.validation import whole_string_pattern

BACKEND_LABELS = {
    "local": "local — torchrun processes on the Airflow worker",
    "dlc": "dlc — PAI-DLC job (settings in the environment file dlc.json)",
    "arena": "arena — Kubeflow job on ACK, as arena submits it (settings in the environment file arena.json)",
}
#: What an image reference pinned on the form may look like: a tag or a digest, never a bare name.
PINNED_IMAGE_PATTERN = r"^[a-z0-9][a-z0-9.:/_-]*[:@][A-Za-z0-9_.:-]+$"


def run_params() -> dict[str, Param]:
    """The trigger form: where, how big, which data, and the few switches a run may flip."""
    return {
        "backend": Param(
            "local",
            type="string",
            enum=[backend.value for backend in IMPLEMENTED_BACKENDS],
            values_display={b.value: BACKEND_LABELS[b.value] for b in IMPLEMENTED_BACKENDS},
            title="Backend",
            description="Where the training job runs.",
        ),
        "nodes": _integer(
            2, 1, 16, "Nodes", "Number of nodes; each runs one torchrun with RANK set to its index."
        ),
        "gpus_per_node": _integer(
            0,
            0,
            8,
            "GPUs per node",
            "0 trains on CPU with gloo (one process per node); N > 0 starts N per node.",
        ),
        "dataset_version": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(DATASET_VERSION_PATTERN),
            title="Dataset version",
            description="Version to train on, e.g. 2026-11-22. Empty: the version named after the run date.",
        ),
        "epochs": _integer(3, 1, 100, "Epochs", "Training epochs."),
        "batch_size": _integer(64, 8, 1024, "Batch size", "Samples per process and step."),
        "timeout_minutes": _integer(
            60,
            1,
            7 * 24 * 60,
            "Timeout (minutes)",
            "The job is stopped and the task fails when training runs longer than this.",
        ),
        "dry_run": _switch(
            "Dry run",
            "Plan the run, run the read-only preflight checks and show every request it would make "
            "(plan.json, plan.html), then stop: nothing is created, copied, built or submitted.",
        ),
        "skip_preflight": _switch(
            "Skip preflight", "Run without the preflight checks (logged as a warning); only for emergencies."
        ),
        "image": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(PINNED_IMAGE_PATTERN),
            title="Pin an image",
            description="Train in this image as it is: no build, no verification (cloud backends). "
            "It must be a tag or digest of a repository the environment file uses.",
        ),
        "force_rebuild": _switch(
            "Force image rebuild",
            "Build the training image even when its content-addressed tag already exists.",
        ),
        "skip_bandwidth_check": _switch(
            "Skip RDMA bandwidth check",
            "Do not measure RDMA bandwidth between two nodes before a multi-node run.",
        ),
        "backend_overrides": Param(
            {},
            **overrides_schema(),
            title="Backend overrides",
            description="The few environment settings a run may change: priority and quota_id (DLC; "
            "quota_id among those the environment offers), rdma, cpu_per_node, memory_gib_per_node, "
            'shared_memory_gib_per_node; e.g. {"priority": 5}. Everything else is an administrator\'s '
            "setting in the environment file.",
        ),
    }


def _integer(default: int, minimum: int, maximum: int, title: str, description: str) -> Param:
    return Param(
        default, type="integer", minimum=minimum, maximum=maximum, title=title, description=description
    )


def _switch(title: str, description: str) -> Param:
    return Param(False, type="boolean", title=title, description=description)


def param_defaults() -> dict[str, Any]:
    """The form's default values, as a run that sets nothing gets them."""
    return {name: param.value for name, param in run_params().items()}
