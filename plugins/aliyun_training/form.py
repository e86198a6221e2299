"""The trigger form as untrusted input: its values typed, and the few settings it may override.

Whoever may trigger a DAG is not an administrator of the deployment: the environment files and the
connections are. So the form's ``backend_overrides`` is an allow-list, not a way into the
environment file. A run may change only what is a field of :class:`RunOverrides`, on the backends
:data:`OVERRIDABLE` lists, within the field's bounds. Both are read from the environment models:
a setting is overridable when its model marks it so (``environments.overridable``), with the
model's own bounds:

- ``priority`` (DLC, 1-9): queue order within the quota, as the PAI console lets any job owner set it;
- ``quota_id`` (DLC): one of the environment's ``quota_id`` and ``allowed_quota_ids``, so a busy
  quota can be swapped for another the administrator offered, never for any quota the role reaches;
- ``rdma`` (DLC, ACK): turn RDMA off for one run (e.g. to compare against TCP, as the bare-metal
  guide does); turning it on for an environment without RDMA fails in preflight, not silently;
- ``cpu_per_node``, ``memory_gib_per_node``, ``shared_memory_gib_per_node`` (DLC, ACK): size one run's
  nodes; the quota or the nodes bound what is granted.

Everything else (connections, namespace, volumes, images and registries, staging and build settings,
NCCL environment, code and output paths) comes only from the environment file: each of those could
move data, credentials or shell text somewhere the administrator did not choose. The form's pinned
``image`` must be a tag or digest of a repository the environment uses (or lists in
``allowed_image_repositories``), because the job hands its image the run's mounts and credentials.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model, model_validator
from pydantic.fields import FieldInfo

from aliyun_training.backend_catalog import BACKENDS, Backend, backend_record
from aliyun_training.environments import environment_model, overridable_settings
from aliyun_training.spec import DATASET_VERSION_PATTERN, Framework, GpusPerNode, Nodes, TimeoutMinutes
from aliyun_training.validation import (
    PINNED_IMAGE_PATTERN,
    SpecError,
    field_fix,
    validate_record,
    whole_string_pattern,
)

if TYPE_CHECKING:
    from aliyun_training.declaration import PipelineDeclaration


class TriggerFormError(SpecError):
    """A trigger form's value is refused: the message names the field and the fix, for whoever
    triggered the run (the form may change only what it offers, within its bounds)."""


#: The largest GPU-hour budget a run may ask for when its pipeline sets none.
MAX_GPU_HOURS = 1_000_000


def _overrides_model() -> type[BaseModel]:
    """The form's ``backend_overrides``: every setting an environment model marks overridable, optional.

    Each keeps its bounds, pattern and fix from the environment model, so the form and the file
    cannot disagree on what a value may be; which backend reads which is :data:`OVERRIDABLE`.
    """
    fields: dict[str, Any] = {}
    for record in BACKENDS:
        for name, info in overridable_settings(environment_model(record.name)).items():
            optional = cast("Any", info.annotation) | None
            fields.setdefault(name, (optional, FieldInfo.merge_field_infos(info, default=None)))
    return create_model(
        "RunOverrides",
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__="What the trigger form may change of a backend's environment for one run.",
        **fields,
    )


RunOverrides = _overrides_model()

#: Which overrides apply on which backend: those its environment model marks (the local model: none).
OVERRIDABLE: dict[Backend, frozenset[str]] = {
    record.name: frozenset(overridable_settings(environment_model(record.name))) for record in BACKENDS
}


class RunForm(BaseModel):
    """The trigger form's values, typed: what ``configure`` works from.

    ``parse_form`` first checks the values against :func:`form_schema`, the JSON Schema the DAG's
    Params check in the UI, so the run refuses exactly what the form refuses; this model then types
    them. A pipeline's own parameters are typed by its declaration
    (``PipelineDeclaration.parse_parameters``). JSON does not tell ``2.0`` from ``2`` and JSON
    Schema's ``integer`` accepts both, so an integral number becomes an int here instead of reaching
    a command line as ``--nodes 2.0``; a fraction is refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = BACKENDS[0].name
    #: None: the declaration's framework; else one of those it offers (checked when planning).
    framework: Framework | None = None
    nodes: Nodes = 1
    gpus_per_node: GpusPerNode = 0
    dataset_version: Annotated[
        str | None,
        Field(
            pattern=DATASET_VERSION_PATTERN,
            json_schema_extra=field_fix(
                "use letters, digits, '.', '_' or '-', starting with a letter or digit"
            ),
        ),
    ] = None
    timeout_minutes: TimeoutMinutes = 60
    #: The GPU-hours the run may use over all its tries; None: the pipeline's ``recovery.max_gpu_hours``.
    max_gpu_hours: Annotated[float | None, Field(gt=0, le=MAX_GPU_HOURS)] = None
    image: Annotated[
        str | None,
        Field(
            pattern=PINNED_IMAGE_PATTERN,
            json_schema_extra=field_fix(
                "give a tag or digest (a digest is sha256: and 64 lower-case hex digits), "
                "e.g. registry.example.com/team/train:v3"
            ),
        ),
    ] = None
    force_rebuild: bool = False
    skip_bandwidth_check: bool = False
    skip_preflight: bool = False
    dry_run: bool = False
    # RunOverrides is built by create_model from the environment models: a value mypy cannot use as a type.
    backend_overrides: RunOverrides = Field(default_factory=RunOverrides)  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _image_settings_only_for_cloud_backends(self) -> RunForm:
        """The local backend runs the worker's own Python and builds no image, so a pinned image or a
        forced rebuild would be silently ignored; their defaults (none, off) are what it runs with."""
        if backend_record(self.backend).cloud:
            return self
        if self.image:
            raise ValueError(
                f"image: the {self.backend.value} backend runs no image, so {self.image!r} would be "
                "ignored (fix: leave image empty, or choose a cloud backend)"
            )
        if self.force_rebuild:
            raise ValueError(
                f"force_rebuild: the {self.backend.value} backend builds no image, so force_rebuild "
                "would be ignored (fix: leave force_rebuild off, or choose a cloud backend)"
            )
        return self

    def overrides(self) -> dict[str, Any]:
        """The overrides this run set, refused when one does not apply to its backend."""
        given = self.backend_overrides.model_dump(exclude_none=True)  # type: ignore[attr-defined]  # as above
        refused = sorted(set(given) - OVERRIDABLE[self.backend])
        if refused:
            allowed = sorted(OVERRIDABLE[self.backend])
            raise TriggerFormError(
                f"backend_overrides: {refused} cannot be overridden on the {self.backend.value} backend "
                f"(fix: leave them out; the form may override {allowed or 'nothing'} there, everything else "
                "is set by an administrator in the environment file)"
            )
        return given


def form_schema(declaration: PipelineDeclaration) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each field of ``declaration``'s trigger form, by field name.

    The one definition of what a run may be given: the DAG's Params (``aliyun_training.params``)
    check it in the UI and the API before a run exists, and ``parse_form`` checks it again when the
    run is planned. The pipeline's resources bound nodes and GPUs, its recovery block the GPU-hours,
    and its own parameters bring their schemas; patterns refuse a trailing newline.
    """
    resources, training = declaration.resources, declaration.training
    schema: dict[str, dict[str, Any]] = {
        "backend": {
            "type": "string",
            "enum": [record.name.value for record in BACKENDS if record.name in declaration.backends],
        },
        "nodes": {**_bounds(Nodes), "maximum": resources.max_nodes},
        "gpus_per_node": {**_bounds(GpusPerNode), "maximum": resources.max_gpus_per_node},
        "dataset_version": {
            "type": ["null", "string"],
            "pattern": whole_string_pattern(DATASET_VERSION_PATTERN),
        },
        **{name: parameter.param_schema() for name, parameter in declaration.parameters.items()},
        "timeout_minutes": _bounds(TimeoutMinutes),
        "max_gpu_hours": {
            "type": ["null", "number"],
            "exclusiveMinimum": 0,
            "maximum": declaration.recovery.max_gpu_hours or MAX_GPU_HOURS,
        },
        "dry_run": {"type": "boolean"},
        "image": {"type": ["null", "string"], "pattern": whole_string_pattern(PINNED_IMAGE_PATTERN)},
        "force_rebuild": {"type": "boolean"},
        "skip_bandwidth_check": {"type": "boolean"},
        "backend_overrides": overrides_schema(),
        "skip_preflight": {"type": "boolean"},
    }
    if len(training.offered_frameworks) > 1:
        schema["framework"] = {"type": "string", "enum": [f.value for f in training.offered_frameworks]}
    return schema


#: JSON Schema's bounds keywords, which a Param keeps under ``allOf`` (:func:`param_schemas`).
_BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


def param_schemas(declaration: PipelineDeclaration) -> dict[str, dict[str, Any]]:
    """:func:`form_schema` as the DAG's Params carry it: each bounded number's bounds under ``allOf``.

    Airflow's trigger form gives a number field its schema's top-level ``minimum`` and ``maximum``
    as the input's limits, and the input clamps a typed value to them when it loses focus: epochs -1
    became 1 and nodes 1000 became 16, silently, and the run started with them. Under ``allOf`` the
    form does not read them and jsonschema applies them all the same, so the value goes to the API as
    it was typed and is refused there (as from the REST API or ``dags test``), naming the param and
    the bound. The ``description`` beside the bounds is the field's fix: the API's message quotes
    the part of the schema that failed, so it shows the fix too, and the form shows it as the
    field's help (``params.run_params``) in place of the input's limits.
    """
    schemas = {}
    for name, schema in form_schema(declaration).items():
        schemas[name] = {key: value for key, value in schema.items() if key not in _BOUNDS}
        bounds = {key: value for key, value in schema.items() if key in _BOUNDS}
        if bounds:
            schemas[name]["allOf"] = [{**bounds, "description": _fix(declaration, name, schema)}]
    return schemas


@functools.cache
def _bounds(annotation: Any) -> dict[str, Any]:
    """The type and bounds of a size or timeout as JSON Schema, from its one definition in ``spec``."""
    schema = TypeAdapter(annotation).json_schema()
    return {key: schema[key] for key in ("type", "minimum", "maximum")}


def parse_form(values: dict[str, Any], declaration: PipelineDeclaration) -> RunForm:
    """The run's form values checked against :func:`form_schema` and typed; SpecError names each bad
    field (an unknown one too: a typo such as ``epoch`` would otherwise be ignored) and its fix."""
    from jsonschema import FormatChecker
    from jsonschema.validators import validator_for

    schema = form_schema(declaration)
    errors = []
    unknown = sorted(set(values) - set(schema))
    if unknown:
        errors.append(
            f"  - {', '.join(unknown)}: not a field of {declaration.dag_id}'s form "
            f"(fix: remove it; the fields are {', '.join(schema)})"
        )
    for name, value in values.items():
        if name not in schema:
            continue
        validator = validator_for(schema[name])(schema[name], format_checker=FormatChecker())
        for error in validator.iter_errors(value):
            where = ".".join([name, *(str(part) for part in error.absolute_path)])
            errors.append(f"  - {where}: {_problem(error)} (fix: {_fix(declaration, name, schema[name])})")
    if errors:
        raise TriggerFormError("Invalid trigger form values:\n" + "\n".join(errors))
    typed = {name: value for name, value in values.items() if name in RunForm.model_fields}
    return validate_record(RunForm, typed, title="Invalid trigger form values", error=TriggerFormError)


def _problem(error: Any) -> str:
    """jsonschema's message, without the regular expression a pattern mismatch would quote."""
    if error.validator == "pattern":
        return f"{error.instance!r} is not of the required form"
    if error.validator == "type" and _is_fraction(error.instance) and "integer" in error.validator_value:
        return f"{error.instance!r} is not a whole number"
    if error.validator == "type":
        return f"{error.instance!r} is not of type {' or '.join(_listed(error.validator_value))}"
    return str(error.message)


def _is_fraction(value: Any) -> bool:
    """A number with a fractional part (JSON Schema's ``integer`` accepts ``2.0``, never ``2.5``)."""
    return isinstance(value, float) and not value.is_integer()


def _listed(kinds: str | list[str]) -> list[str]:
    return [kinds] if isinstance(kinds, str) else kinds


def _fix(declaration: PipelineDeclaration, name: str, schema: dict[str, Any]) -> str:
    """How to correct field ``name``: its declared or documented fix, else what its schema allows."""
    if name in declaration.parameters:
        return declaration.parameters[name].fix
    # A bounded number's fix names the pipeline's own bounds, which the schema has (not the type's).
    bounded = any(key in schema for key in ("minimum", "exclusiveMinimum", "maximum"))
    info = RunForm.model_fields.get(name)
    extra = info.json_schema_extra if info is not None else None
    if (
        isinstance(extra, dict)
        and isinstance(extra.get("fix"), str)
        and not bounded
        and name != "backend_overrides"
    ):
        return str(extra["fix"])
    if "enum" in schema:
        return f"use one of {schema['enum']}"
    if schema.get("type") == "object":
        return (
            f"leave other keys out; the form may override only {', '.join(schema['properties'])}, "
            "everything else is set by an administrator in the environment file"
        )
    kinds = _listed(schema["type"])
    bounds = " ".join(
        f"{word} {int(schema[key]) if float(schema[key]).is_integer() else schema[key]}"
        for key, word in (("minimum", "from"), ("exclusiveMinimum", "above"), ("maximum", "up to"))
        if key in schema
    )
    described = {
        "integer": "a whole number",
        "number": "a number",
        "boolean": "true or false",
        "null": "null",
    }
    return (
        "use " + " or ".join(described.get(kind, kind) for kind in kinds) + (f" {bounds}" if bounds else "")
    )


@functools.cache
def overrides_schema() -> dict[str, Any]:
    """The JSON Schema of ``backend_overrides`` for the DAG's Param: only the allow-listed keys.

    The same for every pipeline, and pydantic's schema generation costs milliseconds: built once
    per process (callers do not mutate it; Airflow copies a Param's schema into every task).
    """
    properties = {
        name: {
            key: whole_string_pattern(value) if key == "pattern" else value
            for key, value in schema.items()
            if key in ("type", "minimum", "maximum", "pattern", "maxLength")
        }
        for name, schema in _plain_properties().items()
    }
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _plain_properties() -> dict[str, dict[str, Any]]:
    """Each field's schema without pydantic's ``anyOf [..., null]`` wrapping of optional fields."""
    properties = RunOverrides.model_json_schema()["properties"]
    return {
        name: next((option for option in schema.get("anyOf", [schema]) if option.get("type") != "null"), {})
        for name, schema in properties.items()
    }
