"""DingTalkNotifier: a markdown message to a DingTalk group through its custom robot, signed when
the robot asks for it (``notifications.robot``).

An Airflow notifier like the providers' own: a pipeline declares it (kind ``dingtalk``), and it
also serves as a DAG's or task's callback, or a Deadline Alert's (``async_notify``). Its module
imports no HTTP client: the hook is imported when a message is sent.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.notifier import BaseNotifier

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

#: The provider's default connection id.
DEFAULT_CONN_ID = "dingding_default"


class DingTalkNotifier(BaseNotifier):
    """Send ``title`` and ``text`` (DingTalk markdown) to the robot of ``dingding_conn_id``.

    ``title`` shows in the chat list, ``text`` in the chat. Both are template fields: called as a
    callback (``notifier(context)``) Airflow renders them with the context first; ``send_notice``
    calls ``notify`` directly, with words that are not templates.
    """

    template_fields = ("title", "text")

    def __init__(
        self,
        *,
        title: str,
        text: str,
        dingding_conn_id: str = DEFAULT_CONN_ID,
        at_mobiles: list[str] | None = None,
        at_all: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.text = text
        self.dingding_conn_id = dingding_conn_id
        self.at_mobiles = at_mobiles
        self.at_all = at_all

    def notify(self, context: Context) -> None:
        """Send the message; DingTalkError when DingTalk refuses it or cannot be reached."""
        from aliyun_training.notifications.robot import SignedDingdingHook

        SignedDingdingHook(
            dingding_conn_id=self.dingding_conn_id,
            message_type="markdown",
            message={"title": self.title, "text": self.text},
            at_mobiles=self.at_mobiles,
            at_all=self.at_all,
        ).send()

    async def async_notify(self, context: Context) -> None:
        """``notify`` in a worker thread, so the triggerer's event loop is not blocked."""
        await asyncio.to_thread(self.notify, context)
