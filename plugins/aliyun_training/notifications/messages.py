"""A notice in each chat's or mail's own markup: the title, the text's lines, the run's link.

The words are data, never a template: nothing here (nor in ``send_notice``) renders Jinja, so a
failure message that quotes ``{{`` from a job's log arrives as written.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aliyun_training.notifications.events import Notice

#: The words of the link to the run's page under every message.
LINK_WORDS = "Open the run"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def dingtalk_markdown(notice: Notice) -> str:
    """DingTalk's markdown body: the title as a heading (the message's own ``title`` shows only in
    the chat list), then each line of the text as its own paragraph, which renders every line
    break, then the link."""
    parts = [f"#### {notice.title}", *_lines(notice.text)]
    if notice.url:
        parts.append(f"[{LINK_WORDS}]({notice.url})")
    return "\n\n".join(parts)


def _slack_escaped(text: str) -> str:
    """Slack's mrkdwn reads ``&``, ``<`` and ``>`` as markup: written as entities they show as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(notice: Notice) -> str:
    """Slack mrkdwn: the title in bold, the text, the link as ``<url|words>``."""
    lines = [f"*{_slack_escaped(notice.title)}*", *(_slack_escaped(line) for line in _lines(notice.text))]
    if notice.url:
        lines.append(f"<{notice.url}|{LINK_WORDS}>")
    return "\n".join(lines)


def email_html(notice: Notice) -> str:
    """An e-mail's HTML body: the title as a heading, the text's lines, the link; every word escaped."""
    body = "<br>".join(html.escape(line) for line in _lines(notice.text))
    parts = [f"<h3>{html.escape(notice.title)}</h3>", f"<p>{body}</p>"]
    if notice.url:
        parts.append(f'<p><a href="{html.escape(notice.url, quote=True)}">{LINK_WORDS}</a></p>')
    return "\n".join(parts)
