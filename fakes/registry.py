"""A Docker Registry HTTP API v2 emulator with token (or Basic) authentication, on 127.0.0.1.

Enough of the distribution spec and Docker's token authentication for "does this tag exist":

- ``GET /v2/``: the API version check (200 when authorized, else 401 with the challenge);
- ``HEAD`` / ``GET /v2/<name>/manifests/<tag|digest>``: 200 with ``Docker-Content-Digest``,
  ``Content-Type`` and ``Content-Length`` (GET also the manifest); 404 ``NAME_UNKNOWN`` for an
  unknown repository, ``MANIFEST_UNKNOWN`` for an unknown tag or digest, and for a manifest whose
  media type the ``Accept`` header does not list (no conversion here);
- ``GET /token?service=...&scope=repository:<name>:pull``: a Bearer token for the scope,
  authenticated with HTTP Basic (a wrong login/password: 401 ``UNAUTHORIZED``; no Basic header:
  an anonymous token granting only repositories in ``anonymous_pull``). The answer has ``token``
  and ``access_token``, ``expires_in`` and ``issued_at`` like Docker Hub's.

``auth`` selects the scheme: ``"bearer"`` (401 with ``WWW-Authenticate: Bearer realm=...,
service=...,scope=...``; ``error="insufficient_scope"`` when a token lacks the scope),
``"basic"`` (401 with ``WWW-Authenticate: Basic realm=...``, credentials checked on every
request) or ``"none"``. ``pull_allowed`` limits which repositories a user's token may pull.
Errors are the spec's JSON ``{"errors": [{"code", "message", "detail"}]}``
(no body on HEAD). :meth:`RegistryEmulator.fail_next` answers the next requests with a 5xx;
``omit_digest_header`` leaves ``Docker-Content-Digest`` out as some registries do on HEAD.

The token spec lets a registry name any URL as its realm (Docker Hub's is another host,
``https://auth.docker.io/token``), so ``realm`` names another one, e.g. a second emulator standing
for a foreign token service; ``token_redirect`` makes ``/token`` answer ``307 Temporary Redirect``
to a URL (RFC 9110 §15.4.8), as a token service behind a moved address would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from fakes.base import ThreadedHttpServer, bound_handler

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SERVICE = "registry.emulated"
_MANIFEST_PATH = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<reference>[^/]+)$")


@dataclass(frozen=True)
class StoredManifest:
    content: bytes
    media_type: str
    digest: str


@dataclass(frozen=True)
class RecordedCall:
    """One request: which endpoint, the method, and how it was authenticated."""

    endpoint: str  # ping, token, manifest, other
    method: str
    path: str
    auth: str  # "", "basic", "bearer"
    accept: str
    status: int


class RegistryEmulator(ThreadedHttpServer):
    """Registry v2 + token service in one threaded HTTP server."""

    not_started_message: ClassVar[str] = "the registry is not started"

    def __init__(
        self,
        users: dict[str, str] | None = None,
        auth: str = "bearer",
        anonymous_pull: frozenset[str] = frozenset(),
        omit_digest_header: bool = False,
        pull_allowed: dict[str, set[str]] | None = None,
        realm: str | None = None,
        token_redirect: str | None = None,
    ) -> None:
        if auth not in ("bearer", "basic", "none"):
            raise ValueError("auth is bearer, basic or none")
        self.users = dict(users or {})
        self.auth = auth
        self.anonymous_pull = set(anonymous_pull)
        self.omit_digest_header = omit_digest_header
        #: login -> repositories it may pull (None: every user may pull every repository).
        self.pull_allowed = pull_allowed
        #: The token realm the challenge names (None: this server's own ``/token``).
        self.realm = realm
        #: Where ``/token`` redirects to (None: it answers tokens itself).
        self.token_redirect = token_redirect
        self.calls: list[RecordedCall] = []
        self.counts: Counter[str] = Counter()
        self._manifests: dict[str, dict[str, StoredManifest]] = {}
        self._tokens: dict[str, tuple[str, frozenset[str]]] = {}
        self._failures: list[int] = []
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------- lifecycle

    def _make_server(self) -> ThreadingHTTPServer:
        """A free port on 127.0.0.1, answered by the registry handler."""
        return ThreadingHTTPServer(("127.0.0.1", 0), bound_handler(_Handler, registry=self))

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: the registry part of image references."""
        return self.host_port

    # ----------------------------------------------------------------------------- setup

    def put_manifest(
        self, name: str, tag: str, digest: str | None = None, media_type: str = DOCKER_MANIFEST
    ) -> str:
        """Store a manifest under ``name:tag`` (and its digest); return the digest."""
        content = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": media_type,
                "config": {"digest": f"sha256:{'0' * 64}"},
                "tag": tag,
            }
        ).encode()
        stored = StoredManifest(
            content, media_type, digest or "sha256:" + hashlib.sha256(content).hexdigest()
        )
        with self._lock:
            repo = self._manifests.setdefault(name, {})
            repo[tag] = stored
            repo[stored.digest] = stored
        return stored.digest

    def fail_next(self, count: int = 1, status: int = 503) -> None:
        """Answer the next ``count`` requests with ``status``."""
        with self._lock:
            self._failures += [status] * count

    def count(self, endpoint: str, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c.endpoint == endpoint and method in (None, c.method))

    # ----------------------------------------------------------------------------- serving

    def serve(self, method: str, target: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(target)
        path = url.path
        endpoint = "ping" if path in ("/v2/", "/v2") else "token" if path == "/token" else "other"
        match = _MANIFEST_PATH.match(path)
        if match:
            endpoint = "manifest"
        authorization = headers.get("authorization", "")
        with self._lock:
            if self._failures:
                result: tuple[int, dict[str, str], bytes] = _error(
                    "UNAVAILABLE", "service unavailable", self._failures.pop(0)
                )
            elif endpoint == "token" and self.token_redirect:
                result = 307, {"Location": self.token_redirect}, b""
            elif endpoint == "token":
                result = self._token(parse_qs(url.query), authorization)
            elif endpoint == "ping":
                result = self._authorized(authorization, None) or (200, {}, b"{}")
            elif match:
                result = self._manifest(method, match["name"], match["reference"], headers, authorization)
            else:
                result = _error("UNSUPPORTED", "not emulated", 404)
            self.counts[endpoint] += 1
            self.calls.append(
                RecordedCall(
                    endpoint,
                    method,
                    path,
                    authorization.split(" ", 1)[0].lower(),
                    headers.get("accept", ""),
                    result[0],
                )
            )
        return result

    def _realm(self) -> str:
        return self.realm or f"http://{self.host}/token"

    def _challenge(self, name: str | None, error: str = "") -> dict[str, str]:
        if self.auth == "basic":
            return {"WWW-Authenticate": 'Basic realm="Registry Realm"'}
        value = f'Bearer realm="{self._realm()}",service="{SERVICE}"'
        if name is not None:
            value += f',scope="repository:{name}:pull"'
        if error:
            value += f',error="{error}"'
        return {"WWW-Authenticate": value}

    def _authorized(self, authorization: str, name: str | None) -> tuple[int, dict[str, str], bytes] | None:
        """None when the request may read ``name`` (the registry when None), else the 401 answer."""
        if self.auth == "none":
            return None
        scheme, _, value = authorization.partition(" ")
        if self.auth == "basic":
            if scheme.lower() == "basic" and self._user(value) is not None:
                return None
            return _unauthorized(self._challenge(name))
        if scheme.lower() != "bearer" or value not in self._tokens:
            return _unauthorized(self._challenge(name))
        _, scopes = self._tokens[value]
        if name is not None and name not in scopes:
            return _unauthorized(self._challenge(name, "insufficient_scope"))
        return None

    def _user(self, basic_value: str) -> str | None:
        try:
            login, _, password = base64.b64decode(basic_value).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return login if login in self.users and secrets.compare_digest(self.users[login], password) else None

    def _token(self, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, str], bytes]:
        if query.get("service", [""])[0] != SERVICE:
            return _error("DENIED", "unknown service", 400)
        user = None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "basic":
            user = self._user(value)
            if user is None:
                return _error("UNAUTHORIZED", "authentication required", 401)
        granted = set()
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            if kind == "repository" and "pull" in actions.split(",") and self._may_pull(user, name):
                granted.add(name)
        token = secrets.token_hex(16)
        self._tokens[token] = (user or "", frozenset(granted))
        body = {"token": token, "access_token": token, "expires_in": 300, "issued_at": _now()}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def _may_pull(self, user: str | None, name: str) -> bool:
        if user is None:
            return name in self.anonymous_pull
        return self.pull_allowed is None or name in self.pull_allowed.get(user, set())

    def _manifest(
        self, method: str, name: str, reference: str, headers: dict[str, str], authorization: str
    ) -> tuple[int, dict[str, str], bytes]:
        denied = self._authorized(authorization, name)
        if denied is not None:
            return denied
        if method not in ("HEAD", "GET"):
            return _error("UNSUPPORTED", "only HEAD and GET are emulated", 405)
        repo = self._manifests.get(name)
        if repo is None:
            return _error("NAME_UNKNOWN", f"repository name not known to registry: {name}", 404)
        stored = repo.get(reference)
        accepted = {part.split(";")[0].strip() for part in headers.get("accept", "").split(",")}
        if stored is None or stored.media_type not in accepted:
            return _error("MANIFEST_UNKNOWN", f"manifest unknown: {name}:{reference}", 404)
        answer = {"Content-Type": stored.media_type}
        if not self.omit_digest_header:
            answer["Docker-Content-Digest"] = stored.digest
        return 200, answer, stored.content


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _error(code: str, message: str, status: int) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()
    return status, {"Content-Type": "application/json"}, body


def _unauthorized(challenge: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    status, headers, body = _error("UNAUTHORIZED", "authentication required", 401)
    return status, {**headers, **challenge}, body


class _Handler(BaseHTTPRequestHandler):
    registry: ClassVar[RegistryEmulator]
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, answer, body = self.registry.serve(self.command, self.path, headers)
        self.send_response(status)
        for key, value in {"Docker-Distribution-API-Version": "registry/2.0", **answer}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are recorded on the emulator instead."""
