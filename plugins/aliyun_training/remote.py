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

import importlib
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aliyun_training.spec import SpecError

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


#: (kind, mode) -> the module and class of the run, imported only when a run of that mode is built.
RUNS: dict[tuple[str, str], tuple[str, str]] = {
    ("staging", "pod"): ("aliyun_training.staging.pod", "PodStager"),
    ("staging", "dataflow"): ("aliyun_training.staging.dataflow", "DataFlowStager"),
    ("image", "kaniko"): ("aliyun_training.image.kaniko", "KanikoBuilder"),
    ("image", "acr"): ("aliyun_training.image.acr", "AcrBuilder"),
}
#: The setting that chooses the mode of each kind, named in errors.
MODE_FIELDS = {"staging": "staging.mode", "image": "image_build.mode"}


def remote_run(kind: str, mode: str, config: dict[str, Any]) -> RemoteRun:
    """The run of ``kind`` (``staging`` or ``image``) in ``mode``, built (and validated) from its settings."""
    try:
        module, name = RUNS[(kind, mode)]
    except KeyError:
        modes = [known for of_kind, known in RUNS if of_kind == kind]
        raise SpecError(
            f"{MODE_FIELDS.get(kind, 'mode')}: {mode!r} is not a {kind} mode that runs off the worker "
            f"(fix: use one of {modes})"
        ) from None
    return getattr(importlib.import_module(module), name)(**config)
