"""The trigger form of a declared pipeline: one validated Param per field of ``form.RunForm``, plus
the declaration's own parameters.

The Params validate the form in the UI before a run exists; ``form.RunForm`` and the declaration's
``parse_parameters`` are what the run itself trusts. The pipeline's bounds and defaults come from
its declaration, so the form and the run cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from aliyun_training.backends import IMPLEMENTED_BACKENDS
from aliyun_training.declaration import ParameterBlock, PipelineDeclaration
from aliyun_training.form import overrides_schema
from aliyun_training.spec import DATASET_VERSION_PATTERN, Backend, Framework
from aliyun_training.validation import whole_string_pattern

BACKEND_LABELS = {
    "local": "local — torchrun processes on the Airflow worker",
    "dlc": "dlc — PAI-DLC job",
    "arena": "arena — Kubeflow job on ACK, as arena submits it",
}
#: What an image reference pinned on the form may look like: a tag or a digest, never a bare name.
PINNED_IMAGE_PATTERN = r"^[a-z0-9][a-z0-9.:/_-]*[:@][A-Za-z0-9_.:-]+$"
#: The form's section for what only cloud runs read, folded away for a local run.
CLOUD_SECTION = "Cloud backends (DLC, ACK)"
#: The form's section for the switches of unusual runs.
ADVANCED_SECTION = "Advanced"


#: What the local backend runs (torchrun); other frameworks need a cloud backend.
LOCAL_FRAMEWORKS = (Framework.PYTORCH, Framework.ELASTIC)


def run_params(
    declaration: PipelineDeclaration, unconfigured: dict[Backend, str] | None = None
) -> dict[str, Param]:
    """The trigger form: where, how big, which data, the pipeline's own parameters, and a few switches.

    ``unconfigured`` names the backends whose environment file is missing or incomplete, and why:
    the form still offers them (an administrator may be completing the file) but says so.
    """
    unconfigured = unconfigured or {}
    backends = [b for b in IMPLEMENTED_BACKENDS if b in declaration.backends]
    resources = declaration.resources
    params = {
        "backend": Param(
            backends[0].value,
            type="string",
            enum=[b.value for b in backends],
            values_display={b.value: _backend_label(declaration, b, unconfigured.get(b)) for b in backends},
            title="Backend",
            description="Where the training job runs.",
        ),
        "nodes": _integer(
            resources.nodes, 1, resources.max_nodes, "Nodes", "Number of nodes; each runs the command once."
        ),
        "gpus_per_node": _integer(
            resources.gpus_per_node,
            0,
            resources.max_gpus_per_node,
            "GPUs per node",
            "0 trains on CPU with gloo (one process per node); N > 0 starts N per node.",
        ),
        "dataset_version": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(DATASET_VERSION_PATTERN),
            title="Dataset version",
            description=f"Version of {declaration.dataset.name} to train on, e.g. 2026-11-22. Empty: the "
            "newest version in the source.",
        ),
        **{name: _declared(name, parameter) for name, parameter in declaration.parameters.items()},
        "timeout_minutes": _integer(
            resources.timeout_minutes,
            1,
            7 * 24 * 60,
            "Timeout (minutes)",
            "The job is stopped and the task fails when training runs longer than this.",
        ),
        "max_gpu_hours": Param(
            declaration.recovery.max_gpu_hours,
            type=["null", "number"],
            exclusiveMinimum=0,
            maximum=declaration.recovery.max_gpu_hours or 1_000_000,
            title="GPU-hour budget",
            description="The job is stopped and the run fails (class budget) once its tries used this "
            "many GPU-hours together. Empty: no bound"
            + (
                f"; at most the pipeline's {declaration.recovery.max_gpu_hours:g}."
                if declaration.recovery.max_gpu_hours
                else "."
            ),
        ),
        "dry_run": _switch(
            "Dry run",
            "Plan the run, run the read-only preflight checks and show every request it would make "
            "(plan.json, plan.html), then stop: nothing is created, copied, built or submitted.",
        ),
    }
    frameworks = declaration.training.offered_frameworks
    if len(frameworks) > 1:
        params["framework"] = Param(
            frameworks[0].value,
            type="string",
            enum=[f.value for f in frameworks],
            title="Framework",
            description="The distributed framework (cloud backends; the local backend runs torchrun: "
            f"{', '.join(f.value for f in frameworks if f in LOCAL_FRAMEWORKS)}).",
            section=CLOUD_SECTION,
        )
    params |= {
        "image": Param(
            None,
            type=["null", "string"],
            pattern=whole_string_pattern(PINNED_IMAGE_PATTERN),
            title="Pin an image",
            description="Train in this image as it is: no build, no verification (cloud backends). "
            "It must be a tag or digest of a repository the environment file uses.",
            section=CLOUD_SECTION,
        ),
        "force_rebuild": _switch(
            "Force image rebuild",
            "Build the training image even when its content-addressed tag already exists.",
            CLOUD_SECTION,
        ),
        "skip_bandwidth_check": _switch(
            "Skip RDMA bandwidth check",
            "Do not measure RDMA bandwidth between two nodes before a multi-node run.",
            CLOUD_SECTION,
        ),
        "backend_overrides": Param(
            {},
            **overrides_schema(),
            title="Backend overrides",
            description="The few environment settings a run may change: priority and quota_id (DLC; "
            "quota_id among those the environment offers), rdma, cpu_per_node, memory_gib_per_node, "
            'shared_memory_gib_per_node; e.g. {"priority": 5}. Everything else is an administrator\'s '
            "setting in the environment file.",
            section=CLOUD_SECTION,
        ),
        "skip_preflight": _switch(
            "Skip preflight",
            "Run without the preflight checks (logged as a warning); only for emergencies.",
            ADVANCED_SECTION,
        ),
    }
    return params


def _backend_label(declaration: PipelineDeclaration, backend: Backend, problem: str | None) -> str:
    label = BACKEND_LABELS[backend.value]
    if backend is not Backend.LOCAL:
        label += f" (settings in {declaration.backends[backend].environment})"
    return f"{label} — NOT CONFIGURED: {problem}" if problem else label


def _declared(name: str, parameter: ParameterBlock) -> Param:
    return Param(
        parameter.default,
        **parameter.param_schema(),
        title=parameter.title or name.replace("_", " ").capitalize(),
        description=parameter.description or f"The pipeline's {name}.",
    )


def _integer(default: int, minimum: int, maximum: int, title: str, description: str) -> Param:
    return Param(
        default, type="integer", minimum=minimum, maximum=maximum, title=title, description=description
    )


def _switch(title: str, description: str, section: str | None = None) -> Param:
    extra: dict[str, Any] = {"section": section} if section else {}
    return Param(False, type="boolean", title=title, description=description, **extra)


def param_defaults(declaration: PipelineDeclaration) -> dict[str, Any]:
    """The form's default values, as a run that sets nothing gets them."""
    return {name: param.value for name, param in run_params(declaration).items()}
