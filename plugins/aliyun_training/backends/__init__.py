"""Training backends behind one protocol; modules are imported only when a backend is used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.spec import Backend
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.backends.base import TrainingBackend

#: Backends that are implemented; the DAG's trigger form offers exactly these.
IMPLEMENTED_BACKENDS: tuple[Backend, ...] = (Backend.LOCAL, Backend.DLC, Backend.ARENA)


def get_backend(name: str, config: dict[str, Any] | None = None) -> TrainingBackend:
    """Instantiate the backend called ``name`` with its JSON-serializable ``config``."""
    if name == Backend.LOCAL:
        from aliyun_training.backends.local import LocalBackend

        return LocalBackend(**(config or {}))
    if name == Backend.DLC:
        from aliyun_training.backends.dlc import DlcBackend

        return DlcBackend(**(config or {}))
    if name == Backend.ARENA:
        from aliyun_training.backends.arena import ArenaBackend

        return ArenaBackend(**(config or {}))
    offered = ", ".join(b.value for b in IMPLEMENTED_BACKENDS)
    raise SpecError(f"backend: {name!r} is not available in this installation (fix: use one of: {offered})")
