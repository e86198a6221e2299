"""Tell the pipeline how far training has come: one JSON line on stdout per call.

    from progress import report_progress

    report_progress(step=420, total_steps=1000, epoch=2, total_epochs=5, loss=0.41, accuracy=0.8)

prints ``{"event": "progress", "step": 420, "total_steps": 1000, "epoch": 2, "total_epochs": 5,
"time": 1765100000.5, "metrics": {"loss": 0.41, "accuracy": 0.8}}``, the line the pipeline reads from
the job's log for its progress, rate and ETA (the job contract in the README). Every argument is
optional; the keyword arguments after the four named ones are metrics, numbers only.
:class:`LoopProgress` does the step arithmetic of a loop over epochs of equal steps.

Only the job's global rank 0 prints, so a script may call it on every rank. It is standard library
only, so it runs in any training image, and it never raises: a value it cannot write as a finite
number is left out, since a report must not end a run. The file sits beside the training scripts,
which import it as a sibling module (``include/imagenet_resnet/progress.py`` links to it); the
image build copies it with them.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import SupportsFloat

#: The fields a report names itself; any other keyword is a metric.
FIELDS = ("step", "total_steps", "epoch", "total_epochs")


def global_rank() -> int:
    """This process's rank in the whole job: Open MPI's under mpirun, else ``RANK``; 0 when unset.

    torchrun, accelerate and PAI-DLC set ``RANK``. Under mpirun the platform's ``RANK`` counts nodes,
    not processes, so Open MPI's own rank wins there, unless torchrun started this process (then
    ``RANK`` is torchrun's, per process), as ``train_resnet.py`` reads it.
    """
    if "OMPI_COMM_WORLD_RANK" in os.environ and "TORCHELASTIC_RUN_ID" not in os.environ:
        name = "OMPI_COMM_WORLD_RANK"
    else:
        name = "RANK"
    rank = os.environ.get(name, "0").strip()
    return int(rank) if rank.isdigit() else 0


def _finite(value: SupportsFloat | None) -> float | None:
    """A finite number as a float (a numpy or one-element torch scalar too); None for anything else."""
    if value is None or isinstance(value, bool | str | bytes):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _whole(value: SupportsFloat | None) -> int | float | None:
    """Counts print as ints and a whole epoch as one (``2``, not ``2.0``)."""
    number = _finite(value)
    if number is None:
        return None
    return int(number) if number.is_integer() else number


def progress_line(
    step: SupportsFloat | None = None,
    total_steps: SupportsFloat | None = None,
    epoch: SupportsFloat | None = None,
    total_epochs: SupportsFloat | None = None,
    **metrics: SupportsFloat,
) -> str:
    """The report's JSON line, stamped with the current time."""
    record: dict[str, object] = {"event": "progress"}
    for name, value in zip(FIELDS, (step, total_steps, epoch, total_epochs), strict=True):
        number = _whole(value)
        if number is not None:
            record[name] = number
    record["time"] = round(time.time(), 6)  # the microseconds a datetime keeps
    record["metrics"] = {
        name: number for name, value in metrics.items() if (number := _finite(value)) is not None
    }
    return json.dumps(record, allow_nan=False)


def report_progress(
    step: SupportsFloat | None = None,
    total_steps: SupportsFloat | None = None,
    epoch: SupportsFloat | None = None,
    total_epochs: SupportsFloat | None = None,
    **metrics: SupportsFloat,
) -> None:
    """Print the report on the job's global rank 0, flushed at once so the log has it now."""
    if global_rank() == 0:
        print(progress_line(step, total_steps, epoch, total_epochs, **metrics), file=sys.stdout, flush=True)


@dataclass(frozen=True)
class LoopProgress:
    """Reports of a loop over ``epochs`` epochs of ``steps_per_epoch`` steps, both counted from 1.

    The step is the job's global one (a resumed run goes on counting where its checkpoint was),
    the epoch a fraction between reports.
    """

    steps_per_epoch: int
    epochs: int
    #: Reports in the course of an epoch, besides the one at its end.
    reports_per_epoch: int = 10

    def step(self, epoch: int, step: int, **metrics: SupportsFloat) -> None:
        """After ``step`` of ``epoch``: a report every ``steps_per_epoch / reports_per_epoch`` steps,
        but the epoch's last, which :meth:`epoch_end` reports with the epoch's scores."""
        every = max(1, self.steps_per_epoch // max(1, self.reports_per_epoch))
        if step % every == 0 and step < self.steps_per_epoch:
            self._report(epoch, step, metrics)

    def epoch_end(self, epoch: int, **metrics: SupportsFloat) -> None:
        """After the last step of ``epoch``, with what the epoch scored."""
        self._report(epoch, self.steps_per_epoch, metrics)

    def _report(self, epoch: int, step: int, metrics: dict[str, SupportsFloat]) -> None:
        per_epoch = max(self.steps_per_epoch, 1)  # an empty epoch still ends
        done = (epoch - 1) * per_epoch + step
        report_progress(
            step=done,
            total_steps=self.epochs * per_epoch,
            epoch=done / per_epoch,
            total_epochs=self.epochs,
            **metrics,
        )
