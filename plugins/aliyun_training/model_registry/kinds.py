"""The kinds of model registry a pipeline may register its candidates in: one record each, read by
every place that differs by kind.

A kind is made of parts: how the declaration's ``registry`` block and the run's environment resolve
into the plan's :class:`~aliyun_training.model_registry.base.RegistrySettings`, the client that
registers candidates and moves the champion pointer, and the requests that client sends, which the
dry run shows. Each place reads the kind's :class:`ModelRegistryRecord` instead of switching on its
name, so adding a registry is one module plus one entry in :data:`MODEL_REGISTRIES`, as adding a
backend is one package plus one entry in ``backend_catalog.BACKENDS``.

The record names its code parts by import path, as the backend's record does: nothing is imported
until a part is used, so the declaration, which reads the kinds, imports no client, and a DAG file
imports no SDK. ``tests/unit/test_model_registry_kinds.py`` resolves every path.
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The model registries a declaration may name (its ``registry.kind``).
ModelRegistryKind = Literal["mlflow", "pai"]
#: The kind a declaration that names none registers in: MLflow's, embedded when it names no server.
DEFAULT_MODEL_REGISTRY: ModelRegistryKind = "mlflow"


@dataclass(frozen=True)
class ModelRegistryRecord:
    """One kind of model registry: its words, and its code parts by import path (see :meth:`part`)."""

    name: ModelRegistryKind
    #: The registry's name in a sentence ("an MLflow setting").
    label: str
    #: The registry as the dry run and the logs name it: a format of its settings' fields.
    where: str
    #: The settings of the declaration's ``registry`` block only this kind takes.
    declared_settings: frozenset[str]
    #: ``(RegistryInputs) -> RegistrySettings``: the plan's settings of the declared registry.
    settings: str
    #: The ``ModelRegistry`` class: ``(RegistrySettings, installation) -> ModelRegistry``.
    client: str
    #: ``(RegistrySettings, installation) -> PlannedRegistryCalls``: what the client would send.
    planned_requests: str

    def part(self, field: str) -> Any:
        """The code part named by ``field`` (e.g. ``"client"``), imported on first use."""
        return pkgutil.resolve_name(str(getattr(self, field)))


#: Every model registry a pipeline may use.
MODEL_REGISTRIES: tuple[ModelRegistryRecord, ...] = (
    ModelRegistryRecord(
        name="mlflow",
        label="MLflow",
        where="MLflow model registry at {tracking_uri}",
        declared_settings=frozenset({"tracking_uri"}),
        settings="aliyun_training.model_registry.mlflow:mlflow_settings",
        client="aliyun_training.model_registry.mlflow:MlflowRegistry",
        planned_requests="aliyun_training.model_registry.mlflow:planned_requests",
    ),
    ModelRegistryRecord(
        name="pai",
        label="PAI",
        where="PAI model registry of workspace {workspace_id} ({region})",
        declared_settings=frozenset(),
        settings="aliyun_training.model_registry.pai:pai_settings",
        client="aliyun_training.model_registry.pai:PaiRegistry",
        planned_requests="aliyun_training.model_registry.pai:planned_requests",
    ),
)

_BY_NAME = {record.name: record for record in MODEL_REGISTRIES}


def model_registry_record(kind: ModelRegistryKind) -> ModelRegistryRecord:
    """The record of the registry ``kind`` (a typed kind: the declaration and the plan checked it)."""
    return _BY_NAME[kind]


def check_declared_settings(kind: ModelRegistryKind, declared: Mapping[str, object]) -> None:
    """Refuse a setting of the declaration's ``registry`` block that another kind takes, naming it."""
    for setting, value in declared.items():
        if not value or setting in model_registry_record(kind).declared_settings:
            continue
        owner = next(record for record in MODEL_REGISTRIES if setting in record.declared_settings)
        raise ValueError(f"{setting} is an {owner.label} setting (fix: remove it, or use kind: {owner.name})")
