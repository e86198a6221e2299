"""A container registry over an Airflow connection: the Docker Registry HTTP API v2 client.

:meth:`ContainerRegistryHook.manifest_digest` answers the digest of ``host/namespace/repo:tag`` (or
``...@sha256:...``), or None when the registry does not have it, in one HEAD request;
:meth:`ContainerRegistryHook.login` is the connection's registry and credentials, as a DLC job's
ImageConfig takes them.

Protocol (distribution spec / Docker token auth):

- ``HEAD /v2/<name>/manifests/<tag>`` with ``Accept`` for the OCI image index, OCI manifest,
  Docker manifest list and Docker v2 manifest; the answer's ``Docker-Content-Digest`` is the
  digest (when a registry leaves it out, the manifest is fetched with GET and hashed). 404 means
  the tag or the repository is unknown (MANIFEST_UNKNOWN / NAME_UNKNOWN): None.
- The first request is anonymous. A 401 carries ``WWW-Authenticate``: for ``Bearer
  realm=...,service=...,scope=...`` a token is fetched from the realm (GET with ``service`` and
  ``scope``; HTTP Basic with the connection's login/password when there is one) and the HEAD is
  repeated with ``Authorization: Bearer <token>``; for ``Basic`` the HEAD is repeated with HTTP
  Basic. ACR (personal and Enterprise) uses the Bearer flow; its login/password are the registry
  login credentials of the instance (a fixed password or a temporary token).
- A registry names its token realm itself, so a compromised or misconfigured one could name any
  URL. The realm is contacted only over https, or over http when it is the http registry's own
  ``host:port`` (a local test registry, an in-VPC mirror); any other realm fails the check before
  anything is sent to it. A request that carries credentials (Basic to the realm, the Bearer
  token to the registry) never follows a redirect: a 3xx answer to it is an error naming where
  it pointed.

The connection (``registry_conn_id``): ``host`` is the registry (``host[:port]``, no path; it must
be the reference's registry, so credentials are never sent to another registry), ``login`` and
``password`` its credentials, ``port`` optional. Scheme: ``https``, unless the connection's
``schema`` (or its extra ``scheme``) says ``http``; a registry on ``localhost`` / ``127.0.0.1`` /
``::1`` defaults to ``http`` (local test registries), and no other host ever does by default.

The password is registered with Airflow's secret masker as soon as it is read, and never put into
a log line or an exception message. Errors: :class:`RegistryUnavailableError` (unreachable, a
timeout, a 5xx or 429 after ``attempts`` tries; ``retryable = True``) names the registry;
:class:`RegistryAuthError` (401/403 after authenticating) names the connection and the fix.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook

from aliyun_training.connections import REGISTRY_DEFAULT_CONN_ID
from aliyun_training.validation import SpecError

log = logging.getLogger(__name__)

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
DEFAULT_TIMEOUT = 10.0
DEFAULT_ATTEMPTS = 3
_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|([^,\s]*))')
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[A-Fa-f0-9]{32,}$")
_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


class RegistryError(RuntimeError):
    """The registry could not say whether the image exists."""

    retryable = False

    def __init__(self, registry: str, message: str) -> None:
        self.registry = registry
        super().__init__(message)


class RegistryUnavailableError(RegistryError):
    """Unreachable, timed out, or a 5xx/429: worth retrying later."""

    retryable = True


class RegistryAuthError(RegistryError):
    """The registry refused the credentials (or the anonymous request)."""


@dataclass(frozen=True)
class ImageReference:
    """``registry/name:tag`` or ``registry/name@digest``, split."""

    registry: str
    name: str
    reference: str  # the tag or the digest

    @classmethod
    def parse(cls, reference: str) -> ImageReference:
        head, at, digest = reference.partition("@")
        registry, slash, rest = head.partition("/")
        if not slash or not ("." in registry or ":" in registry or registry in LOCAL_HOSTS):
            raise SpecError(
                f"image: {reference!r} names no registry (fix: give host/namespace/repo:tag, e.g. "
                "myinst-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train:abc123)"
            )
        if at:
            name, ref = rest, digest
            valid = bool(_DIGEST.fullmatch(ref))
        else:
            name, colon, ref = rest.rpartition(":")
            if not colon or "/" in ref:
                name, ref = rest, ""
            valid = bool(_TAG.fullmatch(ref))
        if not valid or not _NAME.fullmatch(name):
            raise SpecError(
                f"image: {reference!r} is not a valid image reference "
                "(fix: host/namespace/repo:tag with a lower-case repository and a tag of letters, "
                "digits, _ . -)"
            )
        return cls(registry, name, ref)


@dataclass(frozen=True)
class RegistryLogin:
    """A registry connection: ``host[:port]`` (no scheme, no path), its credentials, its scheme."""

    conn_id: str
    host: str
    login: str | None
    password: str | None = field(repr=False)
    #: The connection's extra ``scheme`` or its ``schema``; None when it names neither.
    scheme: str | None = None


class ContainerRegistryHook(BaseHook):
    """A Docker Registry v2 (ACR personal or Enterprise, any OCI registry) over an Airflow connection.

    The connection's ``host`` is the registry, ``login`` and ``password`` its credentials;
    without a connection (``registry_conn_id=None``) every request is anonymous. Requests are
    retried by :class:`_Caller` (transport failures, 5xx, 429): the SDK retry policy classifies
    the Alibaba Cloud SDKs' errors, and a registry is plain HTTP.
    """

    conn_name_attr = "registry_conn_id"
    default_conn_name = REGISTRY_DEFAULT_CONN_ID
    conn_type = "docker"
    hook_name = "Container registry"

    def __init__(self, registry_conn_id: str | None = default_conn_name) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id

    def login(self) -> RegistryLogin | None:
        """The connection as a :class:`RegistryLogin` (the password masked as soon as it is read);
        None when the hook has no connection."""
        if not self.registry_conn_id:
            return None
        from airflow.sdk.log import mask_secret

        connection = self.get_connection(self.registry_conn_id)
        if connection.password:
            mask_secret(connection.password, "registry_password")
        host = re.sub(r"^[a-z]+://", "", (connection.host or "").strip()).rstrip("/")
        if connection.port and ":" not in host:
            host = f"{host}:{connection.port}"
        scheme = (connection.extra_dejson or {}).get("scheme") or connection.schema or None
        return RegistryLogin(
            self.registry_conn_id, host, connection.login or None, connection.password or None, scheme
        )

    def manifest_digest(
        self, ref: ImageReference, *, timeout: float = DEFAULT_TIMEOUT, attempts: int = DEFAULT_ATTEMPTS
    ) -> str | None:
        """The manifest digest (``sha256:...``) of ``ref`` in its registry, or None if absent."""
        import requests

        credentials, scheme = self._target(ref.registry)
        url = f"{scheme}://{ref.registry}/v2/{ref.name}/manifests/{ref.reference}"
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        with requests.Session() as session:
            call = _Caller(session, ref.registry, scheme, timeout, attempts, credentials)
            response = call("HEAD", url, headers=headers)
            auth: str | None = None
            if response.status_code == 401:
                auth = _authorize(call, ref, response.headers.get("WWW-Authenticate", ""), credentials)
                response = call("HEAD", url, authorization=auth, headers=headers)
            status = response.status_code
            if status == 404:
                log.info("Registry %s has no %s:%s", ref.registry, ref.name, ref.reference)
                return None
            if status in (401, 403):
                raise _auth_error(ref, credentials, status, authenticated=bool(auth))
            if status != 200:
                raise RegistryError(
                    ref.registry,
                    f"registry {ref.registry} answered HTTP {status} for {ref.name}:{ref.reference} "
                    "(fix: check that the connection's host is a Docker Registry v2 endpoint)",
                )
            digest = response.headers.get("Docker-Content-Digest")
            if not digest:
                body = call("GET", url, authorization=auth, headers=headers)
                digest = "sha256:" + hashlib.sha256(body.content).hexdigest()
            log.info("Registry %s has %s:%s at %s", ref.registry, ref.name, ref.reference, digest)
            return digest

    def _target(self, registry: str) -> tuple[RegistryLogin | None, str]:
        """The credentials for ``registry`` and the scheme to talk to it with.

        The connection must be for that registry, so credentials are never sent to another one.
        """
        local = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry.split("]")[0] + "]"
        default_scheme = "http" if local in LOCAL_HOSTS else "https"
        login = self.login()
        if login is None:
            return None, default_scheme
        if login.host != registry:
            raise SpecError(
                f"registry_conn_id: connection {login.conn_id} is for registry {login.host or '(no host)'}, "
                f"but the image is in {registry} (fix: set the connection's host to {registry}, or use that "
                "registry's connection)"
            )
        scheme = str(login.scheme or default_scheme).lower()
        if scheme not in ("http", "https"):
            raise SpecError(
                f"registry_conn_id: connection {login.conn_id} has scheme {scheme!r} (fix: leave schema "
                "empty for https, or set it to http only for a local test registry)"
            )
        return login, scheme


class _Caller:
    """One HTTP call with retries of transport failures, 5xx and 429; the password never leaks."""

    def __init__(
        self,
        session: Any,
        registry: str,
        scheme: str,
        timeout: float,
        attempts: int,
        credentials: RegistryLogin | None,
    ) -> None:
        self.session = session
        self.registry = registry
        self.scheme = scheme
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.credentials = credentials

    def __call__(self, method: str, url: str, authorization: str | None = None, **kwargs: Any) -> Any:
        """``authorization`` goes in as a requests auth object, so ``~/.netrc`` cannot replace it; a
        request carrying it follows no redirect, so it reaches only the URL that was checked."""
        import requests

        problem = ""
        for attempt in range(1, self.attempts + 1):
            try:
                response = self.session.request(
                    method,
                    url,
                    timeout=self.timeout,
                    auth=_HeaderAuth(authorization),
                    allow_redirects=authorization is None,
                    **kwargs,
                )
            except requests.RequestException as exc:
                problem = f"{type(exc).__name__}: {self._scrub(str(exc))}"
            else:
                if response.is_redirect and authorization:
                    raise RegistryError(
                        self.registry,
                        f"registry {self.registry}: {method} {_without_query(url)} redirected to "
                        f"{_without_query(response.headers.get('Location', ''))}; credentials never follow "
                        "a redirect, so it was not followed (fix: name the final URL, e.g. the "
                        "registry's token realm, in the registry's configuration)",
                    )
                if response.status_code < 500 and response.status_code != 429:
                    return response
                problem = f"HTTP {response.status_code}"
            log.warning(
                "Registry %s: %s %s failed (%s); attempt %d of %d",
                self.registry,
                method,
                _without_query(url),
                problem,
                attempt,
                self.attempts,
            )
            if attempt < self.attempts:
                time.sleep(min(2.0, 0.25 * 2 ** (attempt - 1)))
        raise RegistryUnavailableError(
            self.registry,
            f"registry {self.registry} is unavailable: {method} {_without_query(url)} failed after "
            f"{self.attempts} attempts ({problem}); retry later, or check the registry host and the "
            "network path from the worker",
        )

    def _scrub(self, text: str) -> str:
        password = self.credentials.password if self.credentials else None
        return text.replace(password, "***") if password else text


class _HeaderAuth:
    """A requests auth hook that sets a precomputed Authorization header (or none)."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def __call__(self, request: Any) -> Any:
        if self.value:
            request.headers["Authorization"] = self.value
        return request


def _authorize(call: _Caller, ref: ImageReference, challenge: str, credentials: RegistryLogin | None) -> str:
    """The Authorization header the challenge asks for (a Bearer token, or Basic)."""
    scheme, _, params_text = challenge.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _CHALLENGE_PARAM.finditer(params_text)
    }
    basic = _basic(credentials)
    if scheme.lower() == "basic":
        if basic is None:
            raise _auth_error(ref, credentials, 401, authenticated=False)
        return basic
    if scheme.lower() != "bearer" or not params.get("realm"):
        raise RegistryError(
            ref.registry,
            f"registry {ref.registry} asked for an unsupported authentication {scheme or '(none)'!r} "
            "(fix: use a Docker Registry v2 with Basic or Bearer token authentication)",
        )
    _check_realm(ref, call.scheme, params["realm"])
    query = {"scope": params.get("scope") or f"repository:{ref.name}:pull"}
    if params.get("service"):
        query["service"] = params["service"]
    response = call("GET", params["realm"], authorization=basic, params=query)
    if response.status_code in (401, 403):
        raise _auth_error(ref, credentials, response.status_code, authenticated=basic is not None)
    if response.status_code != 200:
        raise RegistryError(
            ref.registry,
            f"token service {_without_query(params['realm'])} of registry {ref.registry} answered HTTP "
            f"{response.status_code}",
        )
    try:
        body = response.json()
    except ValueError:
        body = {}
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not token:
        raise RegistryError(
            ref.registry,
            f"token service {_without_query(params['realm'])} of registry {ref.registry} answered no token",
        )
    from airflow.sdk.log import mask_secret

    mask_secret(token, "registry_token")
    return f"Bearer {token}"


def _check_realm(ref: ImageReference, scheme: str, realm: str) -> None:
    """Refuse a token realm that credentials may not be sent to: https only, or the http registry itself."""
    target = urlsplit(realm)
    if target.scheme == "https" and target.hostname:
        return
    own = _address(f"{scheme}://{ref.registry}")
    if target.scheme == "http" and own is not None and _address(realm) == own:
        return
    if target.scheme not in ("http", "https") or not target.hostname:
        why = "it is not an http(s) URL"
    else:
        why = f"it is plain http on another address than the registry's ({scheme}://{ref.registry})"
    raise RegistryError(
        ref.registry,
        f"registry {ref.registry} names the token realm {_without_query(realm)!r}, which credentials "
        f"are never sent to: {why}; nothing was sent to it (fix: serve the registry's token service "
        "over https, or from the registry's own address)",
    )


def _address(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, the port defaulted, to compare two addresses; None if malformed."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number, or out of range
        return None
    return parts.scheme, (parts.hostname or "").lower(), port


def _basic(credentials: RegistryLogin | None) -> str | None:
    """``Basic base64(login:password)`` for a connection with a login, else None (anonymous)."""
    if credentials is None or not credentials.login:
        return None
    pair = f"{credentials.login}:{credentials.password or ''}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def _auth_error(
    ref: ImageReference, credentials: RegistryLogin | None, status: int, authenticated: bool
) -> RegistryAuthError:
    what = f"{ref.registry}/{ref.name}"
    if credentials is None or not credentials.login:
        where = f"connection {credentials.conn_id} has no login" if credentials else "no registry connection"
        return RegistryAuthError(
            ref.registry,
            f"registry {ref.registry} refused anonymous access to {what} (HTTP {status}; {where}) "
            "(fix: set registry_conn_id to a connection whose host is the registry and whose login "
            "and password are its credentials)",
        )
    verb = "refused the credentials of" if authenticated else "did not accept"
    return RegistryAuthError(
        ref.registry,
        f"registry {ref.registry} {verb} connection {credentials.conn_id} (login {credentials.login}) "
        f"for {what} (HTTP {status}) (fix: check the connection's login and password — for ACR the "
        "registry login password or a current temporary token — and that they may pull "
        f"repository {ref.name}, i.e. the token's scope)",
    )


def _without_query(url: str) -> str:
    return url.split("?", 1)[0]
