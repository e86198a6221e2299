"""The model registries candidates are registered in and champions promoted through.

``open_registry`` returns the registry a plan's ``RegistrySettings`` name, as one installation (one
Airflow deployment) sees it; each is imported only when used, so the DAG file never imports an SDK.

Deployments may share a registry (staging and production on one MLflow server or PAI workspace, with
the same declarations, so the same model names). Each has a champion pointer of its own: MLflow's
alias ``champion-<installation>`` (and ``challenger-<installation>``), PAI's ``champion`` label on
the installation's own versions only. A deployment never reads or moves another's pointer, and
promotes only a version its own runs registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aliyun_training.model_registry.records import ModelRegistry, RegistrySettings


def open_registry(settings: RegistrySettings, installation: str) -> ModelRegistry:
    """The registry ``settings`` name, ready to use, with ``installation``'s champion pointer."""
    if settings.kind == "mlflow":
        from aliyun_training.model_registry.mlflow import MlflowRegistry

        return MlflowRegistry(settings, installation)
    from aliyun_training.model_registry.pai import PaiRegistry

    return PaiRegistry(settings, installation)
