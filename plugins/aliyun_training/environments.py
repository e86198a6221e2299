"""The environment files: one per cloud backend, written by an administrator, parsed before a run.

``include/config/dlc.json`` and ``include/config/arena.json`` (or the files in the directory
``ALIYUN_TRAINING_ENVIRONMENT_DIR`` names) say where a backend's jobs run: workspace, quota, VPC,
cluster, namespace, volumes, images, staging and image builds. They are admin settings: whoever may
trigger a DAG changes only what the trigger form marks overridable (``aliyun_training.form``).

Each file is parsed into its model here, so a malformed file (not UTF-8, not an object, a key this
version does not know, a value of the wrong type or shape) fails the run's first task, naming the
file, the key path and the fix, before anything is submitted or copied. Empty strings mean "not
configured" and become None. The models check the shape of each value; the rules that depend on
several settings (a staging mode's required ids, outputs that go together) stay with the code that
plans the run (``aliyun_training.plan``).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import string
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from aliyun_training.backend_catalog import backend_record
from aliyun_training.backends.ack.request import (
    DEFAULT_MPI_API_VERSION,
    DEFAULT_RDMA_RESOURCE,
    GpuMetricsUrl,
    MaxGpusPerNode,
    MpiApiVersion,
    Namespace,
    NcclEnv,
    PullSecrets,
    RdmaResource,
    Username,
)
from aliyun_training.backends.dlc.request import Priority
from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID, KUBERNETES_DEFAULT_CONN_ID
from aliyun_training.kubernetes.names import is_dns_label, is_dns_subdomain, json_schema
from aliyun_training.spec import (
    MAX_CPUS_PER_NODE,
    MAX_MEMORY_GIB_PER_NODE,
    CpusPerNode,
    MemoryGibPerNode,
    SharedMemoryGibPerNode,
)
from aliyun_training.validation import (
    HIJACKING_FIX,
    IMAGE_REFERENCE_PATTERN,
    SpecError,
    field_fix,
    hijacking_variables,
    parse_json_settings,
    read_settings_file,
    validate_record,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic.fields import FieldInfo


class EnvironmentFileError(SpecError):
    """An environment file is missing, malformed, incomplete or not for the pipeline: the message
    names the file, the key path and the fix, for the administrator who writes it."""


#: The ``json_schema_extra`` key marking a setting the trigger form may override.
OVERRIDABLE_KEY = "overridable"
#: The placeholders a ``staging.source_uri`` template may use.
SOURCE_URI_FIELDS = frozenset({"dataset", "version"})


def _absolute_path(value: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or any(c in value for c in "\0\n\r"):
        raise ValueError(
            f"{value!r} is not an absolute path without '..' or control characters (fix: e.g. /mnt/data)"
        )
    return value


def _oss_uri(value: str) -> str:
    """An ``oss://bucket/prefix/`` URI; the error is parse_oss_uri's, whose fix says the form."""
    from aliyun_training.oss_location import parse_oss_uri

    try:
        parse_oss_uri(value, field="uri")
    except SpecError as exc:
        # The key path comes from the model; keep what is wrong and the fix.
        raise ValueError(str(exc).removeprefix("uri: ")) from None
    return value


def source_template(value: str) -> str:
    """A ``{dataset}``/``{version}`` template that renders to an OSS folder for every version."""
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(
            f"{value!r} is not a valid template ({exc}) (fix: e.g. oss://bucket/datasets/{{dataset}}/{{version}}/)"
        ) from None
    placeholders = [(name, spec or conversion) for _, name, spec, conversion in parts if name is not None]
    # A format spec or conversion ({version!r}, {version:>8}) would change the folder's name.
    bad = [name for name, decorated in placeholders if decorated or name not in SOURCE_URI_FIELDS]
    if bad:
        raise ValueError(
            f"{value!r} uses placeholders other than {{dataset}} and {{version}}: "
            f"{', '.join(repr('{' + name + '}') for name in bad)} (fix: use only {{dataset}} and {{version}})"
        )
    if "version" not in {name for name, _ in placeholders}:
        raise ValueError(
            f"{value!r} has no {{version}}, so every version would stage the same folder "
            "(fix: e.g. oss://bucket/datasets/{dataset}/{version}/)"
        )
    _oss_uri(value.format(dataset="dataset", version="v1"))
    return value


def _no_hijacking(env: dict[str, str]) -> dict[str, str]:
    hijacking = hijacking_variables(env)
    if hijacking:
        raise ValueError(f"{hijacking} change what every process of a node runs (fix: {HIJACKING_FIX})")
    return env


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"not a CIDR block: {exc} (fix: e.g. 192.168.0.0/16)") from None


def _kubernetes_name(valid: Callable[[str], bool], kind: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not valid(value):
            raise ValueError(
                f"{value!r} is not {kind} (fix: lower-case letters, digits and '-', as Kubernetes names)"
            )
        return value

    return check


def overridable(fix: str) -> dict[str, Any]:
    """``json_schema_extra`` of a setting the trigger form may change for one run (``form.RunOverrides``)."""
    return {**field_fix(fix), OVERRIDABLE_KEY: True}


def overridable_settings(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The settings of ``model`` marked overridable, by name."""
    return {
        name: info
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get(OVERRIDABLE_KEY)
    }


AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
OssUri = Annotated[str, AfterValidator(_oss_uri)]
#: An id or name sent to an API as it is: printable, no whitespace, no path separators.
PlainId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$", max_length=128)]
#: Checked by the validator (whose error says the rule); the schema keywords tell editors the same.
DnsLabel = Annotated[
    str,
    AfterValidator(_kubernetes_name(is_dns_label, "a DNS-1123 label")),
    Field(json_schema_extra=json_schema("label")),
]
DnsSubdomain = Annotated[
    str,
    AfterValidator(_kubernetes_name(is_dns_subdomain, "a DNS-1123 subdomain")),
    Field(json_schema_extra=json_schema("subdomain")),
]
Region = Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z0-9]+)+$")]
#: An image: reaches job requests and pod specs as it is, so one line of a reference's characters.
ImageReference = Annotated[
    str,
    Field(
        pattern=IMAGE_REFERENCE_PATTERN,
        json_schema_extra=field_fix(
            "registry/namespace/repository with a tag or a digest (sha256: and 64 lower-case hex "
            "digits), e.g. registry.example.com/ml/train:1.0"
        ),
    ),
]


class _Settings(BaseModel):
    """A block of an environment file: unknown keys are errors; ``""`` and null mean "use the default"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {
                key: value
                for key, value in data.items()
                if key not in cls.model_fields or value not in ("", None)
            }
        return data


class VpcSettings(_Settings):
    vpc_id: PlainId | None = None
    switch_id: PlainId | None = None
    security_group_id: PlainId | None = None
    #: Every CIDR block of the VPC; DLC requires them with a vSwitch. Empty: read from DescribeVpcs.
    extended_cidrs: Annotated[
        list[Annotated[str, AfterValidator(_cidr)]],
        Field(
            json_schema_extra=field_fix(
                'list the VPC\'s CIDR blocks, e.g. ["192.168.0.0/16"], or leave it empty'
            )
        ),
    ] = Field(default_factory=list)


class DlcDatasetSettings(_Settings):
    """The fixed dataset a DLC job mounts when the run stages nothing."""

    dataset_id: PlainId | None = None
    uri: OssUri | None = None
    mount_path: Annotated[
        AbsolutePath, Field(json_schema_extra=field_fix("use an absolute path such as /mnt/data/cifar10"))
    ] = "/mnt/data"


class StagingSettings(_Settings):
    """Where and how each dataset version is copied onto CPFS (``mode`` empty: not staged)."""

    mode: str | None = None
    source_uri: Annotated[
        Annotated[str, AfterValidator(source_template)] | None,
        Field(json_schema_extra=field_fix("use oss://bucket/datasets/{dataset}/{version}/")),
    ] = None
    target_root: Annotated[
        AbsolutePath | None,
        Field(json_schema_extra=field_fix("use an absolute path such as /mnt/cpfs/datasets")),
    ] = None
    cpfs_path: Annotated[
        AbsolutePath | None,
        Field(json_schema_extra=field_fix("the versions' directory inside the file system")),
    ] = None
    file_system_id: PlainId | None = None


class DlcStagingSettings(StagingSettings):
    #: ``direct`` copies on a worker that mounts CPFS; ``dataflow`` has CPFS import from OSS itself.
    mode: Annotated[
        Literal["direct", "dataflow"] | None,
        Field(
            json_schema_extra=field_fix(
                "use direct or dataflow (a staging pod runs on ACK), or leave it empty"
            )
        ),
    ] = None
    data_flow_id: PlainId | None = None
    #: How the PAI dataset names the CPFS location: ``bmcpfs`` (CPFS for Lingjun) or ``cpfs`` (2.0).
    uri_kind: Annotated[str, Field(json_schema_extra=field_fix("use bmcpfs or cpfs"))] = "bmcpfs"
    #: bmcpfs: the mount target's domain, verbatim as the console shows it.
    mount_target: Annotated[
        str | None,
        Field(
            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            json_schema_extra=field_fix(
                "copy the mount target's domain from the CPFS console, "
                "e.g. cpfs-xxx-vpc-xxx.cn-wulanchabu.cpfs.aliyuncs.com"
            ),
        ),
    ] = None
    #: cpfs (general-purpose CPFS 2.0): the protocol service and its export the job mounts.
    protocol_service_id: PlainId | None = None
    export_id: PlainId | None = None


class AckStagingSettings(StagingSettings):
    #: ``direct`` copies on a worker that mounts CPFS; ``pod`` copies in a pod on the cluster.
    mode: Annotated[
        Literal["direct", "pod"] | None,
        Field(json_schema_extra=field_fix("use direct or pod (data flows stage for DLC), or leave it empty")),
    ] = None
    staging_pvc: DnsSubdomain | None = None
    image: ImageReference | None = None
    credentials_secret: DnsSubdomain | None = None
    region: Region | None = None
    oss_endpoint: str | None = None
    volume_kind: Annotated[str, Field(json_schema_extra=field_fix("use cpfs or bmcpfs"))] = "cpfs"
    server: str | None = None
    vpc_mount_target: str | None = None
    vsc_mount_target: str | None = None


class AcrBuildBlock(_Settings):
    instance_id: PlainId | None = None
    repo_id: PlainId | None = None
    build_rule_id: PlainId | None = None


class KanikoBuildBlock(_Settings):
    registry_secret: DnsSubdomain | None = None
    builder_image: ImageReference | None = None


class ImageBuildSettings(_Settings):
    #: DLC builds with ACR Enterprise's build service (a kaniko pod needs a cluster: ACK only).
    mode: Annotated[
        Literal["acr"] | None,
        Field(json_schema_extra=field_fix("use acr (kaniko builds run on ACK), or leave it empty")),
    ] = None
    repository: str | None = None
    registry_conn_id: str | None = None
    base_image: ImageReference | None = None
    acr: AcrBuildBlock = Field(default_factory=AcrBuildBlock)


class AckImageBuildSettings(ImageBuildSettings):
    mode: Annotated[
        Literal["kaniko", "acr"] | None,
        Field(json_schema_extra=field_fix("use kaniko or acr, or leave it empty")),
    ] = None  # type: ignore[assignment]  # pydantic lets a subclass narrow a field's type; mypy does not
    kaniko: KanikoBuildBlock = Field(default_factory=KanikoBuildBlock)


class RdmaCheckSettings(_Settings):
    line_rate_gbps: Annotated[
        float, Field(gt=0, json_schema_extra=field_fix("one node's RDMA bandwidth in Gb/s, NICs x line rate"))
    ] = 200.0
    pass_ratio: Annotated[float, Field(gt=0, le=1, json_schema_extra=field_fix("a fraction, e.g. 0.9"))] = 0.9


class AckRdmaCheckSettings(RdmaCheckSettings):
    #: The ``ib_write_bw -d`` device, e.g. mlx5_0 (it reaches a shell: only a device name).
    device: Annotated[
        str,
        Field(pattern=r"^[A-Za-z0-9_.-]+$", json_schema_extra=field_fix("an RDMA device name, e.g. mlx5_0")),
    ] = "mlx5_0"
    gid_index: Annotated[int, Field(ge=0, le=255, json_schema_extra=field_fix("a GID index, e.g. 3"))] = 3


class UsePolicy(_Settings):
    """Which pipelines may run with an environment file: the first setting every file has.

    A deployment may host several teams' pipelines, each declared in its own file with its own
    ``pipeline.dag_id`` and ``pipeline.owner``; an environment file points at one team's workspace,
    quota, cluster and buckets. Whoever writes a declaration names the environment file it uses, so
    the file says who may: a pipeline must match ``allowed_pipelines`` (shell-style patterns of
    dag ids, e.g. ``team_a_*``) when it is set, and ``allowed_owners`` when it is set. Both empty:
    every pipeline of the deployment may (one team's deployment). Checked when the declaration
    loads and again when a run is planned.
    """

    allowed_pipelines: Annotated[
        list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.*?\[\]-]+$")]],
        Field(json_schema_extra=field_fix('list dag id patterns, e.g. ["team_a_*"], or leave it empty')),
    ] = Field(default_factory=list)
    allowed_owners: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        Field(json_schema_extra=field_fix('list pipeline.owner values, e.g. ["team-a"], or leave it empty')),
    ] = Field(default_factory=list)

    def refusal(self, dag_id: str, owner: str) -> str | None:
        """Why the pipeline ``dag_id`` of ``owner`` may not use this file, or None when it may."""
        if self.allowed_pipelines and not any(fnmatch.fnmatchcase(dag_id, p) for p in self.allowed_pipelines):
            return f"its allowed_pipelines {self.allowed_pipelines} do not match {dag_id!r}"
        if self.allowed_owners and owner not in self.allowed_owners:
            return f"its allowed_owners {self.allowed_owners} do not include the pipeline's owner {owner!r}"
        return None


class CloudEnvironment(UsePolicy):
    """What both cloud environments name alike: node resources, image, code, outputs, images.

    Every connection is named ``<type>_conn_id`` after its Airflow connection type; an empty one is
    the type's default connection id (``connections``).
    """

    #: The alibaba_cloud connection the PAI APIs, OSS and ACR are reached through.
    alibaba_cloud_conn_id: PlainId = ALIBABA_CLOUD_DEFAULT_CONN_ID
    image: ImageReference | None = None
    #: Repositories the trigger form may pin an image from, besides the build's and ``image``'s.
    allowed_image_repositories: list[str] = Field(default_factory=list)
    cpu_per_node: Annotated[
        CpusPerNode, Field(json_schema_extra=overridable(f"use 1 to {MAX_CPUS_PER_NODE} CPUs per node"))
    ] = 8
    memory_gib_per_node: Annotated[
        MemoryGibPerNode,
        Field(json_schema_extra=overridable(f"use 1 to {MAX_MEMORY_GIB_PER_NODE} GiB per node")),
    ] = 32
    shared_memory_gib_per_node: Annotated[
        SharedMemoryGibPerNode,
        Field(json_schema_extra=overridable(f"use 0 to {MAX_MEMORY_GIB_PER_NODE} GiB per node")),
    ] = 0
    #: A run may turn RDMA off (e.g. to compare against TCP); turning it on where there is none
    #: fails in preflight.
    rdma: Annotated[bool, Field(json_schema_extra=overridable("use true or false"))] = False
    code_dir: Annotated[
        AbsolutePath | None,
        Field(json_schema_extra=field_fix("where the image keeps the training code, e.g. /workspace")),
    ] = None
    output_root: Annotated[
        AbsolutePath | None,
        Field(json_schema_extra=field_fix("use an absolute path, e.g. /mnt/output/cifar10")),
    ] = None
    output_uri: OssUri | None = None
    artifact_root: OssUri | None = None
    image_build: ImageBuildSettings = Field(default_factory=ImageBuildSettings)
    rdma_check: RdmaCheckSettings = Field(default_factory=RdmaCheckSettings)
    #: What one GPU-hour of this backend's resources costs (the administrator's figure for the quota
    #: or instance type), for the dry run's ceiling in money; unset: GPU-hours only.
    price_per_gpu_hour: Annotated[
        float | None,
        Field(gt=0, le=100_000, json_schema_extra=field_fix("give the price of one GPU-hour, e.g. 30.5")),
    ] = None
    #: The currency of ``price_per_gpu_hour``, an ISO 4217 code.
    currency: Annotated[
        str,
        Field(pattern=r"^[A-Z]{3}$", json_schema_extra=field_fix("use an ISO 4217 code, e.g. CNY or USD")),
    ] = "CNY"

    #: What else an output_uri needs on this backend, added to the fix naming a blank one.
    output_uri_also: ClassVar[str] = ""


class DlcEnvironment(CloudEnvironment):
    """``dlc.json``: PAI workspace, quota, VPC, and DLC's own settings."""

    region: Region | None = None
    lingjun_regions: list[Region] = Field(default_factory=lambda: ["cn-wulanchabu"])
    zone_id: PlainId | None = None
    workspace_id: PlainId | None = None
    role_name: PlainId | None = None
    resource_type: Annotated[
        str, Field(pattern=r"^(lingjun|ecs)$", json_schema_extra=field_fix("use lingjun or ecs"))
    ] = "lingjun"
    #: The form may choose another only among ``quota_id`` and ``allowed_quota_ids`` (checked per run).
    quota_id: Annotated[
        PlainId | None,
        Field(
            json_schema_extra=overridable("use quota_id or one of allowed_quota_ids of the environment file")
        ),
    ] = None
    #: Quotas the trigger form may choose instead of ``quota_id``.
    allowed_quota_ids: list[PlainId] = Field(default_factory=list)
    ecs_spec: PlainId | None = None
    gpu_type: PlainId | None = None
    #: DLC job priority within the quota (1-9); the trigger form may change it per run.
    priority: Annotated[Priority, Field(json_schema_extra=overridable("use a priority from 1 to 9"))] = 1
    image_registry_conn_id: str | None = None
    vpc: VpcSettings = Field(default_factory=VpcSettings)
    dataset: DlcDatasetSettings = Field(default_factory=DlcDatasetSettings)
    staging: DlcStagingSettings = Field(default_factory=DlcStagingSettings)
    image_build: ImageBuildSettings = Field(default_factory=ImageBuildSettings)
    rdma_check: RdmaCheckSettings = Field(default_factory=RdmaCheckSettings)


class AckEnvironment(CloudEnvironment):
    """``arena.json``: the Kubernetes connection, namespace, volumes, RDMA and NCCL of ACK jobs.

    ``kubernetes_conn_id`` is the cluster's connection; ``alibaba_cloud_conn_id`` the one OSS and
    ACR are reached through (direct staging, artifacts, ACR builds).
    """

    kubernetes_conn_id: PlainId = KUBERNETES_DEFAULT_CONN_ID
    namespace: Namespace = "default"
    image_pull_secrets: PullSecrets = Field(default_factory=list)
    max_gpus_per_node: MaxGpusPerNode = 8
    rdma_resource: RdmaResource = DEFAULT_RDMA_RESOURCE
    host_network: bool = False
    nccl_env: Annotated[NcclEnv, AfterValidator(_no_hijacking)] = Field(default_factory=dict)
    mpi_api_version: MpiApiVersion = DEFAULT_MPI_API_VERSION
    data_pvc: Annotated[
        DnsSubdomain | None, Field(json_schema_extra=field_fix("the dataset claim's name"))
    ] = None
    mount_path: Annotated[
        AbsolutePath, Field(json_schema_extra=field_fix("use an absolute path such as /mnt/data/cifar10"))
    ] = "/mnt/data"
    output_pvc: Annotated[
        DnsSubdomain | None, Field(json_schema_extra=field_fix("the output claim's name"))
    ] = None
    username: Username = "airflow"
    gpu_metrics_url: GpuMetricsUrl = None
    staging: AckStagingSettings = Field(default_factory=AckStagingSettings)
    image_build: AckImageBuildSettings = Field(default_factory=AckImageBuildSettings)
    rdma_check: AckRdmaCheckSettings = Field(default_factory=AckRdmaCheckSettings)

    output_uri_also: ClassVar[str] = ", and output_pvc to the OSS-backed claim of that location"


class LocalEnvironment(UsePolicy):
    """``local.json`` (optional): how the local backend runs torchrun on the worker."""

    #: The rendezvous port of node 0; empty: a free port is picked per job.
    master_port: Annotated[
        int | None,
        Field(ge=1024, le=65535, json_schema_extra=field_fix("use a free port from 1024 to 65535")),
    ] = None
    #: Seconds a stopped job's processes get to exit after SIGTERM before SIGKILL.
    stop_grace_seconds: Annotated[
        float, Field(gt=0, le=600, json_schema_extra=field_fix("use 1 to 600 seconds"))
    ] = 10.0

    def backend_config(self) -> dict[str, Any]:
        """The local backend's settings (``LocalBackend``'s arguments), without the use policy."""
        return self.model_dump(exclude_none=True, exclude=set(UsePolicy.model_fields))


Environment = LocalEnvironment | CloudEnvironment
_Model = TypeVar("_Model", bound=BaseModel)


def environment_model(backend: str) -> type[Environment]:
    """The model of ``backend``'s environment file, as its catalog record names it."""
    model: type[Environment] = backend_record(backend).part("environment_model")
    return model


def environment_schema(backend: str) -> dict[str, Any]:
    """The JSON Schema of ``backend``'s environment file, for the docs and for editors.

    A file may leave any setting blank (``""``) to take its default, as the models read it, so each
    optional property also accepts ``""``.
    """
    schema = environment_model(backend).model_json_schema()
    schema["title"] = f"{backend}.json"
    for block in [schema, *schema.get("$defs", {}).values()]:
        required = set(block.get("required", []))
        for name, prop in block.get("properties", {}).items():
            if name not in required:
                notes = {
                    key: prop.pop(key) for key in ("title", "description", "default", "fix") if key in prop
                }
                block["properties"][name] = {"anyOf": [prop, {"const": ""}], **notes}
    return schema


def load_environment(path: Path, backend: str) -> Environment:
    """Parse ``backend``'s environment file; SpecError names the file, the key path and the fix."""
    return _read_environment(path, environment_model(backend))


def _read_environment(path: Path, model: type[_Model]) -> _Model:
    title = f"environment file {path}"
    data = parse_json_settings(
        read_settings_file(path, title, EnvironmentFileError), title, EnvironmentFileError
    )
    if not isinstance(data, dict):
        raise EnvironmentFileError(
            f"environment file {path} holds a JSON {type(data).__name__ if data is not None else 'null'}, "
            "not an object of settings (fix: write the settings as one JSON object, as in the README)"
        )
    return validate_record(model, data, title=title, error=EnvironmentFileError)


def check_use(environment: Environment, path: Path, dag_id: str, owner: str) -> None:
    """Refuse a pipeline that ``environment`` (read from ``path``) does not allow, naming why."""
    refusal = environment.refusal(dag_id, owner)
    if refusal:
        raise EnvironmentFileError(
            f"environment file {path} is not for pipeline {dag_id}: {refusal} (fix: name your team's "
            "environment file in the declaration's backends block, or ask the administrator to add the "
            "pipeline to the file's allowed_pipelines or allowed_owners)"
        )


def load_local_environment(path: Path) -> LocalEnvironment:
    """``local.json``, or its defaults where the deployment has none (the file is optional)."""
    # Only a path that is not there at all means "no file": a folder, pipe or device is refused.
    return _read_environment(path, LocalEnvironment) if os.path.lexists(path) else LocalEnvironment()


def blank_required_settings(environment: Environment) -> list[str]:
    """Every setting a cloud run cannot do without that ``environment`` leaves blank, all at once.

    The planner refuses such an environment naming them all (instead of the first a model check
    meets), and the trigger form marks its backend as not configured.
    """
    blank: list[str] = []
    if isinstance(environment, CloudEnvironment) and not (environment.image or environment.image_build.mode):
        blank.append("image (or an image_build block)")
    if isinstance(environment, DlcEnvironment):
        if environment.resource_type == "lingjun" and not environment.quota_id:
            blank.append("quota_id (Lingjun resources are used through a quota)")
        if environment.resource_type == "ecs" and not (environment.quota_id or environment.ecs_spec):
            blank.append("ecs_spec (or quota_id)")
    if isinstance(environment, AckEnvironment) and not (environment.data_pvc or environment.staging.mode):
        blank.append("data_pvc (or a staging block)")
    return blank


def require_settings(environment: Environment, path: Path) -> None:
    """Refuse an environment with blank required settings, naming every one of them."""
    blank = blank_required_settings(environment)
    if blank:
        raise EnvironmentFileError(
            f"environment file {path} leaves required settings blank: {', '.join(blank)} "
            "(fix: fill them in; the README's environment section says what each one is)"
        )
