"""The settings of each backend an environment file configures, without planning a run.

A planned job carries its backend's settings; the reconciler and a failed run's callback have no
run to plan, only the environment files the pipelines name, and rebuild each backend from them to
find the jobs this package launched there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from aliyun_training.backend_catalog import Backend, backend_record
from aliyun_training.environments import blank_required_settings, load_environment, load_local_environment
from aliyun_training.validation import SpecError


class WatchedBackend(BaseModel):
    """A backend and the environment file whose jobs are watched (JSON: a task's argument)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend
    environment: str


def backend_config(watched: WatchedBackend) -> dict[str, Any]:
    """The backend's constructor settings; SpecError when its file is missing, invalid or incomplete.

    The local backend needs no file (its runs are under the local root).
    """
    path = Path(watched.environment)
    record = backend_record(watched.backend)
    if not record.cloud:
        config: dict[str, Any] = record.part("backend_config")(load_local_environment(path))
        return config
    environment = load_environment(path, watched.backend.value)
    blank = blank_required_settings(environment)
    if blank:
        raise SpecError(
            f"{path}: {', '.join(blank)} left blank; the {watched.backend.value} backend is not set up"
        )
    config = record.part("backend_config")(environment)
    return config


def distinct(watched: list[WatchedBackend]) -> list[WatchedBackend]:
    """Each backend and file once, in a stable order: pipelines share environment files."""
    unique = {json.dumps(item.model_dump(mode="json"), sort_keys=True): item for item in watched}
    return [unique[key] for key in sorted(unique)]
