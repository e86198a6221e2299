"""MLflow's model registry: one registered model per pipeline, a version per candidate, aliases.

Each candidate is a model version whose source is its published artifact set and whose tags carry
its lineage (``lineage.<key>``) and metrics (``metric.<name>``); the ``challenger`` alias names the
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
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.model_registry.base import (
    LINEAGE,
    Candidate,
    PlannedRegistryCall,
    PlannedRegistryCalls,
    RegisteredVersion,
    RegistryError,
    RegistryInputs,
    RegistrySettings,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

CHAMPION_ALIAS = "champion"
CHALLENGER_ALIAS = "challenger"
_RUN_TAG = "lineage.run_id"
_INSTALLATION_TAG = "lineage.installation"
#: A hex digest of the run's identity (installation, DAG, run), the tag a retry searches by: a run
#: id may hold any character, MLflow's filter grammar quotes only some.
_RUN_KEY_TAG = "run_key"


def champion_alias(installation: str) -> str:
    """The alias of ``installation``'s champion: ``champion-<installation id>``."""
    return f"{CHAMPION_ALIAS}-{installation}"


def challenger_alias(installation: str) -> str:
    """The alias of ``installation``'s newest candidate the gate passed: ``challenger-<installation
    id>`` (a held or backfilled model is registered, never the challenger)."""
    return f"{CHALLENGER_ALIAS}-{installation}"


def embedded_tracking_uri(folder: Path) -> str:
    """The embedded registry's SQLite URI in ``folder``."""
    return f"sqlite:///{folder / 'mlflow.db'}"


def mlflow_settings(inputs: RegistryInputs) -> RegistrySettings:
    """The declared tracking URI, else the embedded store's under the local root."""
    uri = inputs.tracking_uri or embedded_tracking_uri(inputs.embedded_store)
    return RegistrySettings(kind="mlflow", model=inputs.model, tracking_uri=uri)


def planned_requests(settings: RegistrySettings, installation: str) -> PlannedRegistryCalls:
    """What :class:`MlflowRegistry` sends: a version of the candidate with its lineage and metrics
    as tags, and the challenger alias on it; promoting, the champion alias."""
    model = settings.model
    return PlannedRegistryCalls(
        register=(
            PlannedRegistryCall(
                "mlflow",
                "create_model_version",
                {
                    "name": model,
                    "source": "<the published artifact set>",
                    "tags": f"lineage.* ({', '.join(LINEAGE)}), metric.*",
                },
                note=f"at {settings.tracking_uri}; skipped when the run's version exists (a retry)",
            ),
            PlannedRegistryCall(
                "mlflow",
                "set_registered_model_alias",
                {"name": model, "alias": challenger_alias(installation)},
                note="only when the gate passed the candidate",
            ),
        ),
        promote=(
            PlannedRegistryCall(
                "mlflow", "set_registered_model_alias", {"name": model, "alias": champion_alias(installation)}
            ),
        ),
    )


class MlflowRegistry:
    """The ``ModelRegistry`` of an MLflow tracking URI (a server, or a database MLflow opens itself)."""

    def __init__(self, settings: RegistrySettings, installation: str) -> None:
        assert settings.tracking_uri, "the plan resolves the embedded store's URI"
        self.settings = settings
        self.model = settings.model
        self.installation = installation
        #: This installation's pointers: deployments sharing the store never move each other's.
        self.champion_alias = champion_alias(installation)
        self.challenger_alias = challenger_alias(installation)
        self._opened: MlflowClient | None = None
        database = settings.tracking_uri.removeprefix("sqlite:///")
        self._lock_file = Path(database + ".lock") if database != settings.tracking_uri else None

    def register(self, candidate: Candidate) -> RegisteredVersion:
        def register() -> RegisteredVersion:
            found = self._version_of(candidate)
            if found is not None:
                return found
            self._ensure_model()
            tags = {f"lineage.{key}": value for key, value in candidate.lineage().items()}
            tags[_RUN_KEY_TAG] = _run_key(candidate)
            tags |= {f"metric.{name}": repr(value) for name, value in candidate.metrics.items()}
            version = self._client.create_model_version(
                self.model,
                source=candidate.artifacts_uri,
                tags=tags,
                description=f"Trained on {candidate.dataset_version} in {candidate.run_id}",
            )
            if candidate.passed_gate:
                self._client.set_registered_model_alias(self.model, self.challenger_alias, version.version)
            return self._registered(version)

        return self._call("register a candidate", register)

    def champion(self) -> RegisteredVersion | None:
        return self._call("read the champion", self._champion)

    def promote(self, version: RegisteredVersion) -> None:
        def promote() -> None:
            current = self._champion()
            if current is not None and current.version == version.version:
                return
            owner = (self._client.get_model_version(self.model, version.version).tags or {}).get(
                _INSTALLATION_TAG
            )
            if owner != self.installation:
                raise RegistryError(
                    f"registry: version {version.version} of model {self.model!r} was registered by "
                    f"installation {owner or 'none'}, not {self.installation}: only a version this "
                    "installation registered becomes its champion (fix: promote this run's own version)"
                )
            self._client.set_registered_model_alias(self.model, self.champion_alias, version.version)

        self._call("move the champion alias", promote)

    def _champion(self) -> RegisteredVersion | None:
        from mlflow.exceptions import MlflowException

        try:
            return self._registered(self._client.get_model_version_by_alias(self.model, self.champion_alias))
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None  # no such model yet, or no version carries the alias
            raise

    def _version_of(self, candidate: Candidate) -> RegisteredVersion | None:
        """The version registered for the candidate's run, if one was (a retry's first try)."""
        for version in self._client.search_model_versions(
            f"name = '{self.model}' and tags.{_RUN_KEY_TAG} = '{_run_key(candidate)}'"
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


def _run_key(candidate: Candidate) -> str:
    identity = json.dumps(candidate.identity(), sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]
