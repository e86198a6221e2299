"""Fixtures shared by the unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from aliyun_training.plan.models import RunPlan

#: A dlc.json with every required setting, mounting a fixed PAI dataset (nothing to stage).
DLC_CONFIGURED = {
    "quota_id": "quota1ab2",
    "gpu_type": "GU8TF",
    "image": "registry.example.com/train:1",
    "workspace_id": "ws-9",
    "dataset": {"dataset_id": "d-cifar", "uri": "", "mount_path": "/mnt/data/cifar10"},
}


@pytest.fixture
def dlc_plan(tmp_path: Path) -> Callable[..., RunPlan]:
    """Plan a 2 x 8-GPU DLC run of the CIFAR-10 example, as ``resolve_run`` plans it, from
    ``DLC_CONFIGURED`` with ``environment`` laid over it; ``form`` adds trigger-form values."""
    # Imported once a test asks for a plan: the unit tests that plan none do not load the planners.
    from fakes.environment_files import resolve_configured

    def plan(environment: dict[str, Any] | None = None, **form: Any) -> RunPlan:
        settings = {**DLC_CONFIGURED, **(environment or {})}
        return resolve_configured(tmp_path, settings, backend="dlc", gpus_per_node=8, **form)

    return plan
