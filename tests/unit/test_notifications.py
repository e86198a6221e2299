"""notifications: what a declared notifier may say (each kind's fields), which notices it is sent,
what it is built into, and that one notifier failing does not stop the others."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from airflow.sdk.bases.notifier import BaseNotifier

from aliyun_training.notifications import (
    Notice,
    NotifierSetupError,
    NotifierSpec,
    NotifyEvent,
    asend_notice,
    send_notice,
)
from aliyun_training.validation import SpecError, validate_record

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

NOTICE = Notice(
    event=NotifyEvent.FAILED,
    dag_id="cifar10_retrain",
    run_id="manual__2026-12-07",
    title="cifar10_retrain failed: user_code",
    text="The job exited 1 on node 0.\nAction: fix the code, then clear the train task.",
    url="http://airflow.example.com/run?a=1&b=2",
)


class RecordingNotifier(BaseNotifier):
    """A notifier class a pipeline could name: records the contexts it is sent with."""

    template_fields = ("prefix",)
    sent: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, prefix: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prefix = prefix

    def notify(self, context: Context) -> None:
        type(self).sent.append((self.prefix, dict(context)))


class FailingNotifier(BaseNotifier):
    """A notifier whose service is down."""

    def notify(self, context: Context) -> None:
        raise ConnectionError("chat.example.com refused the connection")


class NotANotifier:
    pass


def path(cls: type) -> str:
    """The class's import path as a pipeline writes it (this test module, as pytest imported it)."""
    return f"{__name__}.{cls.__name__}"


@pytest.fixture(autouse=True)
def nothing_sent() -> None:
    RecordingNotifier.sent.clear()


def spec_error(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as raised:
        validate_record(NotifierSpec, data)
    return str(raised.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "dingtalk"}, "conn_id: kind dingtalk needs it (fix: name the dingding connection"),
        ({"kind": "slack", "conn_id": "slack_api_default"}, "channel: kind slack needs it (fix: name"),
        ({"kind": "slack", "channel": "#ml"}, "conn_id: kind slack needs it (fix: name a slack_api"),
        ({"kind": "email"}, "to: kind email needs it (fix: list the addresses"),
        ({"kind": "class"}, "class_path: kind class needs it (fix: give the import path"),
        (
            {"kind": "dingtalk", "conn_id": "d", "channel": "#ml"},
            "channel: kind dingtalk takes no channel (fix: remove it; kind dingtalk takes",
        ),
        (
            {"kind": "class", "class_path": "a.B", "to": ["x@example.com"]},
            "to: kind class takes no to (fix: remove it",
        ),
        (
            {"kind": "email", "to": ["x@example.com"], "options": {"subject": "mine"}},
            "options.subject: the notice sets it (fix: remove it from options)",
        ),
        ({"kind": "email", "to": ["not-an-address"]}, "to.0: String should match pattern"),
        ({"kind": "class", "class_path": "NoDots"}, "class_path: String should match pattern"),
        ({"kind": "dingtalk", "conn_id": "d", "events": ["exploded"]}, "events.0: Input should be 'failed'"),
        ({"kind": "dingtalk", "conn_id": "d", "events": []}, "or leave events out for all of them"),
        ({"kind": "pager"}, "kind: Input should be 'dingtalk', 'slack', 'email' or 'class'"),
        ({"kind": "dingtalk", "conn_id": "d", "webhook": "x"}, "webhook: Extra inputs are not permitted"),
    ],
)
def test_a_spec_error_names_the_field_and_the_fix(data: dict[str, Any], expected: str) -> None:
    message = spec_error(data)

    assert expected in message
    assert "fix:" in message


def test_every_problem_of_a_spec_is_named_at_once() -> None:
    message = spec_error({"kind": "email", "channel": "#ml", "class_path": "a.B"})

    for field in (
        "channel: kind email takes no",
        "class_path: kind email takes no",
        "to: kind email needs it",
    ):
        assert field in message


def test_a_spec_wants_every_event_unless_it_names_some() -> None:
    assert NotifierSpec(kind="dingtalk", conn_id="d").events == list(NotifyEvent)
    assert NotifierSpec(kind="dingtalk", conn_id="d", events=["failed"]).events == [NotifyEvent.FAILED]


def test_only_the_specs_that_want_the_event_are_sent() -> None:
    specs = [
        NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"prefix": "all"}),
        NotifierSpec(
            kind="class", class_path=path(RecordingNotifier), events=["succeeded"], options={"prefix": "ok"}
        ),
        NotifierSpec(
            kind="class",
            class_path=path(RecordingNotifier),
            events=["held", "failed"],
            options={"prefix": "bad"},
        ),
    ]

    assert send_notice(NOTICE, specs, logging.getLogger("test")) == 2

    assert [prefix for prefix, _ in RecordingNotifier.sent] == ["all", "bad"]


def test_a_notifier_gets_the_notice_in_its_context_as_written() -> None:
    notice = NOTICE.model_copy(update={"text": "KeyError: '{{ params.lr }}'"})
    spec = NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"prefix": "{{ run_id }}"})

    assert send_notice(notice, [spec], logging.getLogger("test")) == 1

    [(prefix, context)] = RecordingNotifier.sent
    assert context == {
        "notice": notice.model_dump(mode="json"),
        "dag_id": "cifar10_retrain",
        "run_id": "manual__2026-12-07",
        "title": "cifar10_retrain failed: user_code",
        "text": "KeyError: '{{ params.lr }}'",
    }
    assert prefix == "{{ run_id }}", "options and the notice's words are data, never rendered templates"


def test_a_failing_notifier_is_logged_and_the_others_still_send(caplog: pytest.LogCaptureFixture) -> None:
    specs = [
        NotifierSpec(kind="class", class_path=path(FailingNotifier)),
        NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"prefix": "after"}),
        NotifierSpec(kind="class", class_path=path(NotANotifier)),
        NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"prefix": "last"}),
    ]

    with caplog.at_level(logging.WARNING, logger="test"):
        sent = send_notice(NOTICE, specs, logging.getLogger("test"))

    assert sent == 2
    assert [prefix for prefix, _ in RecordingNotifier.sent] == ["after", "last"]
    assert (
        "The class notifier did not send the failed notice of manual__2026-12-07: "
        "ConnectionError: chat.example.com refused the connection" in caplog.text
    )
    assert f"class_path: {path(NotANotifier)} is not a BaseNotifier subclass" in caplog.text


async def test_asend_notice_sends_from_a_thread() -> None:
    spec = NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"prefix": "async"})

    assert await asend_notice(NOTICE, [spec, spec], logging.getLogger("test")) == 2
    assert [prefix for prefix, _ in RecordingNotifier.sent] == ["async", "async"]


@pytest.mark.parametrize(
    ("class_path", "expected"),
    [
        (
            "no_such_package_here.Notifier",
            "(No module named 'no_such_package_here') (fix: install the package",
        ),
        (f"{__name__}.Missing", "cannot be imported"),
        (f"{__name__}.NotANotifier", "is not a BaseNotifier subclass (fix: name a subclass"),
    ],
)
def test_a_class_that_cannot_notify_is_refused_when_built(class_path: str, expected: str) -> None:
    with pytest.raises(NotifierSetupError) as raised:
        NotifierSpec(kind="class", class_path=class_path).build(NOTICE)

    assert str(raised.value).startswith(f"class_path: {class_path} ")
    assert expected in str(raised.value)


def test_options_the_class_does_not_take_are_refused_when_built() -> None:
    spec = NotifierSpec(kind="class", class_path=path(RecordingNotifier), options={"colour": "red"})

    with pytest.raises(NotifierSetupError, match=r"options: .* does not take them"):
        spec.build(NOTICE)


def test_slack_without_its_provider_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.slack", None)
    spec = NotifierSpec(kind="slack", conn_id="slack_api_default", channel="#ml")

    with pytest.raises(NotifierSetupError, match="fix: install apache-airflow-providers-slack"):
        spec.build(NOTICE)


def test_email_is_the_smtp_providers_notifier_with_the_notice_escaped() -> None:
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    spec = NotifierSpec(
        kind="email",
        to=["ml-team@example.com"],
        conn_id="smtp_ml",
        options={"from_email": "airflow@example.com"},
    )
    notifier = spec.build(NOTICE.model_copy(update={"text": "loss <nan> & worse\nsecond line"}))

    assert isinstance(notifier, SmtpNotifier)
    assert (notifier.to, notifier.smtp_conn_id, notifier.from_email) == (
        ["ml-team@example.com"],
        "smtp_ml",
        "airflow@example.com",
    )
    assert notifier.subject == "cifar10_retrain failed: user_code"
    assert notifier.html_content == (
        "<h3>cifar10_retrain failed: user_code</h3>\n<p>loss &lt;nan&gt; &amp; worse<br>second line</p>\n"
        '<p><a href="http://airflow.example.com/run?a=1&amp;b=2">Open the run</a></p>'
    )


def test_dingtalk_is_built_with_the_markdown_of_the_notice() -> None:
    from aliyun_training.notifications.dingtalk import DingTalkNotifier

    spec = NotifierSpec(kind="dingtalk", conn_id="dingtalk_ml", options={"at_all": True})
    notifier = spec.build(NOTICE)

    assert isinstance(notifier, DingTalkNotifier)
    assert (notifier.dingding_conn_id, notifier.title, notifier.at_all) == (
        "dingtalk_ml",
        "cifar10_retrain failed: user_code",
        True,
    )
    assert notifier.text == (
        "#### cifar10_retrain failed: user_code\n\nThe job exited 1 on node 0.\n\n"
        "Action: fix the code, then clear the train task.\n\n"
        "[Open the run](http://airflow.example.com/run?a=1&b=2)"
    )


def test_importing_the_package_imports_no_provider_or_http_client() -> None:
    import subprocess

    code = (
        "import sys, aliyun_training.notifications; "
        "print(sorted(m for m in sys.modules if m.startswith(('airflow', 'requests', 'httpx'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "[]"
