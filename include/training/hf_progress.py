"""Progress reports from a Hugging Face ``Trainer``, in the pipeline's contract (``progress.py``).

    from hf_progress import ProgressCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[ProgressCallback()])

Each time the Trainer logs (every ``logging_steps``) and at each epoch's end, the job's main process
prints one report: the global step of ``max_steps``, the fractional epoch of ``num_train_epochs``
and the logged numbers (``loss``, ``learning_rate``, ``eval_loss``, ...). Not to be confused with
transformers' own ``ProgressCallback`` (its progress bars), which it leaves in place.

transformers is imported at the top: this module runs only in a training job that trains with it.
"""

from __future__ import annotations

from typing import Any

from progress import FIELDS, report_progress
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class ProgressCallback(TrainerCallback):
    """Reports the Trainer's state on its world's main process, the one process that should print."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._report(state, logs or {})

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._report(state, {})

    @staticmethod
    def _report(state: TrainerState, logs: dict[str, Any]) -> None:
        if not state.is_world_process_zero:
            return
        # The log's own "epoch" is the state's; a metric may not take a field's name.
        metrics = {
            name: value
            for name, value in logs.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and name not in FIELDS
        }
        report_progress(
            step=state.global_step,
            total_steps=state.max_steps if state.max_steps > 0 else None,
            epoch=state.epoch,
            total_epochs=state.num_train_epochs if state.num_train_epochs > 0 else None,
            **metrics,
        )
