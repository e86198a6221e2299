"""Work that runs somewhere else than the Airflow worker and is watched by a trigger.

A dataset staging pod, a CPFS data flow import and an image build (a kaniko pod, an ACR build) are
all driven the same way: ``submit`` starts the work (or finds the run already started for the same
input, so a retried task never starts it twice), ``apoll`` reports progress from the triggerer,
``result`` turns a finished run into the stage's record, ``stop`` ends a run the task no longer
wants.

A run is rebuilt in the triggerer by :func:`remote_run` from its kind, mode and ``config``
(JSON-serializable keyword arguments), so it holds no open clients between calls.

Each run class registers itself with :func:`register_remote_run`, so its kind and mode are written
once, on the class. :data:`KINDS` only says where a kind's runs are found: the modules a lookup
imports, none of which imports a cloud SDK at its top, so building a run in the scheduler or at DAG
parse costs module imports and no client. (A table of classes would name each run twice; finding
modules by a naming rule would let a mode from the trigger form pick which module is imported.)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

RemoteState = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True)
class RemoteStatus:
    """Where a remote run is: ``message`` explains a failure, ``progress`` is a log line."""

    state: RemoteState
    message: str = ""
    progress: str = ""


class RemoteRun(Protocol):
    """Work outside the worker, addressed by a JSON-serializable handle."""

    #: The kind and mode the class is registered under (set by :func:`register_remote_run`).
    kind: ClassVar[str]
    mode: ClassVar[str]

    def __init__(self, **config: Any) -> None:
        """Build (and validate) the run from its JSON-serializable settings."""

    def submit(self) -> dict[str, Any]:
        """Start the run, or find the one already started for this input; return its handle."""

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        """The run's state now (called from the triggerer)."""

    def result(self, handle: dict[str, Any]) -> Any:
        """What a succeeded run produced (a StagedDataset, a built image)."""

    def stop(self, handle: dict[str, Any]) -> None:
        """End the run and remove what it started; a run already gone is not an error."""


@dataclass(frozen=True)
class RunKind:
    """A kind of remote run: the setting that chooses its mode, and the modules its runs live in."""

    setting: str
    modules: tuple[str, ...]


KINDS = {
    "staging": RunKind("staging.mode", ("aliyun_training.staging.pod", "aliyun_training.staging.dataflow")),
    "image": RunKind("image_build.mode", ("aliyun_training.image.kaniko", "aliyun_training.image.acr")),
}

R = TypeVar("R", bound=type[RemoteRun])
#: kind -> mode -> run class, filled as the modules of :data:`KINDS` are imported.
_REGISTERED: dict[str, dict[str, type[RemoteRun]]] = {}


def register_remote_run(kind: str, mode: str) -> Callable[[R], R]:
    """Class decorator: the class is the run of ``kind`` in ``mode``.

    It also sets the class's ``kind`` and ``mode`` attributes, so what the run writes into its
    handle and messages is the mode it is found under.
    """

    def register(cls: R) -> R:
        if kind not in KINDS:
            raise ValueError(f"{cls.__qualname__}: {kind!r} is not a kind of remote run ({sorted(KINDS)})")
        runs = _REGISTERED.setdefault(kind, {})
        taken = runs.get(mode)
        if taken is not None and _path(taken) != _path(cls):
            raise ValueError(f"{kind} mode {mode!r} is taken by {_path(taken)}; {_path(cls)} cannot take it")
        cls.kind, cls.mode = kind, mode
        runs[mode] = cls
        return cls

    return register


def remote_runs(kind: str) -> dict[str, type[RemoteRun]]:
    """The run classes of ``kind`` by mode, sorted by mode, once the kind's modules are imported."""
    for module in KINDS[kind].modules if kind in KINDS else ():
        importlib.import_module(module)
    return dict(sorted(_REGISTERED.get(kind, {}).items()))


def remote_run(kind: str, mode: str, config: dict[str, Any]) -> RemoteRun:
    """The run of ``kind`` (``staging`` or ``image``) in ``mode``, built (and validated) from its settings."""
    runs = remote_runs(kind)
    if mode not in runs:
        setting = KINDS[kind].setting if kind in KINDS else "mode"
        raise SpecError(
            f"{setting}: {mode!r} is not a {kind} mode that runs off the worker "
            f"(fix: use one of {list(runs)})"
        )
    return runs[mode](**config)


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
