"""Sending one notice to the declared notifiers that want it: each on its own, so one that fails
(a chat service down, a provider missing) is logged and the others still send.

A notice must never fail the task or trigger that sends it: ``send_notice`` catches every error of
a notifier, logs its kind and the error's type and message, and counts what was sent. Connections'
secrets stay out of that line: the DingTalk hook's own errors never carry its URL (where the token
is), and Airflow's secret masker redacts what a provider's error might repeat.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk.definitions.context import Context

    from aliyun_training.notifications.declared import NotifierSpec
    from aliyun_training.notifications.events import Notice


class NoticeLog(Protocol):
    """What ``send_notice`` needs of a logger (a task's, a trigger's ``self.log``)."""

    def warning(self, msg: str, /, *args: Any) -> Any: ...


def notice_context(notice: Notice) -> dict[str, Any]:
    """The context a notifier is called with: the notice (as JSON values) and its main fields."""
    return {
        "notice": notice.model_dump(mode="json"),
        "dag_id": notice.dag_id,
        "run_id": notice.run_id,
        "title": notice.title,
        "text": notice.text,
    }


def send_notice(notice: Notice, specs: Sequence[NotifierSpec], log: NoticeLog) -> int:
    """Send ``notice`` through every spec whose ``events`` include its event; the number sent.

    Each notifier's ``notify`` is called directly, not through ``__call__``, which would render its
    template fields with Jinja: the notice's words are data (a failure may quote ``{{`` from a log).
    Never raises.
    """
    sent = 0
    for spec in specs:
        if notice.event not in spec.events:
            continue
        try:
            spec.build(notice).notify(cast("Context", notice_context(notice)))
        except Exception as exc:
            log.warning(
                "The %s notifier did not send the %s notice of %s: %s: %s",
                spec.kind,
                notice.event.value,
                notice.run_id,
                type(exc).__name__,
                exc,
            )
            continue
        sent += 1
    return sent


async def asend_notice(notice: Notice, specs: Sequence[NotifierSpec], log: NoticeLog) -> int:
    """``send_notice`` in a worker thread: the notifiers' HTTP and SMTP calls block, and the
    triggerer's event loop serves every other trigger meanwhile."""
    return await asyncio.to_thread(send_notice, notice, specs, log)
