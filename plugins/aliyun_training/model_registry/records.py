"""What a model registry is told and answers, whichever registry it is (MLflow's or PAI's).

A candidate is every model a run publishes, registered with its metrics and lineage (dataset
version, code digest, image, job, DAG run, declaration); a promotion moves the registry's champion
pointer (MLflow's ``champion`` alias, PAI's ``champion`` label) to one registered version. Both
steps are idempotent per DAG run: a retried task finds the version its first try registered (by
the run id the version carries) and a pointer already on that version is left as it is.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID


class RegistryError(Exception):
    """The registry refused or could not be reached; the message names the registry and the fix."""


class RegistrySettings(BaseModel):
    """The run plan's registry: which one, and where (the declaration's ``registry`` block, resolved)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["mlflow", "pai"]
    #: The registered model every candidate of the pipeline is a version of.
    model: str
    #: MLflow: the tracking URI (the embedded SQLite store's when the declaration names none).
    tracking_uri: str | None = None
    #: PAI: the workspace and region the models live in, and the connection that reaches them.
    workspace_id: str | None = None
    region: str | None = None
    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID

    @property
    def where(self) -> str:
        """The registry as the dry run and the logs name it."""
        if self.kind == "mlflow":
            return f"MLflow model registry at {self.tracking_uri}"
        return f"PAI model registry of workspace {self.workspace_id} ({self.region})"


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

    def identity(self) -> dict[str, str]:
        """What makes a candidate one run's: a retry finds its first try's version by these."""
        return {"installation": self.installation, "dag_id": self.dag_id, "run_id": self.run_id}

    def lineage(self) -> dict[str, str]:
        """The lineage as flat string pairs: MLflow tags and PAI labels hold strings only."""
        fields: dict[str, Any] = {
            "installation": self.installation,
            "run_id": self.run_id,
            "dag_id": self.dag_id,
            "dataset_version": self.dataset_version,
            "manifest_uri": self.manifest_uri,
            "job_id": self.job_id,
            "image": self.image,
            "code_digest": self.code_digest,
            "declaration": self.declaration,
        }
        return {key: str(value) for key, value in fields.items() if value is not None}


class RegisteredVersion(BaseModel):
    """One version of the registered model: which registry, which version, and the run it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: Literal["mlflow", "pai"]
    model: str
    version: str
    #: Where a person or a deployment finds it: ``models:/<model>/<version>`` at a tracking URI, or
    #: the PAI model version's address.
    uri: str
    run_id: str
    metrics: dict[str, float] = Field(default_factory=dict)


class ModelRegistry(Protocol):
    """A model registry as the artifacts and promotion tasks use it."""

    def register(self, candidate: Candidate) -> RegisteredVersion:
        """Register ``candidate`` as a new version, or return the version its run registered already."""
        ...

    def champion(self) -> RegisteredVersion | None:
        """The version the champion pointer is on, if any."""
        ...

    def promote(self, version: RegisteredVersion) -> None:
        """Move the champion pointer to ``version`` (nothing to do when it is there already)."""
        ...
