"""The model registries candidates are registered in and champions promoted through.

``open_registry`` returns the registry a plan's ``RegistrySettings`` name; each is imported only
when used, so the DAG file never imports an SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aliyun_training.model_registry.records import ModelRegistry, RegistrySettings


def open_registry(settings: RegistrySettings) -> ModelRegistry:
    """The registry ``settings`` name, ready to use."""
    if settings.kind == "mlflow":
        from aliyun_training.model_registry.mlflow import MlflowRegistry

        return MlflowRegistry(settings)
    from aliyun_training.model_registry.pai import PaiRegistry

    return PaiRegistry(settings)
