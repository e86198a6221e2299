"""Work that runs somewhere else than the Airflow worker and is watched by a trigger.

A dataset staging pod, a CPFS data flow import and an image build (a kaniko pod, an ACR build) are
all driven the same way: ``submit`` starts the work (or finds the run already started for the same
input, so a retried task never starts it twice), ``apoll`` reports progress from the triggerer,
``result`` turns a finished run into the stage's record, ``stop`` ends a run the task no longer
wants.

A run is rebuilt in the triggerer from its kind, mode and ``config`` (JSON-serializable keyword
arguments), so it holds no open clients between calls. Each run class names its own ``mode``; the
package that owns a kind lists its runs in a :class:`RunKind` (``staging.runs``, ``image.runs``),
and ``remote_runs`` finds a kind's list. This module sits below all of them, so it names none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

RemoteState = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True)
class RemoteStatus:
    """Where a remote run is: ``message`` explains a failure, ``progress`` is a log line."""

    state: RemoteState
    message: str = ""
    progress: str = ""


class RemoteRun(Protocol):
    """Work outside the worker, addressed by a JSON-serializable handle."""

    #: The mode the run is chosen by (the value of its kind's setting, e.g. ``staging.mode``).
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
    """A kind of remote run: the setting that chooses its mode, and its run classes (each names its mode)."""

    setting: str
    runs: tuple[type[RemoteRun], ...]
