"""Staging that runs somewhere else than the Airflow worker, watched by a trigger.

A ``pod`` stager runs the staging engine in a pod on ACK that mounts the CPFS claim; a
``dataflow`` stager asks CPFS itself to import from OSS. Both are driven the same way: ``submit``
starts the work (or finds the run already started for the same version, so a retried task never
starts a second copy), ``apoll`` reports progress from the triggerer, ``result`` turns a finished
run into a StagedDataset, ``stop`` ends a run the task no longer wants.

A stager is rebuilt in the triggerer from ``config`` (JSON-serializable keyword arguments), so it
holds no open clients between calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aliyun_training.spec import StagedDataset

RemoteState = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True)
class RemoteStatus:
    """Where a remote staging run is: ``message`` explains a failure, ``progress`` is a log line."""

    state: RemoteState
    message: str = ""
    progress: str = ""


class RemoteStager(Protocol):
    """A staging run outside the worker, addressed by a JSON-serializable handle."""

    def submit(self) -> dict[str, Any]:
        """Start the run, or find the one already started for this version; return its handle."""

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        """The run's state now (called from the triggerer)."""

    def result(self, handle: dict[str, Any]) -> StagedDataset:
        """What a succeeded run staged."""

    def stop(self, handle: dict[str, Any]) -> None:
        """End the run and remove what it started; a run already gone is not an error."""
