"""The run's notices to the pipeline's notifiers, sent from Airflow's task callbacks.

Airflow calls ``on_failure_callback`` once, when a task fails for good (a try that is retried calls
``on_retry_callback`` instead), and ``on_success_callback`` once, when it succeeds: so a failure,
a success and a promotion are each told once per run, whatever retried before. The approval, which
a task announces before it waits, is kept as announced in ``task_state_store`` (``notify_once``).
The deadline's notices come from the training trigger (``triggers/training.py``).
"""

from __future__ import annotations

import abc
import logging
from typing import TYPE_CHECKING

from aliyun_training.failures import DEFAULT_RECOVERY
from aliyun_training.notifications import Notice, NotifierSpec, NotifyEvent, send_notice
from aliyun_training.pages.urls import run_page
from aliyun_training.seals import opened_state, sealed_state

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.sdk import Context

    from aliyun_training.failures import FailureClass, RecoveryRule

log = logging.getLogger(__name__)


def _notice(context: Context, event: NotifyEvent, text: str) -> Notice:
    ti = context["ti"]
    return Notice.of_run(event, ti.dag_id, ti.run_id, text, run_page(ti.dag_id, ti.run_id))


class _NoticeCallback(abc.ABC):
    """A task callback telling the pipeline's notifiers; a notifier's failure never fails the task."""

    def __init__(self, notifications: Sequence[NotifierSpec]) -> None:
        self.notifications = list(notifications)

    def __call__(self, context: Context) -> None:
        if self.notifications:
            send_notice(self.notice(context), self.notifications, log)

    @abc.abstractmethod
    def notice(self, context: Context) -> Notice:
        """What to tell of the task's state change."""


class FailureNotice(_NoticeCallback):
    """A task failed for good: its failure class and what recovery did about it, where a job's
    failure was classified; the error otherwise.

    It is a task's ``on_failure_callback``, which Airflow calls once, when no try is left (the
    recovery policy decides ``fail`` on the last try, so the callback runs).
    """

    def __init__(
        self, notifications: Sequence[NotifierSpec], table: Mapping[FailureClass, RecoveryRule] | None = None
    ) -> None:
        super().__init__(notifications)
        self.table = {**DEFAULT_RECOVERY, **(table or {})}

    def notice(self, context: Context) -> Notice:
        ti, error = context["ti"], context.get("exception")
        failure = getattr(error, "failure", None)
        what = f"{type(error).__name__}: {error}" if error is not None else "no error was given"
        first_line = what.splitlines()[0][:500]
        if failure is None:
            return _notice(
                context, NotifyEvent.FAILED, f"{ti.task_id} failed after try {ti.try_number}: {first_line}"
            )
        rule = self.table[failure.failure_class]
        return _notice(
            context,
            NotifyEvent.FAILED,
            f"{ti.task_id} failed after try {ti.try_number}: class {failure.failure_class.value}, recovery "
            f"{rule.action.value} (no try left): {first_line}",
        )


class SuccessNotice(_NoticeCallback):
    """The run's artifacts were published: its final metrics."""

    def notice(self, context: Context) -> Notice:
        published = context["ti"].xcom_pull(task_ids=context["ti"].task_id) or {}
        metrics = {k: v for k, v in (published.get("metrics") or {}).items() if k.startswith("final_")}
        shown = ", ".join(
            f"{k.removeprefix('final_')} {v:.4g}"
            for k, v in sorted(metrics.items())
            if isinstance(v, int | float)
        )
        return _notice(
            context,
            NotifyEvent.SUCCEEDED,
            f"published {published.get('uri', '')}: {shown or 'no final metrics'}",
        )


class PromotionNotice(_NoticeCallback):
    """The gate decided: the run's model is the champion now, or the champion was held."""

    def notice(self, context: Context) -> Notice:
        returned = context["ti"].xcom_pull(task_ids=context["ti"].task_id) or {}
        promoted = bool(returned.get("promoted"))
        event = NotifyEvent.PROMOTED if promoted else NotifyEvent.HELD
        verb = "is the champion now" if promoted else "did not replace the champion"
        return _notice(
            context, event, f"the model of run {context['ti'].run_id} {verb}: {returned.get('reason', '')}"
        )


def notify_once(
    context: Context, key: str, event: NotifyEvent, text: str, notifications: Sequence[NotifierSpec]
) -> None:
    """Tell the notifiers of ``event`` unless an earlier try of the task already did (kept sealed in
    ``task_state_store`` under ``key`` before sending: a try that dies in between leaves it untold)."""
    store, ti = context["task_state_store"], context["ti"]
    if not notifications or opened_state(store.get(key), ti, key):
        return
    store.set(key, sealed_state(True, ti, key))
    send_notice(_notice(context, event, text), notifications, log)
