"""DingTalk's custom robot webhook, signed: the maintained dingding provider's hook (its connection
type, its session, its message body) with the signature a robot's "sign request" (加签) security
setting asks for, a timeout, and errors that name the fix.

DingTalk's rule (docs/fidelity.md, "DingTalk robot webhook"): with signing on, each request carries
``timestamp`` (milliseconds) and ``sign`` = urlEncode(base64(HmacSHA256(key=secret,
msg=f"{timestamp}\\n{secret}"))) as query parameters beside ``access_token``, and DingTalk refuses
a timestamp more than an hour from its clock. The provider's hook sends the access token only, so
a robot with signing on refuses every message it sends.

The webhook's URL holds the access token and the signature, so nothing here puts the URL in a log
line or an error: a transport error is re-raised with its type and the host only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import urlencode

import requests
from airflow.providers.dingding.hooks.dingding import DingdingHook

#: Seconds to connect and then to read DingTalk's answer: a notice must not hold a task or a
#: trigger's thread for long when DingTalk does not answer.
SEND_TIMEOUT_SECONDS = 10.0
#: DingTalk's answer when the robot's security settings refuse a message (a signature that does
#: not match, a timestamp over an hour off, a missing keyword, an address not on its list).
SECURITY_REFUSAL = 310000


class DingTalkError(RuntimeError):
    """DingTalk did not take the message; the text says why and what to fix, never the secret."""


def robot_signature(secret: str, timestamp_ms: int) -> dict[str, str]:
    """The ``timestamp`` and ``sign`` query parameters of a signed request (``sign`` before the URL
    encoding, which urlencode then applies)."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return {"timestamp": str(timestamp_ms), "sign": base64.b64encode(digest).decode()}


class SignedDingdingHook(DingdingHook):
    """``DingdingHook`` whose webhook is signed when the connection's extra has ``secret``.

    The connection stays the provider's: conn type ``dingding``, the robot's access token in the
    password, the host (default ``https://oapi.dingtalk.com``) and ``{"secret": "SEC..."}`` in the
    extra when the robot signs. Both token and secret are registered with Airflow's secret masker.
    """

    def _get_endpoint(self) -> str:
        from airflow.sdk.log import mask_secret

        connection = self.get_connection(self.http_conn_id)
        token = connection.password
        if not token:
            raise DingTalkError(
                f"the {self.http_conn_id} connection has no robot access token (fix: put the "
                "access_token of the robot's webhook URL in the connection's password)"
            )
        mask_secret(token, "dingtalk_access_token")
        query = {"access_token": token}
        secret = connection.extra_dejson.get("secret")
        if secret:
            mask_secret(secret, "dingtalk_secret")
            query |= robot_signature(str(secret), round(time.time() * 1000))
        return f"robot/send?{urlencode(query)}"

    def send(self) -> None:
        """Post the message once; DingTalkError when DingTalk cannot be reached or refuses it."""
        session = self.get_conn(headers={"Content-Type": "application/json"})
        url = self.url_from_endpoint(self._get_endpoint())
        try:
            response = session.post(url, data=self._build_message().encode(), timeout=SEND_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            # Its text repeats the URL, and with it the token and signature.
            raise DingTalkError(
                f"DingTalk at {self.base_url} did not answer ({type(exc).__name__}) "
                "(fix: check the connection's host and that this machine reaches it)"
            ) from None
        if not response.ok:
            raise DingTalkError(
                f"DingTalk at {self.base_url} answered HTTP {response.status_code} {response.reason} "
                "(fix: check the connection's host)"
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {}
        code = answer.get("errcode")
        if code != 0:
            raise DingTalkError(
                f"DingTalk refused the message: errcode {code}, {answer.get('errmsg')!r} (fix: {_fix(code)})"
            )
        self.log.info("DingTalk took the %s message", self.message_type)


def _fix(code: object) -> str:
    if code == SECURITY_REFUSAL:
        return (
            "the robot's security settings refused it: give the connection's extra the robot's signing "
            'secret, {"secret": "SEC..."}, keep this machine\'s clock within an hour of the real time, '
            "and check the robot's keywords and allowed addresses"
        )
    return "check the robot's access token (the connection's password) and that the robot still exists"
