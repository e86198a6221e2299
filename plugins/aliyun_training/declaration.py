"""A training pipeline, declared: one YAML file (or one call) per model, validated before any DAG exists.

A platform team describes its model once — the DAG, the dataset and how a run picks its version,
the training code and command, the framework, resources, backends, image, and what the artifacts
stage keeps — and ``aliyun_training.pipelines`` turns the declaration into the whole run
(preflight, staging, image, training, monitoring, artifacts, dry run). Everything not named takes
the default documented on its field here, so a minimal declaration is about ten lines::

    pipeline:
      dag_id: mnist_retrain
      schedule: "@weekly"
    dataset:
      name: mnist
    training:
      code_dir: mnist
      command: "{torchrun} train.py --epochs {epochs}"
    parameters:
      epochs: {type: integer, default: 2, minimum: 1, maximum: 50}

Declarations are an administrator's files, like the environment files: they name commands and
directories, so a run's trigger form can only fill in the declared ``parameters`` (typed and
bounded, shell-quoted into the command). Relative paths are relative to the declaration's file.

Plain pydantic, YAML and the standard library, so a DAG file parses fifty of these in milliseconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import keyword
import re
import shlex
import string
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import SchemaError

from aliyun_training.backend_catalog import Backend
from aliyun_training.failures import DEFAULT_RECOVERY, FailureClass, RecoveryRule
from aliyun_training.model_registry.base import TRACKING_URI_FIX, check_tracking_uri
from aliyun_training.model_registry.kinds import (
    DEFAULT_MODEL_REGISTRY,
    ModelRegistryKind,
    check_declared_settings,
)
from aliyun_training.notifications import NotifierSpec
from aliyun_training.promotion import PromotionRule
from aliyun_training.spec import (
    DATASET_VERSION_PATTERN,
    INJECTED_ENV_VARS,
    CpusPerNode,
    Framework,
    GpusPerNode,
    MemoryGibPerNode,
    Nodes,
    TimeoutMinutes,
    invalid_env_names,
)
from aliyun_training.validation import (
    HIJACKING_FIX,
    MAX_NESTING,
    SpecError,
    check_pattern,
    duplicate_key,
    field_fix,
    hijacking_variables,
    nesting_error,
    read_settings_file,
    validate_record,
)

#: The suffixes a declarations folder is searched for.
DECLARATION_SUFFIXES = (".yaml", ".yml")
#: Launchers a command template may start with; ``{torchrun}`` spans nodes as the platforms start them.
#: ``--tee=3`` prefixes each line a rank prints with its local rank (``[default3]:``), so a failure
#: is read from the rank that failed first (``failures.torchrun``), on every backend alike.
LAUNCHERS = {
    "torchrun": (
        "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
        "--master_port=$MASTER_PORT --nproc_per_node={procs} --tee=3"
    ),
}
#: Placeholders every command template may use besides the pipeline's parameters.
COMMAND_PLACEHOLDERS = frozenset({"procs", "nodes", "processes", "torchrun"})
#: The trigger form's own fields, which a pipeline's parameters may not shadow.
RESERVED_PARAMETERS = frozenset(
    {
        "backend",
        "framework",
        "nodes",
        "gpus_per_node",
        "dataset_version",
        "timeout_minutes",
        "max_gpu_hours",
        "dry_run",
        "skip_preflight",
        "image",
        "force_rebuild",
        "skip_bandwidth_check",
        "backend_overrides",
    }
)
_IDENTIFIER = r"^[a-z][a-z0-9_]*$"
#: Days a ``version.format`` is tried on: single-digit and two-digit days and months, two years.
VERSION_FORMAT_PROBES = (date(2026, 1, 5), date(2026, 12, 31), date(2027, 7, 14))


class DeclarationError(SpecError):
    """A declaration is malformed; the message names its file, the key path and the fix."""


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NewVersionBlock(_Block):
    """Retrain when data lands: a watcher lists the dataset's source every ``poll_seconds``.

    A version counts once its completion marker (``dataset.version.marker``) is there; each new one
    starts exactly one run, which trains on it.
    """

    poll_seconds: Annotated[
        int, Field(ge=5, le=86400, json_schema_extra=field_fix("poll every 5 s to 1 day, e.g. 300"))
    ] = 300


#: The presets Airflow's cron timetables expand (``airflow.utils.dates.cron_presets``); copied so
#: the declaration imports nothing of Airflow.
CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


class PipelineBlock(_Block):
    """The DAG: its id, schedule and the settings a shared deployment relies on."""

    dag_id: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$",
            json_schema_extra=field_fix("use letters, digits, '_', '.' or '-', e.g. resnet_retrain"),
        ),
    ]
    description: str | None = None
    #: A cron expression or preset such as ``@weekly``; None: runs only when triggered.
    schedule: Annotated[
        str | None,
        Field(
            json_schema_extra=field_fix(
                "five cron fields (minute hour day-of-month month day-of-week), e.g. '0 3 * * 1', "
                "or a preset: @hourly, @daily, @weekly, @monthly, @quarterly, @yearly, @once, @continuous"
            )
        ),
    ] = None
    start_date: date = date(2026, 1, 1)
    owner: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("name the team that owns the model"))
    ] = "ml-platform"
    tags: list[str] = Field(default_factory=list)
    #: Off by default: turning a pipeline on trains the latest period only; backfills retrain the past.
    catchup: bool = False
    max_active_runs: Annotated[int, Field(ge=1, le=16)] = 1
    dagrun_timeout_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 12
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    #: Start a run when a new complete version of the dataset lands (besides ``schedule``, if any).
    on_new_version: NewVersionBlock | None = None

    @field_validator("schedule")
    @classmethod
    def _is_a_schedule(cls, schedule: str | None) -> str | None:
        """A cron expression Airflow's timetable accepts, and one that ever fires.

        Airflow reads the cron only when it serializes the DAG, and its error then names neither
        the declaration nor a fix; croniter is the parser Airflow's cron timetables use.
        """
        if schedule is None or schedule in ("@once", "@continuous"):
            return schedule
        # Airflow's own cron parser, which ships neither inline types nor stubs.
        from croniter import CroniterError, croniter  # type: ignore[import-untyped]

        expression = CRON_PRESETS.get(schedule, schedule)
        if len(expression.split()) != 5 and not expression.startswith("@"):
            raise ValueError(f"{schedule!r} has {len(expression.split())} fields, not five")
        try:
            croniter(expression, datetime(2026, 1, 1, tzinfo=UTC)).get_next(datetime)
        except (CroniterError, ValueError) as exc:
            raise ValueError(f"{schedule!r} is not a cron schedule ({exc})") from None
        return schedule


class VersionBlock(_Block):
    """How a run picks its dataset version when the trigger form names none.

    ``logical_date``: a scheduled or backfilled run trains on the version named after its logical
    date (``format``), waiting up to ``wait_minutes`` for it to land; ``newest``: the newest version
    in the source (by name, numbers compared as numbers). A manual run with an empty version always
    takes the newest, and a version the form names must exist.
    """

    choose: Annotated[
        Literal["logical_date", "newest"],
        Field(alias="from", json_schema_extra=field_fix("use logical_date (scheduled runs) or newest")),
    ] = "logical_date"
    format: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("a strftime format, e.g. %Y-%m-%d"))
    ] = "%Y-%m-%d"
    #: How long a scheduled run waits for its version before it is skipped; 0: do not wait.
    wait_minutes: Annotated[int, Field(ge=0, le=7 * 24 * 60)] = 6 * 60
    #: The object an upload writes last into a version's folder, which says the version is complete
    #: (``_SUCCESS``, as Hadoop and Spark jobs write it); null: a version has landed once two checks
    #: a poll apart list the same objects.
    marker: Annotated[
        str | None,
        Field(
            pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}$",
            json_schema_extra=field_fix("name an object of the version's folder, e.g. _SUCCESS, or null"),
        ),
    ] = "_SUCCESS"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("marker")
    @classmethod
    def _names_an_object(cls, value: str | None) -> str | None:
        if value in (".", ".."):
            raise ValueError(f"{value!r} names a folder, not an object (fix: e.g. _SUCCESS, or null)")
        return value

    @field_validator("format")
    @classmethod
    def _names_a_version(cls, value: str) -> str:
        """A logical date formatted with it must be a version name, and not the same every period."""
        try:
            names = [day.strftime(value) for day in VERSION_FORMAT_PROBES]
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a strftime format ({exc}) (fix: e.g. %Y-%m-%d)") from None
        bad = sorted({name for name in names if not re.fullmatch(DATASET_VERSION_PATTERN, name)})
        if bad:
            raise ValueError(
                f"{value!r} makes version names such as {bad[0]!r}, which are not valid versions (fix: "
                "letters, digits, '.', '_' or '-', starting with a letter or digit, no '/', e.g. %Y-%m-%d)"
            )
        if len(set(names)) == 1:
            raise ValueError(
                f"{value!r} names every period's version {names[0]!r} "
                "(fix: use date directives, e.g. %Y-%m-%d)"
            )
        return value


class PrepareBlock(_Block):
    """A CPU job that turns a raw version into training shards before staging.

    It runs ``command`` (in ``training.code_dir``) once per raw version with ``RAW_DIR`` the raw
    version and ``OUTPUT_DIR`` where the shards go; the derived version is named
    ``<version>-<suffix>`` in ``<dataset>-<suffix>``, and a rerun of the same raw version with the
    same command and code reuses it.
    """

    command: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("the command that writes shards to $OUTPUT_DIR"))
    ]
    suffix: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,30}$")] = "shards"
    cpu: CpusPerNode = 4
    memory_gib: MemoryGibPerNode = 16
    timeout_minutes: TimeoutMinutes = 120


class DatasetBlock(_Block):
    """The dataset: its name, where its versions are and how a run picks one."""

    name: Annotated[
        str,
        Field(
            pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$",
            json_schema_extra=field_fix("lower-case letters, digits, '_' or '-', e.g. imagenet"),
        ),
    ]
    #: The OSS location of each version for cloud runs that stage (``{dataset}``, ``{version}``);
    #: None: the environment's ``staging.source_uri``. Local runs read the local object store.
    source_uri: str | None = None
    version: VersionBlock = Field(default_factory=VersionBlock)
    prepare: PrepareBlock | None = None

    @field_validator("source_uri")
    @classmethod
    def _is_a_version_template(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from aliyun_training.environments import source_template

        return source_template(value)


class ResourcesBlock(_Block):
    """The trigger form's defaults and bounds for the job's size."""

    nodes: Nodes = 1
    max_nodes: Nodes = 16
    gpus_per_node: GpusPerNode = 0
    max_gpus_per_node: GpusPerNode = 8
    timeout_minutes: TimeoutMinutes = 60

    @model_validator(mode="after")
    def _defaults_within_bounds(self) -> ResourcesBlock:
        if self.nodes > self.max_nodes:
            raise ValueError(
                f"nodes: {self.nodes} is above max_nodes {self.max_nodes} "
                "(fix: lower nodes or raise max_nodes)"
            )
        if self.gpus_per_node > self.max_gpus_per_node:
            raise ValueError(
                f"gpus_per_node: {self.gpus_per_node} is above max_gpus_per_node {self.max_gpus_per_node} "
                "(fix: lower gpus_per_node or raise max_gpus_per_node)"
            )
        return self


class TrainingBlock(_Block):
    """The training code and the command every node runs.

    ``command`` is a template: ``{torchrun}`` (torchrun across the job's nodes), ``{procs}``
    (processes per node: one per GPU, or one on a CPU node), ``{nodes}``, ``{processes}`` (nodes x
    procs, e.g. for ``mpirun -np``) and each parameter's name.
    ``commands`` gives another framework its own template (an ``mpi`` job runs ``mpirun`` on its
    launcher). The command runs in ``code_dir`` (locally) or the environment's ``code_dir`` (in the
    image, where the build copies ``code_dir``).
    """

    code_dir: Annotated[str, Field(min_length=1, json_schema_extra=field_fix("the training code's folder"))]
    command: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix('e.g. "{torchrun} train.py --epochs {epochs}"'))
    ]
    commands: dict[Framework, str] = Field(default_factory=dict)
    framework: Framework = Framework.PYTORCH
    #: Frameworks the form offers on cloud backends (the local backend runs torchrun only).
    frameworks: list[Framework] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_is_portable(cls, env: dict[str, str]) -> dict[str, str]:
        bad = invalid_env_names(env)
        if bad:
            raise ValueError(
                f"invalid variable names {bad} (fix: letters, digits and '_', not first a digit)"
            )
        clash = sorted(INJECTED_ENV_VARS.intersection(env))
        if clash:
            raise ValueError(f"{clash} are set by the platform on every node (fix: remove them from env)")
        hijacking = hijacking_variables(env)
        if hijacking:
            raise ValueError(f"{hijacking} change what every process of a node runs (fix: {HIJACKING_FIX})")
        return env

    @model_validator(mode="after")
    def _frameworks_have_commands(self) -> TrainingBlock:
        offered = self.offered_frameworks
        if self.framework not in offered:
            raise ValueError(
                f"framework: {self.framework.value} is not among frameworks {offered} "
                "(fix: add it to frameworks)"
            )
        return self

    @property
    def offered_frameworks(self) -> list[Framework]:
        """The default framework first, then the others the form may choose."""
        return [self.framework, *(f for f in self.frameworks if f is not self.framework)]

    def command_for(self, framework: Framework) -> str:
        """The template of ``framework``'s command: its own, else the default one."""
        return self.commands.get(framework, self.command)


class BackendBlock(_Block):
    """A backend this pipeline may use, and its environment file (in the environment directory)."""

    environment: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.json$",
            json_schema_extra=field_fix("a file name in the environment directory, e.g. dlc.json"),
        ),
    ]


def _default_backends() -> dict[Backend, BackendBlock]:
    return {backend: BackendBlock(environment=f"{backend.value}.json") for backend in Backend}


class EvaluationBlock(_Block):
    """A job that scores the candidate and the champion in one run, on the same data.

    ``command`` runs in ``training.code_dir`` on the run's backend (locally a process; on DLC or ACK
    one node in the verified training image) with ``CANDIDATE_DIR`` (this run's job outputs),
    ``CHAMPION_DIR`` (the champion's, or empty when there is none), ``EVAL_DATA_DIR`` (the dataset
    version) and ``OUTPUT_DIR``, and writes ``$OUTPUT_DIR/evaluation.json``:
    ``{"candidate": {metric: value}, "champion": {metric: value} | null}``. The promotion rule's
    metric and guards then name these metrics.
    """

    command: Annotated[
        str,
        Field(
            min_length=1, json_schema_extra=field_fix("the command that writes $OUTPUT_DIR/evaluation.json")
        ),
    ]
    #: The version both models are scored on: a fixed one, the same for every run (its source, read
    #: as it is), or None: the version the run trained on (staged for the run).
    dataset_version: Annotated[
        str | None,
        Field(
            pattern=DATASET_VERSION_PATTERN, json_schema_extra=field_fix("name a version, e.g. 2026-01-04")
        ),
    ] = None
    cpu: CpusPerNode = 4
    memory_gib: MemoryGibPerNode = 16
    gpus: GpusPerNode = 0
    timeout_minutes: TimeoutMinutes = 60


class RegistryBlock(_Block):
    """The model registry every candidate is registered in and whose champion alias a promotion moves.

    ``mlflow`` (the default): MLflow's model registry at ``tracking_uri``, or, when it is None, an
    embedded one in SQLite under the local root, which needs nothing running. ``pai``: PAI's model
    registry (AIWorkspace models and versions) in the backend environment's workspace, through its
    alibaba_cloud connection.
    """

    kind: ModelRegistryKind = DEFAULT_MODEL_REGISTRY
    tracking_uri: Annotated[
        str | None,
        AfterValidator(check_tracking_uri),
        Field(json_schema_extra=field_fix(TRACKING_URI_FIX)),
    ] = None

    @model_validator(mode="after")
    def _settings_of_its_kind(self) -> RegistryBlock:
        check_declared_settings(self.kind, {"tracking_uri": self.tracking_uri})
        return self


class ImageBlock(_Block):
    """The image build context (a Dockerfile) for cloud runs; the training code is copied into it."""

    context_dir: str | None = None


class ArtifactsBlock(_Block):
    """What the artifacts stage keeps of the job's output and what the report plots."""

    #: The model the artifact sets are published under, and the Asset's name; default: the dataset's.
    model: Annotated[str | None, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")] = None
    #: Files and folders of the job's output directory to publish (``metrics.json`` always is).
    collect: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-][A-Za-z0-9_./-]*$")]] = Field(
        default_factory=lambda: ["checkpoints", "model.pt"]
    )
    #: Per-epoch series of ``metrics.json`` the report charts and tabulates.
    report_metrics: list[Annotated[str, Field(pattern=_IDENTIFIER)]] = Field(
        default_factory=lambda: ["train_loss", "test_loss", "test_accuracy"], min_length=1
    )

    @field_validator("collect")
    @classmethod
    def _stays_in_the_output(cls, paths: list[str]) -> list[str]:
        bad = [path for path in paths if ".." in PurePosixPath(path).parts]
        if bad:
            raise ValueError(f"{bad} leave the job's output directory (fix: name paths inside it)")
        whole = [path for path in paths if str(PurePosixPath(path)) == "."]
        if whole:
            raise ValueError(
                f"{whole} name the whole output directory, which holds the set's own files "
                "(fix: name the files and folders to keep inside it, e.g. checkpoints, model.pt)"
            )
        return paths


class ParameterBlock(_Block):
    """One field of the pipeline's own trigger form, validated in the UI and again by the run."""

    type: Literal["integer", "number", "string", "boolean"]
    default: int | float | str | bool
    title: str | None = None
    description: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    enum: list[int | float | str] | None = None
    pattern: str | None = None

    @field_validator("pattern")
    @classmethod
    def _pattern_is_safe(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            check_pattern(pattern)
        return pattern

    @model_validator(mode="after")
    def _default_is_valid(self) -> ParameterBlock:
        try:
            model = value_model(self)
        except SchemaError as exc:
            # pydantic's regex engine has no look-around or back references.
            reason = str(exc).splitlines()[-1].strip()
            raise ValueError(
                f"pattern: {self.pattern!r} cannot be checked by pydantic ({reason}) "
                "(fix: write it without look-around assertions or back references)"
            ) from None
        model.model_validate({"value": self.default})
        return self

    @property
    def fix(self) -> str:
        """What a valid value is, for an error message."""
        if self.enum is not None:
            return f"use one of {self.enum}"
        bounds = [
            f"at least {self.minimum:g}" if self.minimum is not None else "",
            f"at most {self.maximum:g}" if self.maximum is not None else "",
        ]
        bounded = " and ".join(b for b in bounds if b)
        kind = "whole number" if self.type == "integer" else self.type
        return f"use a {kind}" + (f", {bounded}" if bounded else "")

    def param_schema(self) -> dict[str, Any]:
        """The Param's JSON Schema keywords."""
        keys = ("type", "minimum", "maximum", "enum", "pattern")
        schema = {key: getattr(self, key) for key in keys if getattr(self, key) is not None}
        if self.type == "integer":
            # A whole number's bounds read as whole numbers in a refusal: "the minimum of 1", not 1.0.
            for key in ("minimum", "maximum"):
                if key in schema and float(schema[key]).is_integer():
                    schema[key] = int(schema[key])
        if self.pattern:
            from aliyun_training.validation import whole_string_pattern

            schema["pattern"] = whole_string_pattern(self.pattern)
        return schema


class RecoveryBlock(_Block):
    """How the train task recovers from each class of failure, and what a run may spend.

    ``classes`` overrides the default recovery table class by class (``failures.DEFAULT_RECOVERY``:
    config, data, user_code and budget fail at once; capacity resumes after 15 minutes; preemption
    and infrastructure resume at once; transient resumes after 1 minute, twice as long each try),
    e.g. ``{user_code: {action: retry}}`` for a flaky script.
    """

    #: The GPU-hours one run may use over all its tries; None: no bound. The form may ask for less.
    max_gpu_hours: Annotated[
        float | None,
        Field(gt=0, le=1_000_000, json_schema_extra=field_fix("give a positive number of hours")),
    ] = None
    classes: dict[FailureClass, RecoveryRule] = Field(default_factory=dict)
    #: How many times the train task may retry a failure whose rule retries (or resumes).
    retries: Annotated[int, Field(ge=0, le=20)] = 2

    @property
    def table(self) -> dict[FailureClass, RecoveryRule]:
        return {**DEFAULT_RECOVERY, **self.classes}


class DeadlineBlock(_Block):
    """How long the training job should run, which its deadline and the ETA's alert are held to.

    Without ``expected_minutes`` the median running time of the job in the pipeline's last five
    successful runs stands in (from three such runs on; before that the job has no deadline).
    """

    expected_minutes: Annotated[
        float | None,
        Field(
            gt=0, le=30 * 24 * 60, json_schema_extra=field_fix("give the job's usual running time in minutes")
        ),
    ] = None
    #: The deadline is the job's start plus ``expected_minutes`` times this.
    tolerance: Annotated[
        float, Field(ge=1, le=10, json_schema_extra=field_fix("give a factor from 1 to 10, e.g. 1.5"))
    ] = 1.5
    #: How long a whole run may take from being queued (an Airflow Deadline Alert tells the
    #: notifiers once it passed); None: no run deadline.
    run_minutes: Annotated[
        float | None,
        Field(gt=0, le=30 * 24 * 60, json_schema_extra=field_fix("give the run's longest time in minutes")),
    ] = None


class PipelineDeclaration(_Block):
    """One model's training pipeline; ``source`` is the file it was read from, if any."""

    pipeline: PipelineBlock
    dataset: DatasetBlock
    training: TrainingBlock
    resources: ResourcesBlock = Field(default_factory=ResourcesBlock)
    backends: dict[Backend, BackendBlock] = Field(default_factory=_default_backends, min_length=1)
    image: ImageBlock = Field(default_factory=ImageBlock)
    artifacts: ArtifactsBlock = Field(default_factory=ArtifactsBlock)
    recovery: RecoveryBlock = Field(default_factory=RecoveryBlock)
    deadline: DeadlineBlock = Field(default_factory=DeadlineBlock)
    #: Who is told of the run's failure, success, promotion, approval and deadline (docs/notifications.md).
    notifications: list[NotifierSpec] = Field(default_factory=list)
    #: When a run's model becomes the champion (``promotion.PromotionRule``); None: never, every
    #: published model is a candidate only.
    promotion: PromotionRule | None = None
    #: The job that scores candidate and champion on the same data; None: the gate compares the
    #: training's own final metrics, each measured on its run's dataset version.
    evaluation: EvaluationBlock | None = None
    registry: RegistryBlock = Field(default_factory=RegistryBlock)
    parameters: dict[str, ParameterBlock] = Field(default_factory=dict)
    #: The folder relative paths are resolved against (the declaration file's); set by the loader.
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    #: The file the declaration was read from, for messages and the DAG's documentation.
    source: str | None = Field(default=None, exclude=True)

    @field_validator("parameters")
    @classmethod
    def _names_are_free(cls, parameters: dict[str, ParameterBlock]) -> dict[str, ParameterBlock]:
        bad = [name for name in parameters if not re.fullmatch(_IDENTIFIER, name) or keyword.iskeyword(name)]
        if bad:
            raise ValueError(f"{bad} are not lower-case identifiers (fix: name parameters like batch_size)")
        taken = sorted(RESERVED_PARAMETERS & set(parameters))
        if taken:
            raise ValueError(f"{taken} are fields of every pipeline's form (fix: choose other names)")
        return parameters

    @model_validator(mode="after")
    def _commands_use_known_placeholders(self) -> PipelineDeclaration:
        known = COMMAND_PLACEHOLDERS | set(self.parameters)
        templates = {"training.command": self.training.command}
        templates |= {f"training.commands.{f.value}": c for f, c in self.training.commands.items()}
        for where, template in templates.items():
            try:
                unknown = sorted(placeholders(template) - known)
            except ValueError as exc:
                raise ValueError(
                    f"{where}: not a command template ({exc}) (fix: write a literal brace as {{{{ or }}}})"
                ) from None
            if unknown:
                raise ValueError(
                    f"{where}: unknown placeholders {unknown} (fix: use {sorted(known)}; declare a "
                    "parameter for each value the form sets, and write a literal brace as {{ or }})"
                )
            unsafe = unsafe_placeholders(template)
            if unsafe:
                raise ValueError(f"{where}: {'; '.join(unsafe)}")
        prepare = self.dataset.prepare
        if prepare and placeholders(prepare.command):
            raise ValueError(
                f"dataset.prepare.command: placeholders {sorted(placeholders(prepare.command))} would make "
                "the shards depend on a run's form (fix: the command must be the same for every run of a "
                "raw version: read $RAW_DIR, write $OUTPUT_DIR, and write a literal brace as {{ or }})"
            )
        if self.evaluation and placeholders(self.evaluation.command):
            raise ValueError(
                f"evaluation.command: placeholders {sorted(placeholders(self.evaluation.command))} (fix: the "
                "command is the same for every run: read $CANDIDATE_DIR, $CHAMPION_DIR and $EVAL_DATA_DIR, "
                "write $OUTPUT_DIR/evaluation.json, and write a literal brace as {{ or }})"
            )
        return self

    @model_validator(mode="after")
    def _gate_names_measured_metrics(self) -> PipelineDeclaration:
        """Without an evaluation job the gate can only read the training's final metrics."""
        rule = self.promotion
        if rule is None or self.evaluation is not None:
            return self
        tie_break = [rule.at_bound.metric] if rule.at_bound is not None else []
        unmeasured = [
            name for name in (rule.metric, *rule.guards, *tie_break) if not name.startswith("final_")
        ]
        if unmeasured:
            raise ValueError(
                f"promotion: {unmeasured} are not final metrics of metrics.json, and no evaluation job "
                "measures them (fix: name final_<series>, e.g. final_test_accuracy, or declare evaluation)"
            )
        return self

    @property
    def dag_id(self) -> str:
        return self.pipeline.dag_id

    @property
    def model_name(self) -> str:
        """The model artifact sets are published under, and the Asset's name."""
        return self.artifacts.model or self.dataset.name

    @property
    def code_dir(self) -> Path:
        return (self.base_dir / self.training.code_dir).resolve()

    @property
    def context_dir(self) -> Path | None:
        return (self.base_dir / self.image.context_dir).resolve() if self.image.context_dir else None

    def parse_parameters(self, values: dict[str, Any]) -> dict[str, Any]:
        """The form's values of this pipeline's parameters, typed; SpecError names each bad one.

        JSON does not tell ``2.0`` from ``2``, so an integral number is an integer parameter's value;
        a fraction is refused, as is anything outside the declared bounds.
        """
        typed, errors = {}, []
        for name, parameter in self.parameters.items():
            value = values.get(name, parameter.default)
            if parameter.type == "integer" and isinstance(value, float) and value.is_integer():
                value = int(value)
            try:
                typed[name] = value_model(parameter).model_validate({"value": value}).value  # type: ignore[attr-defined]
            except ValidationError as exc:
                message = exc.errors()[0]["msg"].removeprefix("Value error, ")
                errors.append(f"  - {name}: {message} (fix: {parameter.fix})")
        if errors:
            raise SpecError("Invalid trigger form values:\n" + "\n".join(errors))
        return typed

    def render_command(self, framework: Framework, procs: int, nodes: int, values: dict[str, Any]) -> str:
        """The framework's command with every placeholder filled; form values are shell-quoted."""
        launcher = LAUNCHERS["torchrun"].format(procs=procs)
        quoted = {name: shlex.quote(_text(value)) for name, value in values.items()}
        return self.training.command_for(framework).format(
            torchrun=launcher, procs=procs, nodes=nodes, processes=procs * nodes, **quoted
        )

    def code_digest(self, command: str) -> str:
        """Twelve hex digits of ``command`` and every file of the code directory: what a derived
        dataset version is named by and a registered model's lineage records."""
        digest = hashlib.sha256(command.encode())
        root = self.code_dir
        if not root.is_dir():
            raise SpecError(
                f"training.code_dir: {root} is not a folder (fix: point it at the training code, relative "
                "to the declaration file)"
            )
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:12]

    def render_evaluation(self) -> str:
        """The evaluation job's command, the same for every run (it has no placeholders)."""
        assert self.evaluation is not None, "only a declaration with an evaluation has one"
        return self.evaluation.command.format()

    def render_prepare(self) -> str:
        """The prepare stage's command, the same for every run (it has no placeholders)."""
        assert self.dataset.prepare is not None, "only a declaration with a prepare stage has one"
        return self.dataset.prepare.command.format()


def value_model(parameter: ParameterBlock) -> type[BaseModel]:
    """A one-field model that types and bounds a value as the parameter's JSON Schema does.

    Building a pydantic model costs about a millisecond and every DAG parse validates each
    parameter's default, so one model is kept per distinct parameter definition.
    """
    return _value_model(parameter.model_dump_json())


@functools.cache
def _value_model(definition: str) -> type[BaseModel]:
    parameter = ParameterBlock.model_construct(**json.loads(definition))
    kinds: dict[str, Any] = {"integer": int, "number": float, "string": str, "boolean": bool}
    constraints: dict[str, Any] = {"ge": parameter.minimum, "le": parameter.maximum}
    if parameter.pattern:
        constraints["pattern"] = parameter.pattern
    kind: Any = kinds[parameter.type] if parameter.enum is None else Literal[tuple(parameter.enum)]
    field: Any = (Annotated[kind, Field(**{k: v for k, v in constraints.items() if v is not None})], ...)
    return create_model("Parameter", __config__=ConfigDict(strict=parameter.type == "boolean"), value=field)


def placeholders(template: str) -> set[str]:
    """The ``{name}`` fields of a ``str.format`` template; a malformed template raises ValueError."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def unsafe_placeholders(template: str) -> list[str]:
    """Why placeholders of a shell command template would let a value escape its quoting, if they would.

    ``render_command`` puts each value in single quotes (``shlex.quote``), which keeps any text one
    word only where the shell reads it unquoted. Inside double quotes or backticks the quotes are
    literal and ``$(...)`` runs; after a backslash the opening quote is escaped; after ``$`` bash
    reads ``$'...'`` escapes; in a here-document the body is expanded whatever it holds. A format
    spec or conversion (``{x!r}``, ``{x:>9}``) rewrites the quoted text. And where the shell reads a
    word as code (:func:`_code_context`), a quoted value is code all the same. Each is refused,
    naming the placeholder.
    """
    problems = []
    quote: str | None = None
    escaped = False
    previous = ""
    # The template as the shell parses it: quoted text masked, each placeholder one MARK.
    masked = ""
    marks: list[tuple[str, int]] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        for char in literal:
            if escaped:
                escaped = False
            elif quote == "'":
                quote = None if char == "'" else quote
            elif char == "\\":
                escaped = True
            elif quote is not None:
                quote = None if char == quote else quote
            elif char in "'\"`":
                quote = char
            masked += "q" if quote and char != quote else char
            previous = char
        if name is None:
            continue
        where = {"'": "inside single quotes", '"': "inside double quotes", "`": "inside backticks"}.get(
            quote or "", ""
        )
        if escaped:
            where = "right after a backslash"
        elif not where and previous == "$":
            where = "right after $"
        elif not where and re.search(r"(?<!<)<<(?!<)", template[: template.find("{" + name)]):
            where = "in a here-document"
        if spec or conversion:
            problems.append(
                f"{{{name}}} carries a format spec or conversion, which would rewrite its quoting (fix: "
                f"write {{{name}}} alone and let the script format the value)"
            )
        elif where:
            problems.append(
                f"{{{name}}} is {where}, where its shell quoting does not protect it (fix: write the "
                'placeholder bare, e.g. --run-name {run_name}, not --run-name "{run_name}")'
            )
        elif name not in COMMAND_PLACEHOLDERS:
            marks.append((name, len(masked)))
        masked += _MARK
        escaped, previous = False, "}"
    for name, at in marks:
        context = _code_context(masked[:at], masked[at + 1 :])
        if context:
            problems.append(
                f"{{{name}}} is {context[0]}, where bash reads a value as code (fix: {context[1]})"
            )
    return problems


#: A placeholder in :func:`unsafe_placeholders`' masked template.
_MARK = "\x00"
#: What separates one simple command from the next, as far as a placeholder's context goes.
_COMMAND_BREAK = re.compile(r"\|\||&&|[;&|\n()`]|\b(?:if|then|else|elif|do|while|until)\s")
#: Words that run the command after them: the command a placeholder is an argument of comes next.
_WRAPPERS = frozenset({"sudo", "env", "exec", "nohup", "command", "builtin", "time", "!", "xargs"})
#: Programs whose ``-c`` (shells) or ``-e`` (interpreters) argument, or standard input, is code.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_INTERPRETERS = frozenset({"python", "python3", "perl", "ruby", "node"})
#: Builtins that declare variables, whose arguments are names (``NAME=value`` assigns a value).
_DECLARERS = re.compile(r"declare|typeset|local|export|readonly")
_ARITHMETIC_FIX = (
    "compare it with test, which refuses a value that is not a number instead of evaluating it, "
    "e.g. [ {x} -eq 1 ], or pass it to the training script as an argument"
)
_NAME_FIX = "use a fixed variable name and give the value as its value, e.g. printf -v name %s {x}"
_SCRIPT_FIX = (
    "pass it as an argument of a fixed script, e.g. sh -c 'echo \"$1\"' sh {x}, or to the training script"
)


def _code_context(before: str, after: str) -> tuple[str, str] | None:
    """Where a placeholder stands when bash reads its (quoted) value as code, and the fix; or None.

    ``before`` and ``after`` are the masked template around it. Bash evaluates the operands of
    ``[[ ... -eq ... ]]``, ``(( ))``, ``$(( ))`` and ``let`` as arithmetic, and arithmetic runs
    ``$(...)`` in an array subscript (``a[$(cmd)]``), as does a variable name given to ``printf -v``,
    ``declare``, ``read``, ``unset`` or ``test -v``; ``eval``, ``sh -c``, ``python -c`` and a shell
    reading a pipe run their text. Quoting protects none of them.
    """
    if before.count("((") > before.count("))") or before.rfind("$[") > before.rfind("]"):
        return "inside an arithmetic expression", _ARITHMETIC_FIX
    if before.rfind("[[") > before.rfind("]]"):
        return "inside [[ ]], whose -eq, -lt and -v read operands as arithmetic", _ARITHMETIC_FIX
    if re.search(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]\s]*$", before):
        return "in an array subscript, which is arithmetic", _ARITHMETIC_FIX
    words = _command_words(_COMMAND_BREAK.split(before)[-1])
    command = words[0] if words else ""
    if command in ("eval", "let"):
        return f"an argument of {command}", _ARITHMETIC_FIX if command == "let" else _SCRIPT_FIX
    if command in ("read", "readarray", "mapfile", "unset"):
        return f"an argument of {command}, which names a variable", _NAME_FIX
    if _DECLARERS.fullmatch(command):
        # NAME={x} assigns the value as text, unless -i makes it arithmetic or -n a variable's name.
        assigned = re.search(r"(?:^|\s)[A-Za-z_][A-Za-z0-9_]*=$", before)
        attributes = "".join(word for word in words[1:] if re.fullmatch(r"[-+][A-Za-z]+", word))
        if assigned and "i" in attributes:
            return f"assigned to an integer variable of {command}, which is arithmetic", _ARITHMETIC_FIX
        if not assigned or "n" in attributes:
            return f"an argument of {command}, which names a variable", _NAME_FIX
    if (command == "printf" and words[-1] == "-v") or (command in ("[", "test") and "-v" in words):
        return f"the variable name of {command} -v", _NAME_FIX
    option = words[-1] if len(words) > 1 else ""
    code_option = re.fullmatch(r"-[a-z]*c" if command in _SHELLS else r"-[a-z]*[ce]|--eval", option)
    if command in _SHELLS | _INTERPRETERS and (code_option or option == "<<<"):
        return f"the code {command} {option} runs", _SCRIPT_FIX
    if command == "ssh":
        return "an argument of ssh, which the remote shell parses again", _SCRIPT_FIX
    pipeline = re.split(r"\|\||&&|[;\n]", after)[0].split("|")[1:]
    if any(_reads_code(_command_words(stage)) for stage in pipeline):
        return "piped into a shell, which runs what it reads", _SCRIPT_FIX
    return None


def _command_words(text: str) -> list[str]:
    """The words of a simple command from its program on: assignments and wrappers skipped."""
    words = text.split()
    while words and (words[0] in _WRAPPERS or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0])):
        words.pop(0)
    if words:
        words[0] = words[0].rsplit("/", 1)[-1]
    return words


def _reads_code(words: list[str]) -> bool:
    """Whether a pipeline stage runs its standard input: a shell or interpreter given no script."""
    if not words:
        return False
    if words[0] in ("source", ".", "eval"):
        return True
    return words[0] in _SHELLS | _INTERPRETERS and all(word.startswith("-") for word in words[1:])


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def load_declaration(path: Path) -> PipelineDeclaration:
    """Read and validate one declaration file; DeclarationError names the file, the key and the fix."""
    import yaml

    title = f"pipeline declaration {path}"
    # libyaml's loader when PyYAML has it: a folder of declarations is parsed on every DAG parse.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(read_settings_file(path, title, DeclarationError))
    try:
        node = loader.get_single_node()
        _check_nodes(node, title)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise DeclarationError(f"{title}: not valid YAML ({exc}) (fix: correct it at that line)") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise DeclarationError(
            f"{title}: holds a YAML {type(data).__name__}, not a mapping "
            "(fix: write the pipeline, dataset and training sections as in the README)"
        )
    return declare(data, base_dir=path.resolve().parent, source=str(path))


def _check_nodes(root: Any, title: str) -> None:
    """Refuse a key written twice in one mapping, or nesting deeper than ``MAX_NESTING``, before the
    document is built (PyYAML keeps a duplicate's last value, and builds nested values recursively)."""
    import yaml

    stack = [(root, 1)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise nesting_error(title, DeclarationError)
        if isinstance(node, yaml.MappingNode):
            keys = [key for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
            seen = [(key.tag, key.value) for key in keys]
            twice = next((key for index, key in enumerate(keys) if seen[index] in seen[:index]), None)
            if twice is not None:
                line = twice.start_mark.line + 1
                raise DeclarationError(f"{title}: line {line}: {duplicate_key(twice.value)}")
            stack += [(child, depth + 1) for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(child, depth + 1) for child in node.value]


def declare(data: dict[str, Any], base_dir: Path, source: str | None = None) -> PipelineDeclaration:
    """Validate a declaration given as data (the Python factory's form)."""
    title = f"pipeline declaration {source}" if source else "pipeline declaration"
    try:
        return validate_record(
            PipelineDeclaration, {**data, "base_dir": base_dir, "source": source}, title=title
        )
    except SpecError as exc:
        raise DeclarationError(str(exc)) from None
    except ValueError as exc:  # a template pydantic could not parse
        raise DeclarationError(f"{title}: {exc}") from None


def declaration_files(folder: Path) -> list[Path]:
    """The declaration files of ``folder``, in name order (hidden files left out)."""
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.iterdir()
        if path.suffix in DECLARATION_SUFFIXES and not path.name.startswith(".") and path.is_file()
    )
