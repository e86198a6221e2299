"""The model registries candidates are registered in and champions promoted through.

Each kind of registry is one record (``kinds.MODEL_REGISTRIES``): the functions here read the
record of the kind a plan's ``RegistrySettings`` or a declaration names, so no caller switches on
it. Each kind's module is imported only when used, so the DAG file never imports an SDK.

Deployments may share a registry (staging and production on one MLflow server or PAI workspace, with
the same declarations, so the same model names). Each has a champion pointer of its own: MLflow's
alias ``champion-<installation>`` (and ``challenger-<installation>``), PAI's ``champion`` label on
the installation's own versions only. A deployment never reads or moves another's pointer, and
promotes only a version its own runs registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.model_registry.kinds import model_registry_record

if TYPE_CHECKING:
    from aliyun_training.model_registry.base import (
        ModelRegistry,
        PlannedRegistryCalls,
        RegistryInputs,
        RegistrySettings,
    )
    from aliyun_training.model_registry.kinds import ModelRegistryKind


def resolve_registry_settings(kind: ModelRegistryKind, inputs: RegistryInputs) -> RegistrySettings:
    """The plan's settings of the declared registry ``kind``, resolved from ``inputs``."""
    settings: RegistrySettings = model_registry_record(kind).part("settings")(inputs)
    return settings


def open_registry(settings: RegistrySettings, installation: str) -> ModelRegistry:
    """The registry ``settings`` name, ready to use, with ``installation``'s champion pointer."""
    registry: ModelRegistry = model_registry_record(settings.kind).part("client")(settings, installation)
    return registry


def planned_registry_calls(settings: RegistrySettings, installation: str) -> PlannedRegistryCalls:
    """What ``open_registry(settings, installation)`` would send to register a candidate and to
    promote it, built by the registry's own module with no call (the dry run's registry requests)."""
    calls: PlannedRegistryCalls = model_registry_record(settings.kind).part("planned_requests")(
        settings, installation
    )
    return calls
