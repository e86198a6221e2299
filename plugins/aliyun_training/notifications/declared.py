"""A pipeline's declared notifiers: one entry of the declaration's ``notifications:`` list, checked
when the declaration is read, and the Airflow notifier it builds when a notice is sent.

Each kind is one record (:data:`_KINDS`): the fields it needs and takes, the notifier class by
import path (imported only when a notice is sent, so a DAG file imports no provider) and the
arguments the notice fills in. ``options`` go to that class as they are: extra keyword arguments
of the kind's notifier (``at_mobiles`` for DingTalk, ``from_email`` for e-mail), or everything a
``class`` notifier takes.
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aliyun_training.notifications.events import Notice, NotifyEvent
from aliyun_training.notifications.messages import dingtalk_markdown, email_html, slack_text
from aliyun_training.validation import SpecError, field_fix

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow.sdk.bases.notifier import BaseNotifier

NotifierKind = Literal["dingtalk", "slack", "email", "class"]

#: The spec's fields that belong to some kinds only (``kind``, ``events`` and ``options`` belong to all).
_KIND_FIELDS = ("conn_id", "channel", "to", "class_path")


class NotifierSetupError(SpecError):
    """A declared notifier cannot be built: its provider is missing, its class is not a notifier or
    does not take its options. Retrying cannot fix it; the message names the field and the fix."""


@dataclass(frozen=True)
class _KindRecord:
    """One kind of notifier: what its spec needs and takes, and the notifier it builds."""

    #: Each spec field the kind needs, with the fix for its absence.
    needs: dict[str, str]
    #: The spec fields it takes (those it needs and the optional ones).
    takes: frozenset[str]
    #: The notifier class as ``module:Class``; None: the spec's ``class_path``.
    notifier: str | None
    #: The distribution that provides the notifier, which an ImportError asks to install.
    provider: str | None
    #: ``(spec, notice) -> arguments`` the kind's notifier gets besides ``options``.
    arguments: Callable[[NotifierSpec, Notice], dict[str, Any]]
    #: The arguments ``arguments`` sets, which ``options`` may not set again.
    from_notice: frozenset[str]


def _dingtalk(spec: NotifierSpec, notice: Notice) -> dict[str, Any]:
    return {"dingding_conn_id": spec.conn_id, "title": notice.title, "text": dingtalk_markdown(notice)}


def _slack(spec: NotifierSpec, notice: Notice) -> dict[str, Any]:
    return {"slack_conn_id": spec.conn_id, "channel": spec.channel, "text": slack_text(notice)}


def _email(spec: NotifierSpec, notice: Notice) -> dict[str, Any]:
    # SmtpNotifier falls back to [email] email_conn_id (smtp_default) when smtp_conn_id is None.
    return {
        "to": list(spec.to),
        "smtp_conn_id": spec.conn_id,
        "subject": notice.title,
        "html_content": email_html(notice),
    }


def _class(spec: NotifierSpec, notice: Notice) -> dict[str, Any]:
    return {}


_KINDS: dict[str, _KindRecord] = {
    "dingtalk": _KindRecord(
        needs={"conn_id": "name the dingding connection of the group's robot, e.g. conn_id: dingtalk_ml"},
        takes=frozenset({"conn_id"}),
        notifier="aliyun_training.notifications.dingtalk:DingTalkNotifier",
        provider="apache-airflow-providers-dingding",
        arguments=_dingtalk,
        from_notice=frozenset({"dingding_conn_id", "title", "text"}),
    ),
    "slack": _KindRecord(
        needs={
            "conn_id": "name a slack_api connection, e.g. conn_id: slack_api_default",
            "channel": "name the channel, e.g. channel: '#ml-training'",
        },
        takes=frozenset({"conn_id", "channel"}),
        notifier="airflow.providers.slack.notifications.slack:SlackNotifier",
        provider="apache-airflow-providers-slack",
        arguments=_slack,
        from_notice=frozenset({"slack_conn_id", "channel", "text"}),
    ),
    "email": _KindRecord(
        needs={"to": "list the addresses, e.g. to: [ml-team@example.com]"},
        takes=frozenset({"to", "conn_id"}),
        notifier="airflow.providers.smtp.notifications.smtp:SmtpNotifier",
        provider="apache-airflow-providers-smtp",
        arguments=_email,
        from_notice=frozenset({"to", "smtp_conn_id", "subject", "html_content"}),
    ),
    "class": _KindRecord(
        needs={
            "class_path": "give the import path of a BaseNotifier subclass, "
            "e.g. class_path: my_company.notifiers.PagerNotifier"
        },
        takes=frozenset({"class_path"}),
        notifier=None,
        provider=None,
        arguments=_class,
        from_notice=frozenset(),
    ),
}


class NotifierSpec(BaseModel):
    """One entry of a declaration's ``notifications:`` list: a kind of notifier, the events it is
    sent, and its settings. Fields that belong to another kind are refused, naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: NotifierKind
    events: Annotated[
        list[NotifyEvent],
        Field(
            min_length=1,
            json_schema_extra=field_fix(
                f"list events from {', '.join(NotifyEvent)}, or leave events out for all of them"
            ),
        ),
    ] = Field(default_factory=lambda: list(NotifyEvent))
    #: dingtalk: a dingding connection; slack: a slack_api connection; email: an smtp connection.
    conn_id: Annotated[
        str | None,
        Field(
            pattern=r"^[A-Za-z0-9_.-]+$",
            json_schema_extra=field_fix("name an Airflow connection, e.g. dingtalk_ml"),
        ),
    ] = None
    #: slack: the channel.
    channel: Annotated[
        str | None, Field(min_length=1, json_schema_extra=field_fix("name the channel, e.g. '#ml-training'"))
    ] = None
    #: email: the addresses.
    to: Annotated[
        list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]],
        Field(json_schema_extra=field_fix("write addresses, e.g. to: [ml-team@example.com]")),
    ] = Field(default_factory=list)
    #: class: the import path of a BaseNotifier subclass (checked when a notice is sent).
    class_path: Annotated[
        str | None,
        Field(
            pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$",
            json_schema_extra=field_fix("a dotted import path, e.g. my_company.notifiers.PagerNotifier"),
        ),
    ] = None
    #: Keyword arguments of the kind's notifier, besides those the notice sets.
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> NotifierSpec:
        record = _KINDS[self.kind]
        problems = [
            f"{field}: kind {self.kind} takes no {field} "
            f"(fix: remove it; kind {self.kind} takes {', '.join(sorted(record.takes))})"
            for field in _KIND_FIELDS
            if getattr(self, field) and field not in record.takes
        ]
        problems += [
            f"{field}: kind {self.kind} needs it (fix: {fix})"
            for field, fix in record.needs.items()
            if not getattr(self, field)
        ]
        problems += [
            f"options.{name}: the notice sets it (fix: remove it from options)"
            for name in sorted(record.from_notice & self.options.keys())
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def build(self, notice: Notice) -> BaseNotifier:
        """The Airflow notifier that sends ``notice`` as this spec says; NotifierSetupError naming
        the field and the fix when its provider is missing or its class does not fit."""
        record = _KINDS[self.kind]
        path = record.notifier or str(self.class_path)
        notifier_class = _notifier_class(path, self.kind, record.provider)
        try:
            return notifier_class(**record.arguments(self, notice), **self.options)
        except TypeError as exc:
            raise NotifierSetupError(
                f"options: {path} does not take them ({exc}) (fix: give only the keyword arguments it takes)"
            ) from None


def _notifier_class(path: str, kind: str, provider: str | None) -> type[BaseNotifier]:
    """The notifier class at ``path`` (``module:Class`` or ``module.Class``), imported now."""
    from airflow.sdk.bases.notifier import BaseNotifier

    where = f"class_path: {path}" if provider is None else f"kind: {kind} ({path})"
    try:
        found = pkgutil.resolve_name(path)
    except ModuleNotFoundError as exc:
        fix = (
            f"install {provider}" if provider else "install the package that provides it, or correct the path"
        )
        raise NotifierSetupError(f"{where} cannot be imported ({exc}) (fix: {fix})") from None
    except (ImportError, AttributeError, ValueError) as exc:
        raise NotifierSetupError(f"{where} cannot be imported ({exc}) (fix: correct the path)") from None
    if not (isinstance(found, type) and issubclass(found, BaseNotifier)):
        raise NotifierSetupError(
            f"{where} is not a BaseNotifier subclass "
            "(fix: name a subclass of airflow.sdk.bases.notifier.BaseNotifier)"
        )
    return found
