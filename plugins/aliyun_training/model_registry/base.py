"""What a model registry is told and answers, whichever registry it is (MLflow's or PAI's).

A candidate is every model a run publishes, registered with its metrics and lineage (dataset
version, code digest, image, job, DAG run, declaration); a promotion moves the registry's champion
pointer (MLflow's ``champion`` alias, PAI's ``champion`` label) to one registered version. Both
steps are idempotent per DAG run: a retried task finds the version its first try registered (by
the run id the version carries) and a pointer already on that version is left as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.model_registry.kinds import ModelRegistryKind, model_registry_record

if TYPE_CHECKING:
    from pathlib import Path

#: The schemes MLflow's tracking and registry stores are reached by: its REST server, a Databricks
#: workspace, a local folder, and the SQLAlchemy databases (``<dialect>[+<driver>]``).
TRACKING_URI_SCHEMES = ("http", "https", "databricks", "file", "sqlite", "postgresql", "mysql", "mssql")
TRACKING_URI_FIX = (
    "an http(s), databricks, file or database URI of an absolute location, without credentials "
    "(MLflow reads MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN, and a database's "
    "driver its own variables, from the worker's environment)"
)
#: Query parameter names that carry a secret (``token``, ``password``, ``access_key``, ``sig``...).
_CREDENTIAL_NAME = re.compile(r"token|pass|pwd|secret|key|auth|cred|sig|session|bearer|jwt", re.IGNORECASE)


def check_tracking_uri(uri: str | None) -> str | None:
    """Refuse a tracking URI with a secret in it, or one MLflow would not reach alike from every worker.

    A URI is shown by the dry run, the XComs and the pipeline's page, so a password in its userinfo
    or a token in its query would be too; the messages never repeat it. A relative location
    (``mlruns``, ``sqlite:///mlflow.db``) is relative to each worker's own directory, and MLflow
    serves no other scheme.
    """
    if uri is None or uri == "databricks":  # the default Databricks profile, as MLflow spells it
        return uri
    parts = urlsplit(uri)
    if "@" in parts.netloc:
        raise ValueError("the URI carries credentials before its host")
    secrets = [
        name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if _CREDENTIAL_NAME.search(name)
    ]
    if secrets:
        raise ValueError(f"the URI carries credentials in its query parameters {secrets}")
    if parts.fragment or any(char.isspace() or not char.isprintable() for char in uri):
        raise ValueError("the URI has a fragment, whitespace or control characters")
    scheme = parts.scheme.lower()
    if scheme.split("+", 1)[0] not in TRACKING_URI_SCHEMES:
        found = f"the scheme {parts.scheme!r}" if scheme else "no scheme (a relative path)"
        raise ValueError(f"the URI has {found}; MLflow is reached by {', '.join(TRACKING_URI_SCHEMES)}")
    # sqlite:////abs/mlflow.db is absolute (sqlite:///x.db is relative); file:///abs; others name a host.
    absolute = {"file": parts.path.startswith("/"), "sqlite": parts.path.startswith("//")}
    if not absolute.get(scheme.split("+", 1)[0], bool(parts.hostname)):
        raise ValueError(
            f"the {scheme} URI names no host or absolute path, so each worker would read its own"
        )
    return uri


class RegistryError(Exception):
    """The registry refused or could not be reached; the message names the registry and the fix."""


class RegistrySettings(BaseModel):
    """The run plan's registry: which one, and where (the declaration's ``registry`` block, resolved)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ModelRegistryKind
    #: The registered model every candidate of the pipeline is a version of.
    model: str
    #: MLflow: the tracking URI (the embedded SQLite store's when the declaration names none).
    tracking_uri: str | None = None
    #: PAI: the workspace and region the models live in, and the connection that reaches them.
    workspace_id: str | None = None
    region: str | None = None
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
    #: MLflow: this deployment also keeps the plain ``champion`` and ``challenger`` aliases, which a
    #: team's serving reads by default (one deployment per store sets it).
    plain_aliases: bool = False

    @property
    def where(self) -> str:
        """The registry as the dry run and the logs name it (its kind's ``where``)."""
        return model_registry_record(self.kind).where.format_map(self.model_dump())


@dataclass(frozen=True)
class RegistryInputs:
    """What a run's plan resolves the declaration's ``registry`` block into settings with (each
    kind's ``settings`` part reads what it needs)."""

    #: The registered model every candidate is a version of.
    model: str
    #: The declaration's ``tracking_uri`` (MLflow), if it names one.
    tracking_uri: str | None
    #: The folder of the embedded MLflow store, under the local root.
    embedded_store: Path
    #: The cloud backend's environment file as loaded (its workspace, region and connection); None
    #: on a backend without one.
    environment: Any
    #: The run's backend and its environment file's name, for an error naming what lacks a setting.
    backend: str
    environment_file: str
    #: Whether the deployment keeps MLflow's plain aliases too (``[aliyun_training]
    #: plain_registry_aliases``).
    plain_aliases: bool = False


#: The fields of a candidate its registered version carries as its lineage, in this order.
LINEAGE = (
    "installation",
    "run_id",
    "dag_id",
    "dataset_version",
    "manifest_uri",
    "job_id",
    "image",
    "code_digest",
    "declaration",
)


class Candidate(BaseModel):
    """A run's model as it is registered: its metrics and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The Airflow deployment that made it (``[aliyun_training] installation_id``): two deployments
    #: sharing a registry may run DAGs of one id with one run id, and must not adopt each other's.
    installation: str
    run_id: str
    dag_id: str
    dataset_version: str
    #: The metrics the gate read (the evaluation's, else the training's final ones).
    metrics: dict[str, float]
    #: The published artifact set (the version's source) and its manifest.
    artifacts_uri: str
    manifest_uri: str
    job_id: str
    image: str
    code_digest: str
    #: The declaration file the pipeline was declared in.
    declaration: str | None = None
    #: Whether the promotion gate passed it (a backfill's and a held model's did not; a pipeline
    #: with no gate passes every candidate): only such a candidate becomes the challenger.
    passed_gate: bool = True
    #: Whether the gate compared it with the champion and held it (a backfill's model is not
    #: compared for promotion, so it is not held): a registry with an approval state rejects it.
    held: bool = False

    def identity(self) -> dict[str, str]:
        """What makes a candidate one run's: a retry finds its first try's version by these."""
        return {"installation": self.installation, "dag_id": self.dag_id, "run_id": self.run_id}

    def lineage(self) -> dict[str, str]:
        """The lineage as flat string pairs: MLflow tags and PAI labels hold strings only."""
        fields = {key: getattr(self, key) for key in LINEAGE}
        return {key: str(value) for key, value in fields.items() if value is not None}


#: Where the collected outputs hold an MLflow model (its ``MLmodel`` file and what it names),
#: written by the training script: the job contract's ``OUTPUT_DIR/mlflow-model``.
MLFLOW_MODEL_DIR = "mlflow-model"


@dataclass(frozen=True)
class PublishedFiles:
    """The candidate's published set as files on this machine, while it is registered: the local
    set itself, or the copy a cloud set was uploaded from. A registry reads the MLflow model the job
    saved there, if it saved one, and may keep the set's documents beside the version."""

    root: Path
    #: The set's manifest, as the publishing task wrote it.
    manifest: dict[str, Any]
    #: The set's manifest and report files.
    documents: tuple[Path, ...] = ()

    @property
    def mlflow_model(self) -> Path | None:
        """The MLflow model the job saved (a folder with an ``MLmodel`` file); None when the set
        holds only files, which are registered as they are."""
        folder = self.root / MLFLOW_MODEL_DIR
        return folder if (folder / "MLmodel").is_file() else None

    def flavors(self) -> tuple[str, ...]:
        """The MLflow model's flavours as its ``MLmodel`` file names them (``python_function``,
        ``pytorch``...); none without a model."""
        if self.mlflow_model is None:
            return ()
        import yaml

        document = yaml.safe_load((self.mlflow_model / "MLmodel").read_text()) or {}
        flavors = document.get("flavors") if isinstance(document, dict) else None
        return tuple(sorted(flavors)) if isinstance(flavors, dict) else ()


class RegisteredVersion(BaseModel):
    """One version of the registered model: which registry, which version, and the run it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: ModelRegistryKind
    model: str
    version: str
    #: Where a person or a deployment finds it: ``models:/<model>/<version>`` at a tracking URI, or
    #: the PAI model version's address.
    uri: str
    run_id: str
    metrics: dict[str, float] = Field(default_factory=dict)


class ModelRegistry(Protocol):
    """A model registry as the artifacts and promotion tasks use it."""

    def register(self, candidate: Candidate, files: PublishedFiles) -> RegisteredVersion:
        """Register ``candidate`` as a new version from its published ``files``, or return the
        version its run registered already."""
        ...

    def champion(self) -> RegisteredVersion | None:
        """The version the champion pointer is on, if any."""
        ...

    def promote(self, version: RegisteredVersion) -> None:
        """Move the champion pointer to ``version`` (nothing to do when it is there already)."""
        ...

    def reject(self, version: RegisteredVersion, reason: str) -> None:
        """Record that ``version`` will not become the champion (a person rejected its promotion),
        where the registry keeps such a state; ``reason`` says why."""
        ...


@dataclass(frozen=True)
class PlannedRegistryCall:
    """One request a registry client sends, as the dry run shows it: the service, the action, the
    body (what only the task knows, in angle brackets) and what the request depends on."""

    service: str
    action: str
    body: dict[str, Any]
    note: str = ""


@dataclass(frozen=True)
class PlannedRegistryCalls:
    """What a run asks of its registry: publishing registers the candidate (``register``), and
    promoting moves the champion pointer to it (``promote``)."""

    register: tuple[PlannedRegistryCall, ...]
    promote: tuple[PlannedRegistryCall, ...]
