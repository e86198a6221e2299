"""Training backends behind one protocol; a backend's module is imported only when it is used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.backend_catalog import backend_record

if TYPE_CHECKING:
    from aliyun_training.backends.base import TrainingBackend


def get_backend(name: str, config: dict[str, Any] | None = None) -> TrainingBackend:
    """Instantiate the backend called ``name`` with its JSON-serializable ``config``."""
    backend: TrainingBackend = backend_record(name).part("backend_class")(**(config or {}))
    return backend
