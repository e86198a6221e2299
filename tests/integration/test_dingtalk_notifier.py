"""DingTalkNotifier over real HTTP (the dingding provider's hook and its requests session) against a
stand-in of DingTalk's custom robot endpoint that checks the "sign request" signature as DingTalk
documents it (docs/fidelity.md, "DingTalk robot webhook")."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from airflow.sdk._shared.secrets_masker import redact

from aliyun_training.notifications import Notice, NotifierSpec, NotifyEvent, send_notice
from aliyun_training.notifications.dingtalk import DingTalkNotifier
from aliyun_training.notifications.robot import DingTalkError
from fakes.base import ThreadedHttpServer, bound_handler

if TYPE_CHECKING:
    from collections.abc import Iterator

CONN = "dingtalk_test"
TOKEN = "8ca04016aa5f1e2d9c7b3a6e4f0d2c1b9a8e7f6d5c4b3a2e1f0d9c8b7a6e5f4d"
SECRET = "SEC7d1c2f0e9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d"
HOUR_MS = 3_600_000


class RobotStandIn(ThreadedHttpServer):
    """DingTalk's ``POST /robot/send``: the access token must be the robot's; with signing on, a
    ``timestamp`` within an hour of its clock and ``sign`` = base64(HmacSHA256(secret,
    "<timestamp>\\n<secret>")), else errcode 310000; else ``{"errcode":0,"errmsg":"ok"}``."""

    def __init__(self, token: str, secret: str | None) -> None:
        self.token = token
        self.secret = secret
        self.clock_ms = lambda: round(time.time() * 1000)
        self.received: list[dict[str, Any]] = []

    def _make_server(self) -> ThreadingHTTPServer:
        return ThreadingHTTPServer(("127.0.0.1", 0), bound_handler(_RobotHandler, robot=self))

    def answer(self, path: str, body: bytes) -> dict[str, Any]:
        url = urlsplit(path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        self.received.append({"path": url.path, "query": query, "body": json.loads(body)})
        if url.path != "/robot/send" or query.get("access_token") != self.token:
            return {"errcode": 300001, "errmsg": "token is not exist"}
        if self.secret is not None:
            timestamp = query.get("timestamp", "")
            if not timestamp.isdigit() or abs(self.clock_ms() - int(timestamp)) > HOUR_MS:
                return {"errcode": 310000, "errmsg": "invalid timestamp"}
            digest = hmac.new(
                self.secret.encode(), f"{timestamp}\n{self.secret}".encode(), hashlib.sha256
            ).digest()
            if query.get("sign") != base64.b64encode(digest).decode():
                return {"errcode": 310000, "errmsg": "sign not match"}
        return {"errcode": 0, "errmsg": "ok"}


class _RobotHandler(BaseHTTPRequestHandler):
    robot: ClassVar[RobotStandIn]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        answer = json.dumps(self.robot.answer(self.path, body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request line holds the token, and the test reads the log."""


def use_connection(monkeypatch: pytest.MonkeyPatch, host: str, secret: str | None) -> None:
    """A dingding connection: DingdingHook takes the whole base URL from the host."""
    connection: dict[str, Any] = {"conn_type": "dingding", "host": f"http://{host}", "password": TOKEN}
    if secret is not None:
        connection["extra"] = {"secret": secret}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(connection))


@pytest.fixture
def robot(monkeypatch: pytest.MonkeyPatch) -> Iterator[RobotStandIn]:
    with RobotStandIn(TOKEN, SECRET) as stand_in:
        use_connection(monkeypatch, stand_in.host_port, SECRET)
        yield stand_in


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def printed(capfd: pytest.CaptureFixture[str]) -> str:
    """What the test printed: Airflow's hooks log through structlog to the standard streams."""
    out, err = capfd.readouterr()
    return out + err


def notifier() -> DingTalkNotifier:
    return DingTalkNotifier(
        dingding_conn_id=CONN, title="cifar10_retrain failed", text="#### Failed\n\nuser_code: exit 1"
    )


def test_a_signed_markdown_message_is_taken(
    robot: RobotStandIn, debug_log: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    notifier().notify({})

    [request] = robot.received
    assert request["path"] == "/robot/send"
    assert request["query"]["access_token"] == TOKEN
    assert request["body"]["msgtype"] == "markdown"
    assert request["body"]["markdown"] == {
        "title": "cifar10_retrain failed",
        "text": "#### Failed\n\nuser_code: exit 1",
    }
    assert abs(int(request["query"]["timestamp"]) - time.time() * 1000) < 60_000
    assert "DingTalk took the markdown message" in printed(capfd)
    assert SECRET not in debug_log.text
    # Where urllib3's DEBUG line reaches the log it holds the request's URL: Airflow's masker, which
    # the hook told, hides the token there.
    assert TOKEN not in redact(debug_log.text)
    assert SECRET not in redact(f"the robot's secret is {SECRET}")


def test_a_wrong_secret_fails_naming_the_fix(
    robot: RobotStandIn,
    monkeypatch: pytest.MonkeyPatch,
    debug_log: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    wrong = "SEC0000000000000000000000000000000000000000000000000000000000000000"
    use_connection(monkeypatch, robot.host_port, wrong)

    with pytest.raises(DingTalkError) as raised:
        notifier().notify({})

    message = str(raised.value)
    assert "errcode 310000" in message and "sign not match" in message
    assert "signing secret" in message and "fix:" in message
    assert robot.received[0]["query"]["sign"], "the wrong secret still signed the request"
    assert wrong not in message and wrong not in debug_log.text + printed(capfd)
    assert TOKEN not in message


def test_an_unsigned_request_to_a_signing_robot_is_refused(
    robot: RobotStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_connection(monkeypatch, robot.host_port, secret=None)

    with pytest.raises(DingTalkError, match="errcode 310000"):
        notifier().notify({})
    assert "sign" not in robot.received[0]["query"]


def test_a_timestamp_over_an_hour_off_is_refused(robot: RobotStandIn) -> None:
    robot.clock_ms = lambda: round(time.time() * 1000) + 2 * HOUR_MS

    with pytest.raises(DingTalkError, match="invalid timestamp"):
        notifier().notify({})


def test_an_unreachable_robot_fails_without_the_token_or_signature(
    monkeypatch: pytest.MonkeyPatch, debug_log: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    stopped = RobotStandIn(TOKEN, SECRET).start()
    host = stopped.host_port
    stopped.stop()
    use_connection(monkeypatch, host, SECRET)

    with pytest.raises(DingTalkError, match="did not answer \\(ConnectionError\\)") as raised:
        notifier().notify({})

    assert TOKEN not in str(raised.value) and "sign=" not in str(raised.value)
    assert SECRET not in debug_log.text + printed(capfd)


async def test_async_notify_sends_from_a_thread(robot: RobotStandIn) -> None:
    await notifier().async_notify({})

    assert [request["body"]["markdown"]["title"] for request in robot.received] == ["cifar10_retrain failed"]


def test_a_declared_dingtalk_notifier_sends_the_notice(
    robot: RobotStandIn, debug_log: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    notice = Notice(
        event=NotifyEvent.DEADLINE_AT_RISK,
        dag_id="cifar10_retrain",
        run_id="manual__1",
        title="cifar10_retrain: deadline at risk",
        text="ETA 15:40 UTC, deadline 15:00 UTC\n42% (step 420/1000)",
        url="http://airflow.example.com/run",
    )
    specs = [
        NotifierSpec(kind="dingtalk", conn_id=CONN, events=[NotifyEvent.DEADLINE_AT_RISK]),
        NotifierSpec(kind="dingtalk", conn_id=CONN, events=[NotifyEvent.FAILED]),
    ]

    assert send_notice(notice, specs, logging.getLogger("test")) == 1

    [request] = robot.received
    assert request["body"]["markdown"] == {
        "title": "cifar10_retrain: deadline at risk",
        "text": "#### cifar10_retrain: deadline at risk\n\nETA 15:40 UTC, deadline 15:00 UTC\n\n"
        "42% (step 420/1000)\n\n[Open the run](http://airflow.example.com/run)",
    }
    assert SECRET not in debug_log.text + printed(capfd)
