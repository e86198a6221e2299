"""Work that runs somewhere else than the Airflow worker and is watched by a trigger.

A dataset staging pod, a CPFS data flow import and an image build (a kaniko pod, an ACR build) are
all driven the same way: ``submit`` starts the work (or finds the run already started for the same
input, so a retried task never starts it twice), ``apoll`` reports progress from the triggerer,
``result`` turns a finished run into the stage's record, ``stop`` ends a run the task no longer
wants.

A run is rebuilt in the triggerer by :func:`remote_run` from its kind, mode and ``config``
(JSON-serializable keyword arguments), so it holds no open clients between calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

RemoteState = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True)
class RemoteStatus:
    """Where a remote run is: ``message`` explains a failure, ``progress`` is a log line."""

    state: RemoteState
    message: str = ""
    progress: str = ""


class RemoteRun(Protocol):
    """Work outside the worker, addressed by a JSON-serializable handle."""

    def submit(self) -> dict[str, Any]:
        """Start the run, or find the one already started for this input; return its handle."""

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        """The run's state now (called from the triggerer)."""

    def result(self, handle: dict[str, Any]) -> Any:
        """What a succeeded run produced (a StagedDataset, a built image)."""

    def stop(self, handle: dict[str, Any]) -> None:
        """End the run and remove what it started; a run already gone is not an error."""


def remote_run(kind: str, mode: str, config: dict[str, Any]) -> RemoteRun:
    """The run of ``kind`` (``staging`` or ``image``) in ``mode``, built from its settings."""
    if kind == "staging":
        from aliyun_training.staging.stagers import remote_stager

        return remote_stager(mode, config)
    if kind == "image":
        from aliyun_training.image.builders import image_builder

        return image_builder(mode, config)
    raise ValueError(f"unknown remote run kind {kind!r}")
