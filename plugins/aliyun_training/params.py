"""The trigger form of a declared pipeline: one validated Param per field of ``form.form_schema``, the
declaration's own parameters among them.

The Params validate the form in the API before a run exists (with their bounds where Airflow's form
does not clamp a typed value to them: ``form.param_schemas``); ``configure`` checks the same schemas
again (``form.parse_form``) before it types the values. The pipeline's bounds and defaults come from
its declaration, so the form and the run cannot drift apart; this module adds what only a person
reads: titles, descriptions, sections and the backends' labels.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

from airflow.sdk import Param

from aliyun_training.backend_catalog import BACKENDS, Backend, backend_record
from aliyun_training.form import param_schemas

if TYPE_CHECKING:
    from aliyun_training.declaration import PipelineDeclaration

#: The form's section for what only cloud runs read, folded away for a local run.
CLOUD_SECTION = "Cloud backends (DLC, ACK)"
#: The form's section for switches only an emergency calls for; not "Advanced", which Airflow's
#: own section below it (run id, logical date, the raw conf) is called already.
EMERGENCY_SECTION = "Emergency switches"
#: The day a pipeline's version example is formatted for, in its own version format.
_EXAMPLE_DAY = date(2026, 11, 22)


def run_params(
    declaration: PipelineDeclaration, unconfigured: dict[Backend, str] | None = None
) -> dict[str, Param]:
    """The trigger form: where, how big, which data, the pipeline's own parameters, and a few switches.

    Each Param checks its field's schema from ``form.form_schema``, the one ``configure`` checks
    again (its bounds under ``allOf``: ``form.param_schemas``). ``unconfigured`` names the backends
    whose environment file is missing or incomplete, and why: the form still offers them (an
    administrator may be completing the file) but says so.
    """
    unconfigured = unconfigured or {}
    schema = param_schemas(declaration)
    backends = [Backend(value) for value in schema["backend"]["enum"]]
    resources, recovery = declaration.resources, declaration.recovery
    params = {
        "backend": Param(
            backends[0].value,
            **schema["backend"],
            values_display={b.value: _backend_label(declaration, b, unconfigured.get(b)) for b in backends},
            title="Backend",
            description="Where the training job runs.",
        ),
        "nodes": Param(
            resources.nodes,
            **schema["nodes"],
            title="Nodes",
            description="Number of nodes; each runs the command once.",
        ),
        "gpus_per_node": Param(
            resources.gpus_per_node,
            **schema["gpus_per_node"],
            title="GPUs per node",
            description="0 trains on CPU with gloo (one process per node); N > 0 starts N per node.",
        ),
        "dataset_version": Param(
            None,
            **schema["dataset_version"],
            title="Dataset version",
            description=f"Version of {declaration.dataset.name} to train on{_version_example(declaration)}. "
            "Empty: the newest version in the source.",
        ),
        **{
            name: Param(
                parameter.default,
                **schema[name],
                title=parameter.title or name.replace("_", " ").capitalize(),
                description=parameter.description or f"The pipeline's {name}.",
            )
            for name, parameter in declaration.parameters.items()
        },
        "timeout_minutes": Param(
            resources.timeout_minutes,
            **schema["timeout_minutes"],
            title="Timeout (minutes)",
            description="The job is stopped and the task fails when training runs longer than this.",
        ),
        "max_gpu_hours": Param(
            recovery.max_gpu_hours,
            **schema["max_gpu_hours"],
            title="GPU-hour budget",
            description="The job is stopped and the run fails (class budget) once its tries used this "
            "many GPU-hours together. Empty: no bound"
            + (f"; at most the pipeline's {recovery.max_gpu_hours:g}." if recovery.max_gpu_hours else "."),
        ),
        "dry_run": _switch(
            schema,
            "dry_run",
            "Dry run",
            "Plan the run, run the read-only preflight checks and show every request it would make "
            "(plan.json, plan.html), then stop: nothing is created, copied, built or submitted.",
        ),
    }
    frameworks = declaration.training.offered_frameworks
    if "framework" in schema:
        params["framework"] = Param(
            frameworks[0].value,
            **schema["framework"],
            title="Framework",
            description="The distributed framework ("
            + "; ".join(
                f"the {record.name.value} backend runs {record.frameworks_note}: "
                + ", ".join(f.value for f in frameworks if f.value in record.frameworks)
                for record in BACKENDS
                if record.frameworks and record.name in declaration.backends
            )
            + ").",
            section=CLOUD_SECTION,
        )
    params |= {
        "image": Param(
            None,
            **schema["image"],
            title="Pin an image",
            description="Train in this image as it is: no build, no verification (cloud backends). "
            "It must be a tag or digest of a repository the environment file uses.",
            section=CLOUD_SECTION,
        ),
        "force_rebuild": _switch(
            schema,
            "force_rebuild",
            "Force image rebuild",
            "Build the training image even when its content-addressed tag already exists.",
            CLOUD_SECTION,
        ),
        "skip_bandwidth_check": _switch(
            schema,
            "skip_bandwidth_check",
            "Skip RDMA bandwidth check",
            "Do not measure RDMA bandwidth between two nodes before a multi-node run.",
            CLOUD_SECTION,
        ),
        "backend_overrides": Param(
            {},
            **schema["backend_overrides"],
            title="Backend overrides",
            description="The few environment settings a run may change: priority and quota_id (DLC; "
            "quota_id among those the environment offers), rdma, cpu_per_node, memory_gib_per_node, "
            'shared_memory_gib_per_node; e.g. {"priority": 5}. Everything else is an administrator\'s '
            "setting in the environment file.",
            section=CLOUD_SECTION,
        ),
        "skip_preflight": _switch(
            schema,
            "skip_preflight",
            "Skip preflight",
            "Run without the preflight checks (logged as a warning); only for emergencies.",
            EMERGENCY_SECTION,
        ),
    }
    # The form's number inputs no longer show the bounds as their limits (form.param_schemas): the
    # help under each field says them, and the fix.
    for param in params.values():
        for bounds in param.schema.get("allOf", []):
            fix = bounds["description"]
            param.description = f"{param.description} {fix[0].upper()}{fix[1:]}."
    return params


def _version_example(declaration: PipelineDeclaration) -> str:
    """How this pipeline's versions are named: a scheduled run's is its logical date in the
    declared format; a pipeline that trains on the newest version names none."""
    version = declaration.dataset.version
    if version.choose == "newest":
        return " (the name of its folder in the source)"
    return (
        f", e.g. {_EXAMPLE_DAY.strftime(version.format)} (a scheduled run's version is its logical "
        f"date as {version.format})"
    )


def _backend_label(declaration: PipelineDeclaration, backend: Backend, problem: str | None) -> str:
    record = backend_record(backend)
    label = record.label
    if record.cloud:
        label += f" (settings in {declaration.backends[backend].environment})"
    return f"{label} — NOT CONFIGURED: {problem}" if problem else label


def _switch(
    schema: dict[str, dict[str, Any]], name: str, title: str, description: str, section: str | None = None
) -> Param:
    extra: dict[str, Any] = {"section": section} if section else {}
    return Param(False, **schema[name], title=title, description=description, **extra)


def param_defaults(declaration: PipelineDeclaration) -> dict[str, Any]:
    """The form's default values, as a run that sets nothing gets them."""
    return {name: param.value for name, param in run_params(declaration).items()}
