"""STS 2015-04-01 emulator: AssumeRole hands out short-lived credentials other emulators accept.

Linked emulators (``sts.link(dlc)``) accept each issued AccessKeyId + SecurityToken pair, with
signatures checked against the issued secret, until the token's Expiration; after it they answer
``InvalidSecurityToken.Expired``, as the cloud does. Expiration has whole-second resolution and
the emulators enforce exactly the instant it names, so a client that trusts Expiration and the
servers agree on when a token dies.
"""

from __future__ import annotations

import math
import secrets
from typing import TYPE_CHECKING, Any

from alibabacloud_sts20150401 import models as sts_models

from fakes.base import ApiError, ApiRequest, EmulatorServer, IssuedToken, iso_utc

if TYPE_CHECKING:
    from collections.abc import Mapping

#: AssumeRole's DurationSeconds bounds and default (the upper bound is the role's maximum session).
MIN_DURATION_SECONDS = 900
MAX_DURATION_SECONDS = 43200
DEFAULT_DURATION_SECONDS = 3600


class StsEmulator(EmulatorServer):
    """STS: AssumeRole over RPC (POST / with query parameters, action in ``x-acs-action``)."""

    api_version = "2015-04-01"

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        token_ttl_seconds: float | None = None,
        account_id: str = "1234567890123456",
    ) -> None:
        """``token_ttl_seconds`` overrides the requested DurationSeconds (short tokens in tests)."""
        super().__init__(access_keys)
        self.token_ttl_seconds = token_ttl_seconds
        self.account_id = account_id
        self.assumed = 0
        self.issued: dict[str, IssuedToken] = {}
        self._linked: list[EmulatorServer] = []
        self.add_rpc_action("AssumeRole", self._assume_role, sts_models.AssumeRoleResponseBody)

    def link(self, *servers: EmulatorServer) -> None:
        """Make ``servers`` accept every token this STS issued or will issue."""
        with self._lock:
            self._linked.extend(servers)
            for token, issued in self.issued.items():
                for server in servers:
                    server.issue_security_token(token, issued)

    def _assume_role(self, request: ApiRequest) -> dict[str, Any]:
        params = {**request.query, **(request.body if isinstance(request.body, dict) else {})}
        role_arn, session_name = params.get("RoleArn"), params.get("RoleSessionName")
        if not role_arn:
            raise ApiError(400, "MissingRoleArn", "RoleArn is mandatory for this action.")
        if not session_name:
            raise ApiError(400, "MissingRoleSessionName", "RoleSessionName is mandatory for this action.")
        ttl = self.token_ttl_seconds if self.token_ttl_seconds is not None else _duration(params)
        self.assumed += 1
        token = f"token-{self.assumed}"
        issued = IssuedToken(
            access_key_id=f"STS.{secrets.token_hex(12)}",
            access_key_secret=secrets.token_urlsafe(24),
            expires_at=math.ceil(self.clock() + ttl),
        )
        self._issue(token, issued)
        role_id = str(10**18 + self.assumed)
        return {
            "AssumedRoleUser": {
                "Arn": f"{role_arn.replace(':role/', ':assumed-role/')}/{session_name}",
                "AssumedRoleId": f"{role_id}:{session_name}",
            },
            "Credentials": {
                "AccessKeyId": issued.access_key_id,
                "AccessKeySecret": issued.access_key_secret,
                "SecurityToken": token,
                "Expiration": iso_utc(issued.expires_at),
            },
        }

    def _issue(self, token: str, issued: IssuedToken) -> None:
        self.issued[token] = issued
        for server in [self, *self._linked]:
            server.issue_security_token(token, issued)


def _duration(params: dict[str, str]) -> int:
    """The requested session length, within the bounds AssumeRole enforces."""
    try:
        seconds = int(params.get("DurationSeconds", DEFAULT_DURATION_SECONDS))
    except ValueError as exc:
        raise ApiError(
            400, "InvalidParameter.DurationSeconds", "DurationSeconds must be an integer."
        ) from exc
    if not MIN_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        raise ApiError(
            400,
            "InvalidParameter.DurationSeconds",
            f"The Min/Max value of DurationSeconds is {MIN_DURATION_SECONDS}/{MAX_DURATION_SECONDS} seconds.",
        )
    return seconds
