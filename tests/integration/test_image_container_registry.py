"""image/container_registry.py: does a tag exist, over real HTTP (requests) against the registry emulator."""

from __future__ import annotations

import base64
import json
import logging
import socket
from typing import TYPE_CHECKING

import pytest

from aliyun_training.image.container_registry import (
    MANIFEST_MEDIA_TYPES,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    image_digest,
)
from aliyun_training.validation import SpecError
from fakes.registry import OCI_INDEX, RegistryEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

CONN = "test_registry"
LOGIN = "robot$ml-pull"
PASSWORD = "s3cret-Registry-Pa55word"


def use_registry_connection(
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    login: str | None = LOGIN,
    password: str | None = PASSWORD,
    **extra: str,
) -> None:
    name, _, port = host.partition(":")
    connection = {
        "conn_type": "generic",
        "host": name,
        "port": int(port),
        "login": login,
        "password": password,
    }
    if extra:
        connection["extra"] = extra
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(connection))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryEmulator]:
    with RegistryEmulator(users={LOGIN: PASSWORD}) as emulator:
        use_registry_connection(monkeypatch, emulator.host)
        yield emulator


def assert_secret_absent(text: str) -> None:
    assert PASSWORD not in text
    assert base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()).decode() not in text


@pytest.mark.slow
def test_existing_tag_answers_its_digest_after_the_token_dance(registry):
    digest = registry.put_manifest("ml/train", "3f9a1c2b7d4e")
    assert image_digest(f"{registry.host}/ml/train:3f9a1c2b7d4e", CONN) == digest
    manifests = [c for c in registry.calls if c.endpoint == "manifest"]
    assert [(c.method, c.auth, c.status) for c in manifests] == [("HEAD", "", 401), ("HEAD", "bearer", 200)]
    assert [(c.auth, c.status) for c in registry.calls if c.endpoint == "token"] == [("basic", 200)]
    for media_type in MANIFEST_MEDIA_TYPES:
        assert media_type in manifests[-1].accept


@pytest.mark.slow
def test_manifest_list_and_digest_references_are_found(registry):
    digest = registry.put_manifest("ml/train", "multiarch", media_type=OCI_INDEX)
    assert image_digest(f"{registry.host}/ml/train:multiarch", CONN) == digest
    assert image_digest(f"{registry.host}/ml/train@{digest}", CONN) == digest


@pytest.mark.slow
def test_missing_tag_or_repository_is_none(registry):
    registry.put_manifest("ml/train", "3f9a1c2b7d4e")
    assert image_digest(f"{registry.host}/ml/train:000000000000", CONN) is None
    assert image_digest(f"{registry.host}/ml/nothing:3f9a1c2b7d4e", CONN) is None


def test_wrong_password_is_a_clear_error_without_the_password(registry, monkeypatch, caplog):
    registry.users[LOGIN] = "the-real-password-is-different"
    registry.put_manifest("ml/train", "3f9a1c2b7d4e")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RegistryAuthError) as caught:
        image_digest(f"{registry.host}/ml/train:3f9a1c2b7d4e", CONN)
    message = str(caught.value)
    assert f"connection {CONN}" in message and registry.host in message
    assert "check the connection's login and password" in message and "scope" in message
    assert caught.value.retryable is False
    for text in (
        message,
        repr(caught.value),
        caplog.text,
        str(caught.value.__cause__),
        str(caught.value.__context__),
    ):
        assert_secret_absent(text)


def test_token_without_the_scope_is_an_auth_error(registry):
    """Credentials that authenticate but may not pull the repository: 401 insufficient_scope."""
    registry.pull_allowed = {LOGIN: {"ml/other"}}
    registry.put_manifest("ml/train", "abc")
    with pytest.raises(RegistryAuthError, match=f"refused the credentials of connection {CONN}.*scope"):
        image_digest(f"{registry.host}/ml/train:abc", CONN)
    assert [(c.auth, c.status) for c in registry.calls if c.endpoint == "token"] == [("basic", 200)]


def test_anonymous_token_only_for_public_repositories(registry, monkeypatch):
    registry.anonymous_pull.add("ml/public")
    use_registry_connection(monkeypatch, registry.host, login=None, password=None)
    registry.put_manifest("ml/train", "abc")
    registry.put_manifest("ml/public", "abc")
    assert image_digest(f"{registry.host}/ml/public:abc", CONN) is not None
    with pytest.raises(RegistryAuthError, match=f"anonymous access .* connection {CONN} has no login"):
        image_digest(f"{registry.host}/ml/train:abc", CONN)


def test_anonymous_without_connection(registry):
    registry.anonymous_pull.add("ml/public")
    digest = registry.put_manifest("ml/public", "abc")
    assert image_digest(f"{registry.host}/ml/public:abc", None) == digest
    registry.put_manifest("ml/train", "abc")
    with pytest.raises(RegistryAuthError, match=r"no registry connection.*fix: set registry_conn_id"):
        image_digest(f"{registry.host}/ml/train:abc", None)


def test_basic_challenge_registry(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with RegistryEmulator(users={LOGIN: PASSWORD}, auth="basic") as registry:
        use_registry_connection(monkeypatch, registry.host)
        digest = registry.put_manifest("ml/train", "3f9a1c2b7d4e")
        assert image_digest(f"{registry.host}/ml/train:3f9a1c2b7d4e", CONN) == digest
        assert [(c.auth, c.status) for c in registry.calls] == [("", 401), ("basic", 200)]
        assert registry.count("token") == 0
        registry.users[LOGIN] = "changed"
        with pytest.raises(
            RegistryAuthError, match=f"refused the credentials of connection {CONN}"
        ) as caught:
            image_digest(f"{registry.host}/ml/train:3f9a1c2b7d4e", CONN)
        assert_secret_absent(str(caught.value))
    assert_secret_absent(caplog.text)


@pytest.mark.slow
def test_5xx_is_retried_then_reported_as_retryable(registry, caplog):
    digest = registry.put_manifest("ml/train", "abc")
    registry.fail_next(1, status=503)
    assert image_digest(f"{registry.host}/ml/train:abc", CONN, attempts=3) == digest
    registry.fail_next(5, status=502)
    with pytest.raises(RegistryUnavailableError) as caught:
        image_digest(f"{registry.host}/ml/train:abc", CONN, attempts=2)
    assert caught.value.retryable is True
    assert f"registry {registry.host} is unavailable" in str(caught.value) and "HTTP 502" in str(caught.value)
    assert_secret_absent(caplog.text)


def test_unreachable_registry_is_retryable(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    host = f"127.0.0.1:{port}"
    use_registry_connection(monkeypatch, host)
    with pytest.raises(
        RegistryUnavailableError, match=f"registry {host} is unavailable.*ConnectionError"
    ) as caught:
        image_digest(f"{host}/ml/train:abc", CONN, attempts=1, timeout=2)
    assert_secret_absent(str(caught.value))


def test_registry_without_digest_header_is_hashed(monkeypatch):
    with RegistryEmulator(users={LOGIN: PASSWORD}, omit_digest_header=True) as registry:
        use_registry_connection(monkeypatch, registry.host)
        digest = registry.put_manifest("ml/train", "abc")
        assert image_digest(f"{registry.host}/ml/train:abc", CONN) == digest
        assert registry.count("manifest", "GET") == 1


def test_connection_must_be_for_the_image_registry(registry):
    with pytest.raises(
        SpecError, match=f"registry_conn_id: connection {CONN} is for registry {registry.host}"
    ):
        image_digest("other-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train:abc", CONN)
    assert registry.calls == []


def test_scheme_from_the_connection(registry, monkeypatch):
    use_registry_connection(monkeypatch, registry.host, scheme="https")
    with pytest.raises(RegistryUnavailableError, match="SSLError"):
        image_digest(f"{registry.host}/ml/train:abc", CONN, attempts=1)


@pytest.fixture
def foreign() -> Iterator[RegistryEmulator]:
    """Another server (another port: another address) standing for a token service elsewhere."""
    with RegistryEmulator(users={LOGIN: PASSWORD}) as emulator:
        yield emulator


def test_credentials_are_never_sent_to_a_plain_http_realm_on_another_address(registry, foreign):
    registry.realm = f"http://{foreign.host}/token"
    registry.put_manifest("ml/train", "abc")

    with pytest.raises(RegistryError) as caught:
        image_digest(f"{registry.host}/ml/train:abc", CONN)

    message = str(caught.value)
    assert f"names the token realm 'http://{foreign.host}/token'" in message
    assert f"plain http on another address than the registry's (http://{registry.host})" in message
    assert "nothing was sent to it" in message and "fix: serve the registry's token service" in message
    assert caught.value.retryable is False
    assert foreign.calls == [], "the foreign realm received a request"
    assert [(c.endpoint, c.auth) for c in registry.calls] == [("manifest", "")]
    assert_secret_absent(message)


def test_a_realm_that_is_not_an_http_url_is_refused_before_any_request(registry):
    registry.realm = "ftp://tokens.example.com/token"
    registry.put_manifest("ml/train", "abc")

    with pytest.raises(RegistryError) as caught:
        image_digest(f"{registry.host}/ml/train:abc", CONN)

    assert "'ftp://tokens.example.com/token', which credentials are never sent" in str(caught.value)
    assert "it is not an http(s) URL" in str(caught.value)
    assert registry.count("token") == 0


def test_an_https_realm_on_another_host_is_used(registry, foreign):
    """Over https the realm may be anywhere (Docker Hub's is auth.docker.io): the check goes there.

    The emulator speaks plain http, so the TLS handshake fails before any header is sent.
    """
    registry.realm = f"https://{foreign.host}/token"
    registry.put_manifest("ml/train", "abc")

    with pytest.raises(RegistryUnavailableError, match=f"GET https://{foreign.host}/token failed.*SSLError"):
        image_digest(f"{registry.host}/ml/train:abc", CONN, attempts=1)
    assert foreign.calls == []


def test_the_token_request_with_credentials_does_not_follow_a_redirect(registry, foreign):
    registry.token_redirect = f"http://{foreign.host}/token"
    registry.put_manifest("ml/train", "abc")

    with pytest.raises(RegistryError) as caught:
        image_digest(f"{registry.host}/ml/train:abc", CONN)

    message = str(caught.value)
    assert f"GET http://{registry.host}/token redirected to http://{foreign.host}/token" in message
    assert "credentials never follow a redirect" in message
    assert foreign.calls == [], "the redirect was followed"
    assert [(c.auth, c.status) for c in registry.calls if c.endpoint == "token"] == [("basic", 307)]
    assert_secret_absent(message)


@pytest.mark.parametrize(
    "reference",
    [
        "ml/train:abc",
        "registry.example.com/ML/train:abc",
        "registry.example.com/ml/train:bad tag",
        "registry.example.com/ml/train:abc\n",
        "registry.example.com/ml/train\n:abc",
        "registry.example.com/ml/train@sha256:" + "a" * 64 + "\n",
    ],
)
def test_bad_references_are_spec_errors(reference):
    with pytest.raises(SpecError, match="image: "):
        image_digest(reference, None)
