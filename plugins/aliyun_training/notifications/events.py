"""What a notice is about and what it says: the words every notifier sends, whichever kind.

Pure (pydantic and the standard library): the live record, the trigger and the tasks decide that
something happened and write its title and text; the declared notifiers only carry them.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class NotifyEvent(StrEnum):
    """A change worth telling a person about; a declared notifier names the ones it wants."""

    FAILED = "failed"
    SUCCEEDED = "succeeded"
    PROMOTED = "promoted"
    HELD = "held"
    APPROVAL_WAITING = "approval_waiting"
    DEADLINE_AT_RISK = "deadline_at_risk"
    DEADLINE_MISSED = "deadline_missed"


class Notice(BaseModel):
    """One message about one run: sent once to every declared notifier that wants its event.

    ``title`` is one line (a chat's preview, an e-mail's subject); ``text`` is plain lines, which
    each kind lays out in its own markup; ``url`` is the run's page, linked under the text.
    """

    model_config = ConfigDict(frozen=True)

    event: NotifyEvent
    dag_id: str
    run_id: str
    title: str
    text: str
    url: str | None = None

    @classmethod
    def of_run(cls, event: NotifyEvent, dag_id: str, run_id: str, text: str, url: str | None) -> Notice:
        """The notice of ``event`` in a run, titled "<dag_id>: <event in words>"."""
        title = f"{dag_id}: {event.value.replace('_', ' ')}"
        return cls(event=event, dag_id=dag_id, run_id=run_id, title=title, text=text, url=url)
