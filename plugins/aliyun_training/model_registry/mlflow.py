"""MLflow's model registry: one registered model per pipeline, a version per candidate, aliases.

Each candidate is a model version created from its MLflow run's logged model (``mlflow_run``: the
run holds its params, metrics, dataset input and documents; the logged model the MLflow model the
job saved, else its files), whose tags carry its lineage (``lineage.<key>``) and the metrics the gate
read (``metric.<name>``, as the champion's record reads them back); the ``challenger`` alias names the
newest candidate the gate passed and the ``champion`` alias the promoted one, as MLflow's registry
documents aliases for champion/challenger deployments. A retried task finds its run's version by the
``lineage.run_id`` tag instead of registering again.

The embedded default (``sqlite:///<local root>/mlflow/mlflow.db``) needs nothing running; SQLite
takes one writer at a time and MLflow creates its tables on first use, so every call on an embedded
store holds a file lock: parallel runs queue instead of failing on a locked database.
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.model_registry.base import (
    LINEAGE,
    MLFLOW_MODEL_DIR,
    Candidate,
    PlannedRegistryCall,
    PlannedRegistryCalls,
    PublishedFiles,
    RegisteredVersion,
    RegistryError,
    RegistryInputs,
    RegistrySettings,
)
from aliyun_training.model_registry.mlflow_run import (
    MODEL_NAME,
    RUN_KEY_TAG,
    candidate_run,
    experiment_id,
    run_key,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

CHAMPION_ALIAS = "champion"
CHALLENGER_ALIAS = "challenger"
#: Tracking URIs of a tracking server (the others name a store MLflow opens in this process).
_SERVERS = ("http://", "https://", "databricks")
_RUN_TAG = "lineage.run_id"
_INSTALLATION_TAG = "lineage.installation"
#: The version tag saying why a person rejected its promotion.
REJECTED_TAG = "aliyun_training.rejected"


def champion_alias(installation: str) -> str:
    """The alias of ``installation``'s champion: ``champion-<installation id>``."""
    return _own_alias(CHAMPION_ALIAS, installation)


def challenger_alias(installation: str) -> str:
    """The alias of ``installation``'s newest candidate the gate passed: ``challenger-<installation
    id>`` (a held or backfilled model is registered, never the challenger)."""
    return _own_alias(CHALLENGER_ALIAS, installation)


def _own_alias(pointer: str, installation: str) -> str:
    return f"{pointer}-{installation}"


def embedded_tracking_uri(folder: Path) -> str:
    """The embedded registry's SQLite URI in ``folder``."""
    return f"sqlite:///{folder / 'mlflow.db'}"


def mlflow_settings(inputs: RegistryInputs) -> RegistrySettings:
    """The declared tracking URI, else the embedded store's under the local root."""
    uri = inputs.tracking_uri or embedded_tracking_uri(inputs.embedded_store)
    return RegistrySettings(
        kind="mlflow", model=inputs.model, tracking_uri=uri, plain_aliases=inputs.plain_aliases
    )


def pointer_aliases(pointer: str, installation: str, plain: bool) -> tuple[str, ...]:
    """The aliases ``installation`` keeps for ``pointer`` (:data:`CHAMPION_ALIAS` or
    :data:`CHALLENGER_ALIAS`): its own, ``<pointer>-<installation>``, and the plain one where it
    keeps the plain aliases (``RegistrySettings.plain_aliases``), last: the one people move by hand."""
    return (_own_alias(pointer, installation), *((pointer,) if plain else ()))


def planned_requests(settings: RegistrySettings, installation: str) -> PlannedRegistryCalls:
    """What :class:`MlflowRegistry` sends: the candidate's run in the pipeline's experiment with its
    params, metrics, dataset and documents, the model logged from it, a version of that model with
    the lineage and metrics as tags, and the challenger alias on it; promoting, the champion alias."""
    model = settings.model
    at = f"at {settings.tracking_uri}"
    return PlannedRegistryCalls(
        register=(
            PlannedRegistryCall(
                "mlflow",
                "create_run",
                {
                    "experiment": "<the pipeline's DAG id>",
                    "run_name": "<the Airflow run id>",
                    "tags": f"lineage.* ({', '.join(LINEAGE)}), airflow.*, {RUN_KEY_TAG}",
                },
                note=f"{at}; then log_batch (params, metrics per epoch), log_inputs (the dataset "
                "version), log_artifact (manifest, report); a retry reuses its finished run",
            ),
            PlannedRegistryCall(
                "mlflow",
                "create_logged_model",
                {"name": MODEL_NAME, "source_run_id": "<the run>"},
                note=f"then log_model_artifacts: the job's {MLFLOW_MODEL_DIR}/, else its files",
            ),
            PlannedRegistryCall(
                "mlflow",
                "create_model_version",
                {
                    "name": model,
                    "source": "<the logged model's artifact location>",
                    "tags": f"lineage.* ({', '.join(LINEAGE)}), metric.*",
                },
                note="skipped when the run's version exists (a retry)",
            ),
            *(
                PlannedRegistryCall(
                    "mlflow",
                    "set_registered_model_alias",
                    {"name": model, "alias": alias},
                    note="only when the gate passed the candidate",
                )
                for alias in pointer_aliases(CHALLENGER_ALIAS, installation, settings.plain_aliases)
            ),
        ),
        promote=tuple(
            PlannedRegistryCall("mlflow", "set_registered_model_alias", {"name": model, "alias": alias})
            for alias in pointer_aliases(CHAMPION_ALIAS, installation, settings.plain_aliases)
        ),
    )


class MlflowRegistry:
    """The ``ModelRegistry`` of an MLflow tracking URI (a server, or a database MLflow opens itself)."""

    def __init__(self, settings: RegistrySettings, installation: str) -> None:
        assert settings.tracking_uri, "the plan resolves the embedded store's URI"
        self.settings = settings
        self.model = settings.model
        self.installation = installation
        #: This installation's pointers: deployments sharing the store never move each other's (the
        #: plain ones too, where this deployment keeps them).
        self.champion_aliases = pointer_aliases(CHAMPION_ALIAS, installation, settings.plain_aliases)
        self.challenger_aliases = pointer_aliases(CHALLENGER_ALIAS, installation, settings.plain_aliases)
        self._opened: MlflowClient | None = None
        database = settings.tracking_uri.removeprefix("sqlite:///")
        self._lock_file = Path(database + ".lock") if database != settings.tracking_uri else None
        #: Where a SQLite store's runs and models keep their files: beside the database (MLflow's
        #: default, ``./mlruns``, is each worker's working directory); a server's own root otherwise.
        self._artifact_location = (
            (Path(database).parent / "artifacts").as_uri() if self._lock_file is not None else None
        )

    def register(self, candidate: Candidate, files: PublishedFiles) -> RegisteredVersion:
        def register() -> RegisteredVersion:
            found = self._version_of(candidate)
            if found is not None:
                return found
            self._ensure_model()
            experiment = experiment_id(self._client, candidate.dag_id, self._artifact_location)
            run_id, model_id = candidate_run(self._client, experiment, candidate, files)
            tags = {f"lineage.{name}": value for name, value in candidate.lineage().items()}
            tags[RUN_KEY_TAG] = run_key(candidate)
            tags |= {f"metric.{name}": repr(value) for name, value in candidate.metrics.items()}
            version = self._client.create_model_version(
                self.model,
                source=self._model_source(model_id),
                run_id=run_id,
                tags=tags,
                description=f"Trained on {candidate.dataset_version} in {candidate.run_id}",
                model_id=model_id,
            )
            if candidate.passed_gate:
                self._move(self.challenger_aliases, version.version)
            return self._registered(version)

        return self._call("register a candidate", register)

    def champion(self) -> RegisteredVersion | None:
        return self._call("read the champion", self._champion)

    def promote(self, version: RegisteredVersion) -> None:
        def promote() -> None:
            if self._aliases_on(version.version) >= set(self.champion_aliases):
                return
            self._check_own(version, "becomes its champion (fix: promote this run's own version)")
            self._move(self.champion_aliases, version.version)

        self._call("move the champion alias", promote)

    def _aliases_on(self, version: str) -> set[str]:
        """The aliases of the registered model that name ``version``."""
        aliases = self._client.get_registered_model(self.model).aliases or {}
        return {alias for alias, named in aliases.items() if str(named) == version}

    def _move(self, aliases: tuple[str, ...], version: str) -> None:
        """Point each of ``aliases`` at ``version``."""
        for alias in aliases:
            self._client.set_registered_model_alias(self.model, alias, version)

    def _check_own(self, version: RegisteredVersion, what: str) -> None:
        """Refuse a version another installation registered: only its own version ``what``."""
        owner = (self._client.get_model_version(self.model, version.version).tags or {}).get(
            _INSTALLATION_TAG
        )
        if owner != self.installation:
            raise RegistryError(
                f"registry: version {version.version} of model {self.model!r} was registered by "
                f"installation {owner or 'none'}, not {self.installation}: only a version this "
                f"installation registered {what}"
            )

    def _model_source(self, model_id: str) -> str:
        """The version's source: the logged model (``models:/<id>``, which a tracking server links
        the version to); on a store MLflow opens itself (a database, a folder), the model's own
        location, since such a store resolves ``models:/`` through MLflow's global tracking URI, not
        this client's (a TODO in MLflow's registry stores)."""
        if (self.settings.tracking_uri or "").startswith(_SERVERS):
            return f"models:/{model_id}"
        return str(self._client.get_logged_model(model_id).artifact_location)

    def reject(self, version: RegisteredVersion, reason: str) -> None:
        """Tag the version with why it was rejected, and take the challenger alias off it: MLflow
        has no approval state, and the challenger names a candidate still in the running."""

        def reject() -> None:
            self._check_own(version, "is marked rejected by it")
            self._client.set_model_version_tag(self.model, version.version, REJECTED_TAG, reason[:5000])
            for alias in self._aliases_on(version.version) & set(self.challenger_aliases):
                self._client.delete_registered_model_alias(self.model, alias)

        self._call("mark a version rejected", reject)

    def _champion(self) -> RegisteredVersion | None:
        from mlflow.exceptions import MlflowException

        try:
            pointer = self.champion_aliases[-1]
            return self._registered(self._client.get_model_version_by_alias(self.model, pointer))
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None  # no such model yet, or no version carries the alias
            raise

    def _version_of(self, candidate: Candidate) -> RegisteredVersion | None:
        """The version registered for the candidate's run, if one was (a retry's first try)."""
        for version in self._client.search_model_versions(
            f"name = '{self.model}' and tags.{RUN_KEY_TAG} = '{run_key(candidate)}'"
        ):
            return self._registered(version)
        return None

    def _ensure_model(self) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._client.create_registered_model(
                self.model, description="Candidates registered by an aliyun_training pipeline"
            )
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise

    def _registered(self, version: ModelVersion) -> RegisteredVersion:
        tags: dict[str, str] = dict(version.tags or {})
        return RegisteredVersion(
            registry="mlflow",
            model=self.model,
            version=str(version.version),
            uri=f"models:/{self.model}/{version.version} at {self.settings.tracking_uri}",
            run_id=tags.get(_RUN_TAG, ""),
            metrics={
                key.removeprefix("metric."): float(value)
                for key, value in tags.items()
                if key.startswith("metric.")
            },
        )

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """``call`` under the embedded store's lock (taken once: a second flock of the same file in
        this process would wait for itself); MLflow's errors name the registry and the fix."""
        from mlflow.exceptions import MlflowException

        try:
            with self._locked():
                if self._opened is None:
                    # Opening a SQL store creates or migrates its tables: under the lock too.
                    from mlflow.tracking import MlflowClient

                    uri = self.settings.tracking_uri
                    self._opened = MlflowClient(tracking_uri=uri, registry_uri=uri)
                    self._opened.search_registered_models(max_results=1)
                return call()
        except MlflowException as exc:
            raise RegistryError(
                f"registry: could not {what} for model {self.model!r} in the {self.settings.where}: "
                f"{exc.error_code}: {exc.message} (fix: check that the tracking server is reachable and "
                "the worker's MLflow credentials may write to the model registry)"
            ) from None

    @property
    def _client(self) -> MlflowClient:
        assert self._opened is not None, "opened by _call"
        return self._opened

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._lock_file is None:
            yield
            return
        self._lock_file.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_file.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
