"""OSS through oss2: clients, the staging source, and uploads in the other direction.

URIs and endpoints are ``oss_location``'s (rules every layer shares); this module is what uses them.

Credentials come from an ``alibabacloud_credentials`` client, the same one the ``alibaba_cloud``
connection hands every SDK (AK/SK, a fixed STS token, an assumed role renewed before expiry;
``from_connection`` takes it from ``hooks.oss.OssHook``) or, in a staging pod, the default chain
(environment variables, RRSA, the instance role). oss2 asks for them on every request, so a
renewed STS token is picked up without rebuilding the client. Only ``from_connection`` imports Airflow.

oss2 is imported inside the functions that use it: never at DAG parse time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tempfile
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aliyun_training.oss_location import oss_endpoint, parse_oss_uri
from aliyun_training.staging.sources import ChunkSink, SourceChangedError, SourceObject, with_retries
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

    from aliyun_training.hooks.oss import OssHook

log = logging.getLogger(__name__)

#: Files at least this large are uploaded in parallel parts.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
_READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class OssClientConfig:
    """How to reach OSS: endpoint URL (with scheme), region (for V4 signing) and credentials.

    ``credentials`` is anything with ``get_credential()`` returning an object with
    ``access_key_id``, ``access_key_secret`` and ``security_token`` (an alibabacloud_credentials
    client). It is never logged.
    """

    endpoint: str
    region: str
    credentials: Any
    pool_size: int = 16

    @classmethod
    def from_connection(cls, conn_id: str, pool_size: int = 16) -> OssClientConfig:
        """The ``alibaba_cloud`` connection's OSS endpoint (extra ``endpoints.oss``) and credentials."""
        from aliyun_training.hooks.oss import OssHook

        return cls.from_hook(OssHook(conn_id), pool_size)

    @classmethod
    def from_hook(cls, hook: OssHook, pool_size: int = 16) -> OssClientConfig:
        """The hook's OSS endpoint, region and credentials client (an assumed role is renewed for OSS too)."""
        return cls(hook.endpoint_url(), hook.region, hook.credential_client(), pool_size)

    @classmethod
    def from_environment(cls, endpoint: str | None, region: str, pool_size: int = 16) -> OssClientConfig:
        """The default credential chain (``ALIBABA_CLOUD_ACCESS_KEY_ID``/``_SECRET``/``SECURITY_TOKEN``,
        RRSA, the instance role), as a staging pod has it; the public endpoint of ``region`` by default."""
        from alibabacloud_credentials.client import Client as CredentialClient
        from alibabacloud_credentials.provider import (
            DefaultCredentialsProvider,
            EnvironmentVariableCredentialsProvider,
        )

        if not region:
            raise SpecError("region: OSS needs a region (fix: pass --region, e.g. cn-wulanchabu)")
        url = endpoint or f"https://{oss_endpoint(region)}"
        if "://" not in url:
            url = f"https://{url}"
        # With keys in the environment (a pod's Secret), skip the rest of the chain: its instance-role
        # provider starts a refresh scheduler that a short-lived staging process has no use for.
        provider = (
            EnvironmentVariableCredentialsProvider()
            if os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID")
            else DefaultCredentialsProvider()
        )
        return cls(url, region, CredentialClient(provider=provider), pool_size)

    def bucket(self, name: str, *, enable_crc: bool) -> Any:
        """An oss2 Bucket signed with V4; ``enable_crc`` makes oss2 check CRC64 of uploads itself."""
        import oss2

        _redact_oss2_logs()
        auth = oss2.ProviderAuthV4(_CredentialsAdapter(self.credentials))
        session = oss2.Session(pool_size=self.pool_size)
        if not urllib.request.getproxies():
            # requests re-reads every proxy variable of the environment on every request, about a
            # quarter of the client CPU of a small GET; with no proxy configured there is nothing
            # to honour. With one configured, requests keeps honouring it (and no_proxy) per request.
            session.session.trust_env = False
        return oss2.Bucket(
            auth,
            self.endpoint,
            name,
            region=self.region,
            session=session,
            enable_crc=enable_crc,
            connect_timeout=30,
        )


class _CredentialsAdapter:
    """oss2's CredentialsProvider interface over an alibabacloud_credentials client."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get_credentials(self) -> Any:
        import oss2

        credential = self._client.get_credential()
        return oss2.credentials.Credentials(
            credential.access_key_id, credential.access_key_secret, credential.security_token or ""
        )


#: The STS token and the signature in what oss2 logs at DEBUG: the ``oss2.http`` "Send request"
#: line prints the request headers as a dict (``'x-oss-security-token': '...'``, ``'authorization':
#: '...'``), ``oss2.auth`` prints the V4 canonical request (``x-oss-security-token:...``), and signed
#: URLs carry ``x-oss-security-token=...`` (``security-token=`` in V1).
_QUOTED_SECRET = re.compile(
    r"""(['"])((?:x-oss-)?security-token|authorization)\1(\s*:\s*)(['"]).*?\4""", re.I
)
_BARE_SECRET = re.compile(r"\b((?:x-oss-)?security-token)([:=])[^\s&'\",}]+", re.I)


def redact_oss_secrets(text: str) -> str:
    """``text`` with every security token and Authorization value oss2 might print replaced by ``***``."""
    text = _QUOTED_SECRET.sub(lambda m: f"{m[1]}{m[2]}{m[1]}{m[3]}{m[4]}***{m[4]}", text)
    return _BARE_SECRET.sub(r"\1\2***", text)


class _OssSecretFilter(logging.Filter):
    """Rewrites an oss2 log record without its secrets, keeping the rest of the line (the request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_oss_secrets(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


@functools.cache
def _redact_oss2_logs() -> None:
    """Put the filter on every oss2 logger, once, before the first client exists.

    A logger's filters see only records logged on that logger, not those its children pass up, so
    ``oss2.http`` and ``oss2.auth`` (all loaded by ``import oss2``) each need it. Airflow's masker
    does not run in a staging pod's CLI, and a token from the default chain is known to no masker:
    this keeps the token out of DEBUG logs wherever an OSS client runs.
    """
    secret_filter = _OssSecretFilter()
    for name in list(logging.Logger.manager.loggerDict):
        if name == "oss2" or name.startswith("oss2."):
            logging.getLogger(name).addFilter(secret_filter)


def is_transient_oss_error(exc: BaseException) -> bool:
    """Throttling, 5xx and broken connections are retried; 4xx answers are not."""
    import oss2
    import requests
    import urllib3

    if isinstance(exc, requests.exceptions.InvalidURL | requests.exceptions.InvalidSchema):
        return False  # MissingSchema is an InvalidURL: configuration, not the network
    if isinstance(exc, oss2.exceptions.InconsistentError):
        return True  # the CRC64 of what OSS stored differs from what was sent: send it again
    if isinstance(
        exc, oss2.exceptions.RequestError | requests.RequestException | urllib3.exceptions.HTTPError
    ):
        return True
    if isinstance(exc, oss2.exceptions.OssError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, ConnectionError | TimeoutError | _TruncatedRead)


class _TruncatedRead(IOError):
    """The connection ended before the requested bytes arrived."""


def iter_objects(bucket: Any, prefix: str) -> Iterator[SourceObject]:
    """The objects under ``prefix`` in key order, keys relative to it; folder markers are skipped.

    oss2's ObjectIteratorV2 follows ListObjectsV2's ``NextContinuationToken`` page after page (up to
    1000 keys a page, the most OSS answers) and retries a 5xx of a page itself.
    """
    import oss2

    for info in oss2.ObjectIteratorV2(bucket, prefix=prefix, max_keys=1000):
        key = info.key[len(prefix) :]
        if key and not (key.endswith("/") and info.size == 0):  # a folder marker holds no data
            yield SourceObject(key=key, size=info.size, etag=info.etag)


@contextlib.contextmanager
def oss_errors(uri: str, field: str, action: str, permission: str) -> Iterator[None]:
    """A missing bucket or a denied request is a setting to fix, named by ``field``: a SpecError
    (``action`` is what was done on ``uri``; ``permission`` what the identity then needs)."""
    import oss2

    try:
        yield
    except oss2.exceptions.NoSuchBucket:
        raise SpecError(
            f"{field}: bucket {parse_oss_uri(uri, field=field).bucket_name} does not exist "
            "(fix: correct the bucket name or the region of the OSS endpoint)"
        ) from None
    except oss2.exceptions.AccessDenied as exc:
        raise SpecError(
            f"{field}: {action} {uri} was denied ({exc.message}) "
            f"(fix: grant {permission} on the bucket to the connection's identity)"
        ) from None


class OssObjectSource:
    """The objects under ``oss://bucket/prefix/``, read with ``If-Match`` on the listed ETag."""

    checksum: Literal["crc64", "sha256"] = "crc64"
    ranged_reads = True

    def __init__(self, uri: str, *, config: OssClientConfig) -> None:
        self.location = parse_oss_uri(uri)
        self.uri = self.location.uri
        self._bucket = config.bucket(self.location.bucket, enable_crc=False)

    def folders(self) -> list[str]:
        import oss2

        prefix = self.location.prefix
        listing = oss2.ObjectIteratorV2(self._bucket, prefix=prefix, delimiter="/", max_keys=1000)
        with oss_errors(self.uri, "source_uri", "listing", "oss:ListObjects"):
            return sorted(info.key[len(prefix) :].rstrip("/") for info in listing if info.is_prefix())

    def list(self) -> list[SourceObject]:
        with oss_errors(self.uri, "source_uri", "listing", "oss:ListObjects and oss:GetObject"):
            objects = list(iter_objects(self._bucket, self.location.prefix))
        return sorted(objects, key=lambda o: o.key)

    def read(self, obj: SourceObject, start: int, end: int, sink: ChunkSink) -> str | None:
        import oss2

        headers = {"If-Match": f'"{obj.etag}"'}
        byte_range = (start, end - 1) if (start, end) != (0, obj.size) else None
        if byte_range:
            headers["x-oss-range-behavior"] = "standard"
        try:
            result = self._bucket.get_object(self.location.prefix + obj.key, byte_range, headers=headers)
        except (oss2.exceptions.PreconditionFailed, oss2.exceptions.NoSuchKey) as exc:
            raise SourceChangedError(obj.key, f"ETag {obj.etag}", exc.code) from None
        received = 0
        while chunk := result.read(_READ_CHUNK):
            sink(chunk)
            received += len(chunk)
        if received != end - start:
            raise _TruncatedRead(f"{obj.key}: got {received} of {end - start} bytes")
        return result.headers.get("x-oss-hash-crc64ecma")

    def is_transient(self, exc: BaseException) -> bool:
        return is_transient_oss_error(exc)


def upload_directory(
    local_dir: Path,
    target_uri: str,
    config: OssClientConfig,
    *,
    last: Iterable[str] = (),
    before_last: Callable[[], None] | None = None,
    workers: int = 8,
    attempts: int = 4,
) -> tuple[int, int]:
    """Upload every file of ``local_dir`` under ``target_uri``; return (files, bytes).

    oss2 checks each upload's CRC64 against what OSS stored. The files named in ``last`` (a
    manifest) go up only after everything else succeeded, so a reader that waits for the manifest
    never sees a partial set; ``before_last`` runs just before them and may raise to stop them
    (a publisher checks it still holds its lock there).
    """
    from concurrent.futures import ThreadPoolExecutor

    location = parse_oss_uri(target_uri, field="artifact_root")
    bucket = config.bucket(location.bucket, enable_crc=True)
    files = sorted(p.relative_to(local_dir).as_posix() for p in local_dir.rglob("*") if p.is_file())
    final = [name for name in last if name in files]
    first = [name for name in files if name not in final]

    def put(name: str) -> int:
        path = local_dir / name
        with_retries(
            lambda: _put_file(bucket, location.prefix + name, path), is_transient_oss_error, attempts
        )
        return path.stat().st_size

    with ThreadPoolExecutor(max_workers=workers) as pool:
        sizes = list(pool.map(put, first))
    if before_last is not None:
        before_last()
    sizes += [put(name) for name in final]
    return len(files), sum(sizes)


def _put_file(bucket: Any, key: str, path: Path) -> None:
    import oss2

    if path.stat().st_size < MULTIPART_THRESHOLD:
        bucket.put_object_from_file(key, str(path))
        return
    with tempfile.TemporaryDirectory() as checkpoints:
        oss2.resumable_upload(
            bucket,
            key,
            str(path),
            store=oss2.ResumableStore(root=checkpoints),
            multipart_threshold=MULTIPART_THRESHOLD,
            part_size=PART_SIZE,
            num_threads=4,
        )
