"""Alibaba Cloud OSS emulator that the real ``oss2`` SDK talks to over plain HTTP on 127.0.0.1.

OSS is not a tea-openapi service: it speaks XML, signs with its own schemes and streams object
bodies, so this is its own server rather than an :class:`fakes.base.EmulatorServer`
(it shares only the start/stop of :class:`fakes.base.ThreadedHttpServer` and the fault
draw of :class:`fakes.base.RateFaultPlan`). It keeps the house ergonomics:
``with OssEmulator(...) as oss:`` starts and stops it, ``oss.endpoint`` is ``http://127.0.0.1:PORT``
(the value for ``oss2.Bucket(auth, endpoint, name)``), requests are recorded, and faults are
injected from a seeded RNG so a failing test replays exactly.

What the SDK sees, as verified against oss2 2.19.1:

- Addressing: oss2 treats an IP endpoint as path-style (``_UrlMaker`` / ``is_ip_or_localhost``):
  ``/<bucket>/<key>`` with the key percent-encoded, ``/`` included (``%2F``). Service calls use
  ``/``. ``localhost`` endpoints are path-style too; virtual-host style is not served.
- Signatures: V1 (``OSS ak:base64(hmac-sha1)``, ``oss2.Auth`` / ``oss2.StsAuth``) and V4
  (``OSS4-HMAC-SHA256 Credential=ak/date/region/oss/aliyun_v4_request, Signature=...``,
  ``oss2.AuthV4`` / ``oss2.ProviderAuthV4``, needs ``region=`` on the Bucket) are recomputed from
  what arrived on the wire and compared. V1 signs only the sub-resources in oss2's list (the
  server-side list as the SDK publishes it); V4 signs every query parameter. A mismatch answers
  403 ``SignatureDoesNotMatch`` (with ``StringToSign`` in the body, as OSS does). A request whose
  ``Date``/``x-oss-date`` is more than 15 minutes off real time answers 403
  ``RequestTimeTooSkewed``. V2 signatures and pre-signed URLs are not served (403 AccessDenied).
- STS: register a temporary key with :meth:`OssEmulator.accept_token`; its requests must carry
  the token in ``x-oss-security-token`` (oss2.StsAuth does). A wrong or missing token answers 403
  ``InvalidAccessKeyId``; an expired one 403 ``SecurityTokenExpired``.
- Errors are OSS XML (``<Error><Code/><Message/><RequestId/><HostId/>...``) with
  ``x-oss-request-id``; HEAD answers carry the same XML base64-encoded in ``x-oss-err`` (HEAD has
  no body), which oss2 decodes, so ``head_object`` raises ``NoSuchKey`` like against OSS.
- Listing: oss2 always sends ``encoding-type=url`` for ListObjects (v1) and by default for
  ListObjectsV2 and url-decodes ``Key``/``Prefix``/``NextMarker``/``NextContinuationToken`` when
  the answer carries ``<EncodingType>url</EncodingType>``; the emulator encodes them then
  (``quote(text, safe="")``). ``max-keys`` defaults to 100 and must be 1..1000 (else 400
  InvalidArgument). Keys sort by code point (= UTF-8 byte order, as OSS).
- Integrity: PUT, UploadPart, Complete, Copy, HEAD and GET answer ``x-oss-hash-crc64ecma``
  (decimal CRC-64/ECMA, computed once with ``oss2.utils.Crc64`` when the object is stored). GET
  answers the crc of the WHOLE object even for a range, as OSS does. oss2 (``enable_crc=True``, the
  default) compares the crc of what it uploaded with the returned one on put/upload_part/complete
  and of what it downloaded on ``get_object_to_file`` without a range and in
  ``resumable_download``; ``get_object(...).read()`` computes ``client_crc`` but never compares it.
- Ranges: one ``bytes=`` range (the first of several). By default an invalid or out-of-range
  Range is ignored (200, whole object). With ``x-oss-range-behavior: standard`` an end past the
  object is clamped, a suffix longer than the object returns it all (206), and a start at or past
  the end answers 416 ``InvalidRange``. ``If-Match``/``If-None-Match``/``If-Modified-Since``/
  ``If-Unmodified-Since`` answer 412/304 like OSS (``resumable_download`` sends If-Match).
- Retries: oss2's Bucket calls never retry; a 5xx raises ``oss2.exceptions.ServerError``
  (status 503 here) at once, a dropped connection raises ``oss2.exceptions.RequestError`` (or, once
  the body has started, ``requests``' ``ChunkedEncodingError`` / urllib3 ``ProtocolError`` from
  ``read()``). Only the listing iterators (``ObjectIterator``, ``ObjectIteratorV2``, ...) retry a
  5xx, ``oss2.defaults.request_retries`` (3) times in all.

Emulator-only behaviour (not OSS):

- ``POST /_admin/generate?bucket=&prefix=&count=&size=&seed=`` creates ``count`` deterministic
  pseudo-random objects server-side (keys ``<prefix><index:06d>``, bytes from
  :func:`generated_bytes`), ``GET /_admin/stats`` answers request counts and bytes as JSON and
  ``POST /_admin/reset`` clears them. These are unsigned and exist for benchmarks that run the
  emulator as a separate process (``python -m fakes.oss``, :func:`start_subprocess`).
- Operations not listed in :data:`OPERATIONS` answer 400 ``NotImplemented`` and are kept in
  ``unsupported`` so a test can assert nothing unexpected was called.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import calendar
import contextlib
import hashlib
import hmac
import json
import math
import random
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from oss2.auth import ProviderAuth
from oss2.utils import Crc64

from fakes.base import RateFaultPlan, SeededFaults, ThreadedHttpServer, bound_handler

#: Every operation the emulator serves, by the name used for faults and counters.
OPERATIONS = frozenset(
    {
        "ListBuckets",
        "PutBucket",
        "DeleteBucket",
        "GetBucketInfo",
        "GetBucketLocation",
        "ListObjects",
        "ListObjectsV2",
        "ListMultipartUploads",
        "DeleteMultipleObjects",
        "PutObject",
        "CopyObject",
        "GetObject",
        "HeadObject",
        "GetObjectMeta",
        "DeleteObject",
        "InitiateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
        "ListParts",
    }
)
#: Fault kinds: 503 answer, connection closed (mid-body for GetObject), one byte flipped, delay.
FAULT_KINDS = frozenset({"unavailable", "drop", "corrupt", "slow"})
#: Operations whose payload "corrupt" can flip: the GET body, or the stored PUT / part bytes.
CORRUPTIBLE = frozenset({"GetObject", "PutObject", "UploadPart"})

DEFAULT_ACCESS_KEY_ID = "test-ak"
DEFAULT_ACCESS_KEY_SECRET = "test-sk"
DEFAULT_REGION = "cn-hangzhou"
DEFAULT_CHUNK_SIZE = 1024 * 1024
MIN_PART_SIZE = 100 * 1024  # every part but the last must be at least this (OSS: 100 KB)
MAX_PART_NUMBER = 10000
MAX_CLOCK_SKEW_SECONDS = 15 * 60
OWNER_ID = "1318470000000000"
V4_ALGORITHM = "OSS4-HMAC-SHA256"
#: Sub-resources V1 signs: oss2 publishes the server's list in ``ProviderAuth``.
SIGNED_SUBRESOURCES: frozenset[str] = frozenset(ProviderAuth._subresource_key_set)
RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
_RANGE_RE = re.compile(r"^\s*(\d*)\s*-\s*(\d*)\s*$")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_V4_FIELD_RE = re.compile(r"(\w+)=([^,\s]+)")


# --------------------------------------------------------------------------------- formats


#: oss2's own CRC-64/ECMA; building one computes its tables (~1 ms), so copies are made from this.
_CRC64 = Crc64()


def crc64(data: bytes | memoryview) -> int:
    """CRC-64/ECMA of ``data``, the way oss2 computes it (``oss2.utils.Crc64``)."""
    return _CRC64.crc64.new(data).crcValue


def content_etag(data: bytes | memoryview) -> str:
    """ETag of a simply uploaded object: its MD5 as upper-case hex (without the quotes)."""
    return hashlib.md5(data).hexdigest().upper()


def multipart_etag(part_etags: Iterable[str]) -> str:
    """ETag of a multipart object: MD5 of the parts' binary MD5s, upper-case, ``-<part count>``."""
    digests = [bytes.fromhex(etag) for etag in part_etags]
    return f"{hashlib.md5(b''.join(digests)).hexdigest().upper()}-{len(digests)}"


def generated_bytes(seed: int | str, key: str, size: int) -> bytes:
    """The content the admin generator gives ``key``: reproducible from (seed, key, size) anywhere.

    Drawn in 1 MiB pieces: ``randbytes`` of more than 256 MiB overflows a C int of bits.
    """
    rng = random.Random(f"{seed}:{key}")
    piece = 1024 * 1024
    return b"".join(rng.randbytes(min(piece, size - start)) for start in range(0, size, piece))


def _http_date(epoch: float) -> str:
    return formatdate(math.floor(epoch), usegmt=True)


def _iso8601(epoch: float) -> str:
    """The listing time format; oss2's parser insists on exactly ``.000Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))


def _parse_http_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _new_request_id() -> str:
    """Shaped like OSS's: 24 upper-case hex characters."""
    return secrets.token_hex(12).upper()


def _url_encode(text: str) -> str:
    return quote(text, safe="")


# --------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class StoredObject:
    """An object as stored: bytes plus what OSS reports about them (computed once, at write time)."""

    data: bytes
    etag: str
    crc64: int
    last_modified: float
    object_type: str = "Normal"
    content_type: str = "application/octet-stream"
    metadata: Mapping[str, str] = field(default_factory=dict)
    content_md5: str | None = None

    @property
    def size(self) -> int:
        return len(self.data)

    @classmethod
    def simple(
        cls,
        data: bytes,
        last_modified: float,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
    ) -> StoredObject:
        """An object written by PutObject: ETag is the MD5, type Normal."""
        digest = hashlib.md5(data).digest()
        return cls(
            data=data,
            etag=digest.hex().upper(),
            crc64=crc64(data),
            last_modified=last_modified,
            content_type=content_type,
            metadata=dict(metadata or {}),
            content_md5=base64.b64encode(digest).decode(),
        )


@dataclass(frozen=True)
class _Part:
    data: bytes
    etag: str
    crc64: int
    last_modified: float


@dataclass
class _Upload:
    upload_id: str
    bucket: str
    key: str
    initiated: float
    content_type: str
    metadata: dict[str, str]
    parts: dict[int, _Part] = field(default_factory=dict)


@dataclass
class _Bucket:
    name: str
    created: float
    objects: dict[str, StoredObject] = field(default_factory=dict)
    uploads: dict[str, _Upload] = field(default_factory=dict)
    _sorted: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        """Keys in code-point order; rebuilt lazily so bulk seeding does not sort per insert."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def store(self, key: str, obj: StoredObject) -> None:
        if key not in self.objects:
            self._sorted = None
        self.objects[key] = obj

    def remove(self, key: str) -> bool:
        if self.objects.pop(key, None) is None:
            return False
        self._sorted = None
        return True


@dataclass(frozen=True)
class _Token:
    secret: str
    token: str
    expires_at: float | None


@dataclass(frozen=True)
class OssFaultPlan(RateFaultPlan):
    """Which requests fail on purpose, drawn from a seeded RNG so a failing test replays exactly.

    Every request of a targeted operation (all when ``operations`` is None) draws twice: one draw
    picks unavailable / drop / corrupt / none by cumulative rate, the other whether the answer is
    delayed by ``slow_seconds``. "unavailable" answers 503 ServiceUnavailable and changes nothing;
    "drop" closes the connection without an answer (nothing changes) or, for GetObject, after the
    headers and half of the body; "corrupt" flips one byte of a GetObject body (headers, crc
    included, stay true) or of the bytes a PutObject / UploadPart stores (so the crc the server
    returns no longer matches the client's). "corrupt" drawn for another operation does nothing.
    """

    unavailable_rate: float = 0.0
    drop_rate: float = 0.0
    corrupt_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 0.0
    seed: int = 0
    operations: frozenset[str] | None = None

    def scope(self) -> frozenset[str] | None:
        return self.operations

    def failure_rates(self) -> tuple[tuple[str, float], ...]:
        return (
            ("unavailable", self.unavailable_rate),
            ("drop", self.drop_rate),
            ("corrupt", self.corrupt_rate),
        )


@dataclass
class _TargetedFault:
    operation: str
    fault: str
    remaining: int
    key: str | None
    seconds: float


@dataclass
class OssRecord:
    """One request as the server saw it and what it answered.

    ``status`` is 0 for a connection dropped before an answer. ``bytes_sent`` counts response body
    bytes handed to the socket (it grows while a GET streams and is counted before each write, so
    a client that has read a body always sees it counted); ``bytes_received`` is the request body.
    """

    operation: str
    method: str
    bucket: str
    key: str
    query: dict[str, str]
    headers: dict[str, str]
    request_id: str
    status: int = 0
    fault: str = ""
    access_key_id: str = ""
    bytes_received: int = 0
    bytes_sent: int = 0
    range: tuple[int, int] | None = None


class OssError(Exception):
    """An OSS error answer; ``extra`` adds elements such as ``Key`` or ``StringToSign``."""

    def __init__(self, status: int, code: str, message: str, extra: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.extra = dict(extra or {})
        self.headers: dict[str, str] = {}


@dataclass
class _Exchange:
    """The request being served, threaded through the serving steps."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    bucket: str = ""
    key: str = ""
    operation: str = ""
    request_id: str = field(default_factory=_new_request_id)


@dataclass
class _Response:
    """An answer: status, headers and a body; GET bodies stream from a memoryview of the object."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview = b""
    stream: bool = False  # an object body: paced by the bandwidth cap and subject to drop/corrupt
    rate: float | None = None
    drop_after: int | None = None
    corrupt_at: int | None = None
    head: bool = False


def _xml(root: ET.Element) -> bytes:
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)


def _sub(parent: ET.Element, tag: str, text: str | int | None = None) -> ET.Element:
    node = ET.SubElement(parent, tag)
    if text is not None:
        node.text = str(text)
    return node


def _quoted(etag: str) -> str:
    return f'"{etag}"'


# --------------------------------------------------------------------------------- server


class OssEmulator(ThreadedHttpServer, SeededFaults[OssFaultPlan]):
    """An OSS endpoint on 127.0.0.1 serving buckets held in memory.

    ``access_keys`` maps AccessKeyId to secret (None: the key is accepted without verifying the
    signature); default ``{"test-ak": "test-sk"}``. STS keys are added with :meth:`accept_token`.
    ``latency_seconds`` delays every answer (first-byte latency); ``bandwidth_bytes_per_second``
    caps each GET body stream (one connection = one stream, as OSS's per-connection throughput);
    both can be changed while serving. ``clock`` gives Last-Modified times (pass a
    :class:`fakes.base.ManualClock` to control them); signature time checks use real
    time, as the SDK signs with it.
    """

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        *,
        region: str = DEFAULT_REGION,
        latency_seconds: float = 0.0,
        bandwidth_bytes_per_second: float | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        clock: Callable[[], float] | None = None,
        port: int = 0,
    ) -> None:
        self.region = region
        self.latency_seconds = latency_seconds
        self.bandwidth_bytes_per_second = bandwidth_bytes_per_second
        self.chunk_size = chunk_size
        self.clock: Callable[[], float] = clock or time.time
        self.internal_errors: list[str] = []
        self.unsupported: list[str] = []
        self.faults_injected = 0
        self._port = port
        self._lock = threading.RLock()
        self._access_keys: dict[str, str | None] = dict(
            {DEFAULT_ACCESS_KEY_ID: DEFAULT_ACCESS_KEY_SECRET} if access_keys is None else access_keys
        )
        self._tokens: dict[str, _Token] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._records: list[OssRecord] = []
        self._targeted: list[_TargetedFault] = []
        self._get_hooks: list[Callable[[str, str], None]] = []
        self.faults = OssFaultPlan()

    # ----------------------------------------------------------------------------- lifecycle

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the endpoint for ``oss2.Bucket`` (path-style, plain HTTP)."""
        return f"http://{self.host_port}"

    def _make_server(self) -> ThreadingHTTPServer:
        """127.0.0.1 (a free port unless one was given), remembering connections for ``stop``."""
        return _Server(("127.0.0.1", self._port), bound_handler(_OssHandler, emulator=self))

    def _before_close(self, httpd: ThreadingHTTPServer) -> None:
        """Cut open keep-alive connections, so pooled clients see the emulator gone."""
        if isinstance(httpd, _Server):
            httpd.close_connections()

    # ----------------------------------------------------------------------------- credentials

    def accept_access_key(self, access_key_id: str, access_key_secret: str | None) -> None:
        """Accept a long-term AccessKey (secret None: signatures of this key are not verified)."""
        with self._lock:
            self._access_keys[access_key_id] = access_key_secret

    def accept_token(
        self, access_key_id: str, access_key_secret: str, token: str, expires_at: float | None = None
    ) -> None:
        """Accept an STS credential: requests must sign with the secret and carry ``token``."""
        with self._lock:
            self._tokens[access_key_id] = _Token(access_key_secret, token, expires_at)

    def expire_token(self, access_key_id: str) -> None:
        """Make an STS credential expired from now on (403 SecurityTokenExpired)."""
        with self._lock:
            issued = self._tokens[access_key_id]
            self._tokens[access_key_id] = _Token(issued.secret, issued.token, time.time() - 1)

    # ----------------------------------------------------------------------------- setup helpers

    def create_bucket(self, name: str) -> None:
        """Create an empty bucket (no-op if it exists); the name must be a valid OSS bucket name."""
        if not _BUCKET_RE.match(name):
            raise ValueError(f"invalid OSS bucket name: {name!r}")
        with self._lock:
            self._buckets.setdefault(name, _Bucket(name, self.clock()))

    def buckets(self) -> list[str]:
        with self._lock:
            return sorted(self._buckets)

    def put(
        self,
        bucket: str,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
    ) -> StoredObject:
        """Store an object directly, as PutObject would (creating the bucket if needed)."""
        self.create_bucket(bucket)
        obj = StoredObject.simple(bytes(data), self.clock(), content_type, metadata)
        with self._lock:
            self._buckets[bucket].store(key, obj)
        return obj

    def replace(self, bucket: str, key: str, data: bytes | bytearray | memoryview) -> StoredObject:
        """Overwrite an existing object (new ETag/crc, Last-Modified now), e.g. from a GET hook.

        Last-Modified has one-second resolution, as on OSS: a replace within the same second keeps
        the same Last-Modified header, so only the ETag tells the versions apart.
        """
        with self._lock:
            old = self._object(bucket, key)
            obj = StoredObject.simple(bytes(data), self.clock(), old.content_type, old.metadata)
            self._buckets[bucket].store(key, obj)
        return obj

    def get(self, bucket: str, key: str) -> bytes:
        """The stored bytes of an object (KeyError if absent)."""
        with self._lock:
            return self._object(bucket, key).data

    def head(self, bucket: str, key: str) -> StoredObject:
        """The stored object with its ETag, crc64, size and times (KeyError if absent)."""
        with self._lock:
            return self._object(bucket, key)

    def delete(self, bucket: str, key: str) -> None:
        with self._lock:
            if bucket in self._buckets:
                self._buckets[bucket].remove(key)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Keys of ``bucket`` starting with ``prefix``, sorted as OSS lists them."""
        with self._lock:
            keys = self._buckets[bucket].sorted_keys()
            start = bisect.bisect_left(keys, prefix)
            return [k for k in keys[start:] if k.startswith(prefix)] if prefix else list(keys)

    def uploads(self, bucket: str) -> list[str]:
        """Upload ids of multipart uploads initiated and neither completed nor aborted."""
        with self._lock:
            return list(self._buckets[bucket].uploads)

    def generate(self, bucket: str, prefix: str, count: int, size: int, seed: int | str = 0) -> list[str]:
        """Create ``count`` objects ``<prefix><i:06d>`` of ``size`` bytes from :func:`generated_bytes`."""
        width = max(6, len(str(count - 1)))
        keys = [f"{prefix}{i:0{width}d}" for i in range(count)]
        self.create_bucket(bucket)
        for key in keys:
            obj = StoredObject.simple(generated_bytes(seed, key, size), self.clock())
            with self._lock:
                self._buckets[bucket].store(key, obj)
        return keys

    def after_get(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(bucket, key)`` on each successful GetObject once its snapshot is taken.

        It runs before the body is sent, so the client is still copying when it returns: a
        callback that :meth:`replace`-s the object models "the source changed during the copy"
        (this GET streams the old bytes; later GETs see the new ones, If-Match ones fail 412).
        """
        with self._lock:
            self._get_hooks.append(callback)

    def clear_get_hooks(self) -> None:
        with self._lock:
            self._get_hooks.clear()

    def _object(self, bucket: str, key: str) -> StoredObject:
        if bucket not in self._buckets or key not in self._buckets[bucket].objects:
            raise KeyError(f"oss://{bucket}/{key}")
        return self._buckets[bucket].objects[key]

    # ----------------------------------------------------------------------------- faults

    def fail_next(
        self,
        operation: str,
        fault: str,
        times: int = 1,
        key: str | None = None,
        seconds: float = 1.0,
    ) -> None:
        """Inject ``fault`` into the next ``times`` requests of ``operation`` (on ``key`` if given).

        Targeted faults are used in the order they were added and before the rate-based plan;
        ``seconds`` is the delay of a "slow" fault.
        """
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
        if fault not in FAULT_KINDS:
            raise ValueError(f"unknown fault {fault!r}; one of {sorted(FAULT_KINDS)}")
        if fault == "corrupt" and operation not in CORRUPTIBLE:
            raise ValueError(f"'corrupt' applies to {sorted(CORRUPTIBLE)} only")
        with self._lock:
            self._targeted.append(_TargetedFault(operation, fault, times, key, seconds))

    def clear_faults(self) -> None:
        """Drop pending targeted faults and the rate-based plan."""
        with self._lock:
            self._targeted.clear()
        self.faults = OssFaultPlan()

    def _draw_fault(self, exchange: _Exchange) -> tuple[str, float]:
        """This request's fault and delay, decided under the lock (deterministic order)."""
        with self._lock:
            for targeted in self._targeted:
                if targeted.operation == exchange.operation and targeted.key in (None, exchange.key):
                    targeted.remaining -= 1
                    if targeted.remaining <= 0:
                        self._targeted.remove(targeted)
                    self.faults_injected += 1
                    if targeted.fault == "slow":
                        return "slow", targeted.seconds
                    return targeted.fault, 0.0
            plan = self._faults
            if not plan.targets(exchange.operation):
                return "", 0.0
            failure, slow = self._rng.random(), self._rng.random()
            outcome = plan.outcome(failure)
            if outcome == "corrupt" and exchange.operation not in CORRUPTIBLE:
                outcome = ""
            delay = plan.slow_seconds if slow < plan.slow_rate else 0.0
            if outcome or delay:
                self.faults_injected += 1
            return outcome or ("slow" if delay else ""), delay

    # ----------------------------------------------------------------------------- records

    def records(self, operation: str | None = None) -> list[OssRecord]:
        """Recorded requests, oldest first (of one operation if given)."""
        with self._lock:
            return [r for r in self._records if operation is None or r.operation == operation]

    def count(
        self,
        operation: str | None = None,
        *,
        bucket: str | None = None,
        key: str | None = None,
        status: int | None = None,
    ) -> int:
        """How many requests matched (faulted ones included; filter on ``status`` to exclude)."""
        with self._lock:
            return sum(
                1
                for r in self._records
                if (operation is None or r.operation == operation)
                and (bucket is None or r.bucket == bucket)
                and (key is None or r.key == key)
                and (status is None or r.status == status)
            )

    def counts(self) -> dict[str, int]:
        """Requests per operation."""
        with self._lock:
            return dict(Counter(r.operation for r in self._records))

    def bytes_served(self, bucket: str | None = None, key: str | None = None) -> int:
        """Object bytes sent in GetObject bodies (corrupted and cut-off ones included)."""
        with self._lock:
            return sum(
                r.bytes_sent
                for r in self._records
                if r.operation == "GetObject"
                and (bucket is None or r.bucket == bucket)
                and (key is None or r.key == key)
            )

    def bytes_uploaded(self, bucket: str | None = None, key: str | None = None) -> int:
        """Request body bytes of PutObject and UploadPart."""
        with self._lock:
            return sum(
                r.bytes_received
                for r in self._records
                if r.operation in ("PutObject", "UploadPart")
                and (bucket is None or r.bucket == bucket)
                and (key is None or r.key == key)
            )

    def clear_records(self) -> None:
        with self._lock:
            self._records.clear()

    def stats(self) -> dict[str, Any]:
        """Counters as JSON-able data (what ``GET /_admin/stats`` answers)."""
        return {
            "counts": self.counts(),
            "bytes_served": self.bytes_served(),
            "bytes_uploaded": self.bytes_uploaded(),
            "faults_injected": self.faults_injected,
            "internal_errors": list(self.internal_errors),
            "unsupported": list(self.unsupported),
        }

    # ----------------------------------------------------------------------------- serving

    def _serve(self, exchange: _Exchange) -> tuple[_Response | None, OssRecord]:
        """Answer one request; a None response means close the connection unanswered."""
        self._classify(exchange)
        record = OssRecord(
            operation=exchange.operation,
            method=exchange.method,
            bucket=exchange.bucket,
            key=exchange.key,
            query=dict(exchange.query),
            headers=dict(exchange.headers),
            request_id=exchange.request_id,
            bytes_received=len(exchange.body),
        )
        response: _Response | None
        try:
            fault, delay = self._draw_fault(exchange)
            record.fault = fault
            if delay:
                time.sleep(delay)
            if fault == "unavailable":
                raise OssError(503, "ServiceUnavailable", "Please reduce your request rate.")
            if fault == "drop" and exchange.operation != "GetObject":
                response = None
            else:
                record.access_key_id = self._authenticate(exchange)
                response = self._dispatch(exchange, fault, record)
        except OssError as error:
            response = self._error(exchange, error)
        except Exception as exc:  # an emulator bug: answer it like OSS would, and keep it visible
            with self._lock:
                self.internal_errors.append(f"{exchange.operation}: {exc!r}")
            response = self._error(exchange, OssError(500, "InternalError", f"The emulator failed: {exc!r}"))
        if response is not None:
            response.head = exchange.method == "HEAD"
            if self.latency_seconds > 0:
                time.sleep(self.latency_seconds)
            response.headers.setdefault("x-oss-request-id", exchange.request_id)
            record.status = response.status
        with self._lock:
            self._records.append(record)
        return response, record

    def _classify(self, exchange: _Exchange) -> None:
        """Split the path into bucket/key and name the operation (before any authentication)."""
        path = exchange.path
        if path == "/":
            exchange.operation = "ListBuckets" if exchange.method == "GET" else "Unknown"
            return
        bucket, _, key = path[1:].partition("/")
        exchange.bucket, exchange.key = unquote(bucket), unquote(key)
        query, method = exchange.query, exchange.method
        if not exchange.key:
            if method == "GET":
                for param, operation in (
                    ("list-type", "ListObjectsV2"),
                    ("bucketInfo", "GetBucketInfo"),
                    ("location", "GetBucketLocation"),
                    ("uploads", "ListMultipartUploads"),
                ):
                    if param in query:
                        exchange.operation = operation
                        break
                else:
                    exchange.operation = "ListObjects"
            else:
                exchange.operation = {
                    "PUT": "PutBucket",
                    "DELETE": "DeleteBucket",
                    "POST": "DeleteMultipleObjects" if "delete" in query else "Unknown",
                }.get(method, "Unknown")
        elif method == "PUT":
            if "uploadId" in query:
                copy = "x-oss-copy-source" in exchange.headers
                exchange.operation = "UploadPartCopy" if copy else "UploadPart"
            else:
                exchange.operation = "CopyObject" if "x-oss-copy-source" in exchange.headers else "PutObject"
        elif method == "GET":
            exchange.operation = "ListParts" if "uploadId" in query else "GetObject"
        elif method == "HEAD":
            exchange.operation = "GetObjectMeta" if "objectMeta" in query else "HeadObject"
        elif method == "POST":
            if "uploads" in query:
                exchange.operation = "InitiateMultipartUpload"
            elif "uploadId" in query:
                exchange.operation = "CompleteMultipartUpload"
            else:
                exchange.operation = "AppendObject" if "append" in query else "Unknown"
        elif method == "DELETE":
            exchange.operation = "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
        else:
            exchange.operation = "Unknown"
        allowed = _ALLOWED_SUBRESOURCES.get(exchange.operation, frozenset())
        extra = (set(query) & SIGNED_SUBRESOURCES) - allowed - set(RESPONSE_OVERRIDES) - {"security-token"}
        if extra and exchange.operation in OPERATIONS:
            exchange.operation = f"{exchange.operation}?{','.join(sorted(extra))}"

    def _dispatch(self, exchange: _Exchange, fault: str, record: OssRecord) -> _Response:
        handler = _HANDLERS.get(exchange.operation)
        if handler is None:
            with self._lock:
                self.unsupported.append(f"{exchange.method} {exchange.path} ({exchange.operation})")
            raise OssError(
                400,
                "NotImplemented",
                f"The OSS emulator does not implement {exchange.operation} "
                f"({exchange.method} {exchange.path}).",
            )
        if exchange.operation != "ListBuckets" and exchange.operation != "PutBucket":
            with self._lock:
                if exchange.bucket not in self._buckets:
                    raise OssError(
                        404,
                        "NoSuchBucket",
                        "The specified bucket does not exist.",
                        {"BucketName": exchange.bucket},
                    )
        return handler(self, exchange, fault, record)

    def _error(self, exchange: _Exchange, error: OssError) -> _Response:
        root = ET.Element("Error")
        _sub(root, "Code", error.code)
        _sub(root, "Message", error.message)
        _sub(root, "RequestId", exchange.request_id)
        host = exchange.headers.get("host", "127.0.0.1")
        _sub(root, "HostId", f"{exchange.bucket}.{host}" if exchange.bucket else host)
        for tag, text in error.extra.items():
            _sub(root, tag, text)
        if error.status == 304:  # Not Modified carries no body (one would poison the keep-alive stream)
            return _Response(304, dict(error.headers))
        body = _xml(root)
        headers = {"Content-Type": "application/xml", **error.headers}
        if exchange.method == "HEAD":
            headers["x-oss-err"] = base64.b64encode(body).decode()
        return _Response(error.status, headers, body)

    # ----------------------------------------------------------------------------- authentication

    def _authenticate(self, exchange: _Exchange) -> str:
        """Verify the Authorization header (V1 or V4) and the STS token; return the AccessKeyId."""
        authorization = exchange.headers.get("authorization", "")
        if authorization.startswith("OSS "):
            access_key_id, _, signature = authorization[4:].strip().rpartition(":")
            secret = self._secret_for(access_key_id, exchange)
            self._check_time(exchange.headers.get("x-oss-date") or exchange.headers.get("date", ""))
            if secret is not None:
                string_to_sign = _v1_string_to_sign(exchange)
                expected = base64.b64encode(
                    hmac.new(secret.encode(), string_to_sign, hashlib.sha1).digest()
                ).decode()
                if not hmac.compare_digest(expected, signature):
                    raise _signature_mismatch(access_key_id, string_to_sign.decode("utf-8", "replace"))
            return access_key_id
        if authorization.startswith(V4_ALGORITHM + " "):
            return self._authenticate_v4(exchange, authorization[len(V4_ALGORITHM) + 1 :])
        if not authorization:
            raise OssError(
                403, "AccessDenied", "You have no right to access this object because of bucket acl."
            )
        raise OssError(403, "AccessDenied", "The authorization scheme is not supported by the OSS emulator.")

    def _authenticate_v4(self, exchange: _Exchange, fields_text: str) -> str:
        fields = dict(_V4_FIELD_RE.findall(fields_text))
        credential, signature = fields.get("Credential", ""), fields.get("Signature", "")
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aliyun_v4_request" or not signature:
            raise OssError(400, "InvalidArgument", "Authorization header is malformed.")
        access_key_id, date, region, product, _ = parts
        secret = self._secret_for(access_key_id, exchange)
        date_time = exchange.headers.get("x-oss-date", "")
        if not date_time.startswith(date):
            raise OssError(403, "SignatureDoesNotMatch", "The x-oss-date does not match the Credential date.")
        self._check_time(date_time)
        if region != self.region:
            raise OssError(
                400, "InvalidArgument", f"Invalid signing region in Authorization header: {region}"
            )
        if product != "oss":
            raise OssError(
                400, "InvalidArgument", f"Invalid signing product in Authorization header: {product}"
            )
        if secret is None:
            return access_key_id
        additional = [h for h in fields.get("AdditionalHeaders", "").split(";") if h]
        scope = f"{date}/{region}/{product}/aliyun_v4_request"
        canonical = _v4_canonical_request(exchange, additional)
        string_to_sign = f"{V4_ALGORITHM}\n{date_time}\n{scope}\n{hashlib.sha256(canonical).hexdigest()}"
        key = f"aliyun_v4{secret}".encode()
        for part in (date, region, product, "aliyun_v4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise _signature_mismatch(access_key_id, string_to_sign, canonical.decode("utf-8", "replace"))
        return access_key_id

    def _secret_for(self, access_key_id: str, exchange: _Exchange) -> str | None:
        with self._lock:
            token = exchange.headers.get("x-oss-security-token")
            issued = self._tokens.get(access_key_id)
            if issued is not None:
                if token != issued.token:
                    raise OssError(403, "InvalidAccessKeyId", "The security token you provided is invalid.")
                if issued.expires_at is not None and time.time() >= issued.expires_at:
                    raise OssError(
                        403, "SecurityTokenExpired", "The security token you provided has expired."
                    )
                return issued.secret
            if access_key_id not in self._access_keys:
                raise OssError(
                    403,
                    "InvalidAccessKeyId",
                    "The OSS Access Key Id you provided does not exist in our records.",
                    {"OSSAccessKeyId": access_key_id},
                )
            return self._access_keys[access_key_id]

    @staticmethod
    def _check_time(text: str) -> None:
        if re.fullmatch(r"\d{8}T\d{6}Z", text):
            signed = float(calendar.timegm(time.strptime(text, "%Y%m%dT%H%M%SZ")))
        else:
            parsed = _parse_http_date(text)
            if parsed is None:
                raise OssError(403, "AccessDenied", "OSS authentication requires a valid Date.")
            signed = parsed
        if abs(time.time() - signed) > MAX_CLOCK_SKEW_SECONDS:
            raise OssError(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            )

    # ----------------------------------------------------------------------------- operations

    def _bucket(self, name: str) -> _Bucket:
        return self._buckets[name]

    def _stored(self, exchange: _Exchange) -> StoredObject:
        obj = self._buckets[exchange.bucket].objects.get(exchange.key)
        if obj is None:
            raise OssError(404, "NoSuchKey", "The specified key does not exist.", {"Key": exchange.key})
        return obj

    def _list_buckets(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        prefix = exchange.query.get("prefix", "")
        marker = exchange.query.get("marker", "")
        max_keys = _int_param(exchange.query, "max-keys", 100, 1, 1000)
        with self._lock:
            names = [n for n in sorted(self._buckets) if n.startswith(prefix) and n > marker]
            buckets = [self._buckets[n] for n in names[:max_keys]]
        root = ET.Element("ListAllMyBucketsResult")
        owner = _sub(root, "Owner")
        _sub(owner, "ID", OWNER_ID)
        _sub(owner, "DisplayName", OWNER_ID)
        if len(names) > max_keys:
            _sub(root, "IsTruncated", "true")
            _sub(root, "NextMarker", buckets[-1].name)
        else:
            _sub(root, "IsTruncated", "false")
        nodes = _sub(root, "Buckets")
        for bucket in buckets:
            node = _sub(nodes, "Bucket")
            _sub(node, "CreationDate", _iso8601(bucket.created))
            _sub(node, "ExtranetEndpoint", f"oss-{self.region}.aliyuncs.com")
            _sub(node, "IntranetEndpoint", f"oss-{self.region}-internal.aliyuncs.com")
            _sub(node, "Location", f"oss-{self.region}")
            _sub(node, "Name", bucket.name)
            _sub(node, "Region", self.region)
            _sub(node, "StorageClass", "Standard")
        return _xml_response(root)

    def _put_bucket(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        if not _BUCKET_RE.match(exchange.bucket):
            raise OssError(400, "InvalidBucketName", "The specified bucket is not valid.")
        with self._lock:
            if exchange.bucket in self._buckets:
                raise OssError(409, "BucketAlreadyExists", "The requested bucket name is not available.")
            self._buckets[exchange.bucket] = _Bucket(exchange.bucket, self.clock())
        return _Response(200, {"Location": f"/{exchange.bucket}"})

    def _delete_bucket(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            bucket = self._bucket(exchange.bucket)
            if bucket.objects or bucket.uploads:
                raise OssError(409, "BucketNotEmpty", "The bucket you tried to delete is not empty.")
            del self._buckets[exchange.bucket]
        return _Response(204)

    def _get_bucket_info(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            created = self._bucket(exchange.bucket).created
        root = ET.Element("BucketInfo")
        node = _sub(root, "Bucket")
        _sub(node, "AccessMonitor", "Disabled")
        _sub(node, "CreationDate", _iso8601(created))
        _sub(node, "CrossRegionReplication", "Disabled")
        _sub(node, "DataRedundancyType", "LRS")
        _sub(node, "ExtranetEndpoint", f"oss-{self.region}.aliyuncs.com")
        _sub(node, "IntranetEndpoint", f"oss-{self.region}-internal.aliyuncs.com")
        _sub(node, "Location", f"oss-{self.region}")
        _sub(node, "Name", exchange.bucket)
        _sub(node, "ResourceGroupId", "rg-default")
        _sub(node, "StorageClass", "Standard")
        _sub(node, "TransferAcceleration", "Disabled")
        owner = _sub(node, "Owner")
        _sub(owner, "DisplayName", OWNER_ID)
        _sub(owner, "ID", OWNER_ID)
        acl = _sub(node, "AccessControlList")
        _sub(acl, "Grant", "private")
        sse = _sub(node, "ServerSideEncryptionRule")
        _sub(sse, "SSEAlgorithm", "None")
        return _xml_response(root)

    def _get_bucket_location(self, _exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        root = ET.Element("LocationConstraint")
        root.text = f"oss-{self.region}"
        return _xml_response(root)

    def _list_page(
        self, exchange: _Exchange, prefix: str, delimiter: str, marker: str, max_keys: int
    ) -> tuple[list[tuple[str, str]], bool, dict[str, StoredObject]]:
        """ListObjects' page of the bucket (items, whether truncated) and the objects among its items."""
        with self._lock:
            bucket = self._bucket(exchange.bucket)
            items, truncated = _page(bucket.sorted_keys(), prefix, delimiter, marker, max_keys)
            objects = {name: bucket.objects[name] for kind, name in items if kind == "key"}
        return items, truncated, objects

    def _list_objects(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        query = exchange.query
        encode = _encoder(query)
        prefix, delimiter, marker = (
            query.get("prefix", ""),
            query.get("delimiter", ""),
            query.get("marker", ""),
        )
        max_keys = _int_param(query, "max-keys", 100, 1, 1000)
        items, truncated, objects = self._list_page(exchange, prefix, delimiter, marker, max_keys)
        root = _list_bucket_root(exchange.bucket, encode(prefix))
        _sub(root, "Marker", encode(marker))
        _add_list_limits(root, query, max_keys, encode(delimiter), truncated)
        if truncated:
            _sub(root, "NextMarker", encode(items[-1][1]))
        _add_items(root, items, objects, encode, owner=True)
        return _xml_response(root)

    def _list_objects_v2(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        query = exchange.query
        encode = _encoder(query)
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        token, start_after = query.get("continuation-token", ""), query.get("start-after", "")
        max_keys = _int_param(query, "max-keys", 100, 1, 1000)
        marker = _decode_token(token) if token else start_after
        items, truncated, objects = self._list_page(exchange, prefix, delimiter, marker, max_keys)
        root = _list_bucket_root(exchange.bucket, encode(prefix))
        if token:
            _sub(root, "ContinuationToken", token)
        if start_after:
            _sub(root, "StartAfter", encode(start_after))
        _add_list_limits(root, query, max_keys, encode(delimiter), truncated)
        if truncated:
            _sub(root, "NextContinuationToken", encode(_encode_token(items[-1][1])))
        _sub(root, "KeyCount", len(items))
        _add_items(root, items, objects, encode, owner=query.get("fetch-owner") == "true")
        return _xml_response(root)

    def _list_multipart_uploads(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        query = exchange.query
        encode = _encoder(query)
        prefix = query.get("prefix", "")
        key_marker, id_marker = query.get("key-marker", ""), query.get("upload-id-marker", "")
        max_uploads = _int_param(query, "max-uploads", 1000, 1, 1000)
        with self._lock:
            uploads = sorted(
                (u for u in self._bucket(exchange.bucket).uploads.values() if u.key.startswith(prefix)),
                key=lambda u: (u.key, u.initiated, u.upload_id),
            )
        if key_marker:
            uploads = [
                u
                for u in uploads
                if u.key > key_marker or (u.key == key_marker and id_marker and u.upload_id > id_marker)
            ]
        page, truncated = uploads[:max_uploads], len(uploads) > max_uploads
        root = _result_root("ListMultipartUploadsResult", query)
        _sub(root, "Bucket", exchange.bucket)
        _sub(root, "KeyMarker", encode(key_marker))
        _sub(root, "UploadIdMarker", id_marker)
        _sub(root, "NextKeyMarker", encode(page[-1].key) if truncated else "")
        _sub(root, "NextUploadIdMarker", page[-1].upload_id if truncated else "")
        _sub(root, "Delimiter", "")
        _sub(root, "Prefix", encode(prefix))
        _sub(root, "MaxUploads", max_uploads)
        _sub(root, "IsTruncated", str(truncated).lower())
        for upload in page:
            node = _sub(root, "Upload")
            _sub(node, "Key", encode(upload.key))
            _sub(node, "UploadId", upload.upload_id)
            _sub(node, "StorageClass", "Standard")
            _sub(node, "Initiated", _iso8601(upload.initiated))
        return _xml_response(root)

    def _delete_multiple_objects(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        _check_content_md5(exchange)
        try:
            request = ET.fromstring(exchange.body)
        except ET.ParseError as exc:
            raise OssError(400, "MalformedXML", "The XML you provided was not well-formed.") from exc
        quiet = (request.findtext("Quiet") or "false").lower() == "true"
        keys = [node.findtext("Key") or "" for node in request.findall("Object")]
        if not keys or len(keys) > 1000:
            raise OssError(400, "MalformedXML", "The number of objects to delete must be 1..1000.")
        with self._lock:
            bucket = self._bucket(exchange.bucket)
            for key in keys:
                bucket.remove(key)
        encode = _encoder(exchange.query)
        root = _result_root("DeleteResult", exchange.query)
        if not quiet:
            for key in keys:
                _sub(_sub(root, "Deleted"), "Key", encode(key))
        return _xml_response(root)

    def _put_object(self, exchange: _Exchange, fault: str, _record: OssRecord) -> _Response:
        _check_content_md5(exchange)
        data = _corrupted(exchange.body) if fault == "corrupt" else exchange.body
        obj = StoredObject.simple(
            data,
            self.clock(),
            exchange.headers.get("content-type", "application/octet-stream"),
            _user_metadata(exchange.headers),
        )
        with self._lock:
            bucket = self._bucket(exchange.bucket)
            if (
                exchange.headers.get("x-oss-forbid-overwrite", "").lower() == "true"
                and exchange.key in bucket.objects
            ):
                raise OssError(
                    409,
                    "FileAlreadyExists",
                    "The object you specified already exists and can not be overwritten.",
                )
            bucket.store(exchange.key, obj)
        return _Response(
            200,
            {
                "ETag": _quoted(obj.etag),
                "x-oss-hash-crc64ecma": str(obj.crc64),
                "Content-MD5": obj.content_md5 or "",
            },
        )

    def _copy_object(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        source = exchange.headers["x-oss-copy-source"]
        source_path = source.split("?", 1)[0]
        source_bucket, _, source_key = source_path.lstrip("/").partition("/")
        source_bucket, source_key = unquote(source_bucket), unquote(source_key)
        replace = exchange.headers.get("x-oss-metadata-directive", "COPY").upper() == "REPLACE"
        with self._lock:
            if source_bucket not in self._buckets:
                raise OssError(
                    404, "NoSuchBucket", "The specified bucket does not exist.", {"BucketName": source_bucket}
                )
            original = self._buckets[source_bucket].objects.get(source_key)
            if original is None:
                raise OssError(404, "NoSuchKey", "The specified key does not exist.", {"Key": source_key})
            match = exchange.headers.get("x-oss-copy-source-if-match")
            if match is not None and match.strip('"') != original.etag:
                raise OssError(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold.",
                )
            obj = StoredObject(
                data=original.data,
                etag=original.etag,
                crc64=original.crc64,
                last_modified=self.clock(),
                object_type=original.object_type,
                content_type=exchange.headers.get("content-type", original.content_type)
                if replace
                else original.content_type,
                metadata=_user_metadata(exchange.headers) if replace else original.metadata,
                content_md5=original.content_md5,
            )
            self._bucket(exchange.bucket).store(exchange.key, obj)
        root = ET.Element("CopyObjectResult")
        _sub(root, "ETag", _quoted(obj.etag))
        _sub(root, "LastModified", _iso8601(obj.last_modified))
        return _stored_response(root, obj)

    def _head_object(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            obj = self._stored(exchange)
        _check_conditions(exchange, obj)
        headers = _object_headers(obj)
        headers["Content-Length"] = str(obj.size)
        return _Response(200, headers)

    def _get_object_meta(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            obj = self._stored(exchange)
        return _Response(
            200,
            {
                "Content-Length": str(obj.size),
                "ETag": _quoted(obj.etag),
                "Last-Modified": _http_date(obj.last_modified),
            },
        )

    def _get_object(self, exchange: _Exchange, fault: str, record: OssRecord) -> _Response:
        with self._lock:
            obj = self._stored(exchange)
            hooks = list(self._get_hooks)
        _check_conditions(exchange, obj)
        headers = _object_headers(obj)
        for param, header in RESPONSE_OVERRIDES.items():
            if param in exchange.query:
                headers[header] = exchange.query[param]
        span = _parse_range(
            exchange.headers.get("range", ""),
            obj.size,
            exchange.headers.get("x-oss-range-behavior", "").lower() == "standard",
        )
        view = memoryview(obj.data)
        status = 200
        if span is not None:
            start, end = span
            view = view[start : end + 1]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{obj.size}"
            record.range = span
        headers["Content-Length"] = str(len(view))
        rate = self.bandwidth_bytes_per_second
        limit = exchange.headers.get("x-oss-traffic-limit")
        if limit and limit.isdigit():  # bit/s, as OSS single-connection traffic control
            rate = min(rate or math.inf, int(limit) / 8)
        response = _Response(status, headers, view, stream=True, rate=rate)
        if fault == "drop":
            response.drop_after = len(view) // 2
        elif fault == "corrupt" and len(view):
            response.corrupt_at = len(view) // 2
        for hook in hooks:
            hook(exchange.bucket, exchange.key)
        return response

    def _delete_object(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            self._bucket(exchange.bucket).remove(exchange.key)
        return _Response(204)

    def _initiate_multipart_upload(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        upload = _Upload(
            upload_id=secrets.token_hex(16).upper(),
            bucket=exchange.bucket,
            key=exchange.key,
            initiated=self.clock(),
            content_type=exchange.headers.get("content-type", "application/octet-stream"),
            metadata=_user_metadata(exchange.headers),
        )
        with self._lock:
            self._bucket(exchange.bucket).uploads[upload.upload_id] = upload
        encode = _encoder(exchange.query)
        root = _result_root("InitiateMultipartUploadResult", exchange.query)
        _sub(root, "Bucket", exchange.bucket)
        _sub(root, "Key", encode(exchange.key))
        _sub(root, "UploadId", upload.upload_id)
        return _xml_response(root)

    def _upload(self, exchange: _Exchange) -> _Upload:
        upload = self._bucket(exchange.bucket).uploads.get(exchange.query.get("uploadId", ""))
        if upload is None or upload.key != exchange.key:
            raise OssError(
                404,
                "NoSuchUpload",
                "The specified upload does not exist. The upload ID may be invalid, "
                "or the upload may have been aborted or completed.",
                {"UploadId": exchange.query.get("uploadId", "")},
            )
        return upload

    def _upload_part(self, exchange: _Exchange, fault: str, _record: OssRecord) -> _Response:
        number = _int_param(exchange.query, "partNumber", 0, 1, MAX_PART_NUMBER)
        _check_content_md5(exchange)
        data = _corrupted(exchange.body) if fault == "corrupt" else exchange.body
        part = _Part(data, content_etag(data), crc64(data), self.clock())
        with self._lock:
            self._upload(exchange).parts[number] = part
        return _Response(200, {"ETag": _quoted(part.etag), "x-oss-hash-crc64ecma": str(part.crc64)})

    def _complete_multipart_upload(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            upload = self._upload(exchange)
            available = dict(upload.parts)
        if exchange.headers.get("x-oss-complete-all", "").lower() == "yes":
            wanted = [(n, available[n].etag) for n in sorted(available)]
        else:
            wanted = _parse_complete_body(exchange.body)
        parts: list[_Part] = []
        for index, (number, etag) in enumerate(wanted):
            if index and number <= wanted[index - 1][0]:
                raise OssError(400, "InvalidPartOrder", "The list of parts was not in ascending order.")
            part = available.get(number)
            if part is None or part.etag != etag.strip('"').upper():
                raise OssError(
                    400,
                    "InvalidPart",
                    "One or more of the specified parts could not be found or the specified entity tag "
                    "might not have matched the part's entity tag.",
                    {"PartNumber": str(number)},
                )
            if index < len(wanted) - 1 and len(part.data) < MIN_PART_SIZE:
                raise OssError(
                    400,
                    "EntityTooSmall",
                    "Your proposed upload is smaller than the minimum allowed size.",
                    {"PartNumber": str(number)},
                )
            parts.append(part)
        whole_crc = 0
        for part in parts:
            if part.data:
                whole_crc = _CRC64.combine(whole_crc, part.crc64, len(part.data))
        obj = StoredObject(
            data=b"".join(p.data for p in parts),
            etag=multipart_etag(p.etag for p in parts),
            crc64=whole_crc,
            last_modified=self.clock(),
            object_type="Multipart",
            content_type=upload.content_type,
            metadata=upload.metadata,
        )
        with self._lock:
            bucket = self._bucket(exchange.bucket)
            if bucket.uploads.pop(upload.upload_id, None) is None:
                raise OssError(404, "NoSuchUpload", "The specified upload does not exist.")
            bucket.store(exchange.key, obj)
        encode = _encoder(exchange.query)
        root = _result_root("CompleteMultipartUploadResult", exchange.query)
        _sub(root, "Location", f"{self.endpoint}/{exchange.bucket}/{_url_encode(exchange.key)}")
        _sub(root, "Bucket", exchange.bucket)
        _sub(root, "Key", encode(exchange.key))
        _sub(root, "ETag", _quoted(obj.etag))
        return _stored_response(root, obj)

    def _abort_multipart_upload(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        with self._lock:
            upload = self._upload(exchange)
            del self._bucket(exchange.bucket).uploads[upload.upload_id]
        return _Response(204)

    def _list_parts(self, exchange: _Exchange, _fault: str, _record: OssRecord) -> _Response:
        marker = _int_param(exchange.query, "part-number-marker", 0, 0, MAX_PART_NUMBER)
        max_parts = _int_param(exchange.query, "max-parts", 1000, 1, 1000)
        with self._lock:
            upload = self._upload(exchange)
            numbers = sorted(n for n in upload.parts if n > marker)
            parts = [(n, upload.parts[n]) for n in numbers[:max_parts]]
        truncated = len(numbers) > max_parts
        root = ET.Element("ListPartsResult")
        _sub(root, "Bucket", exchange.bucket)
        _sub(root, "Key", exchange.key)
        _sub(root, "UploadId", upload.upload_id)
        _sub(root, "PartNumberMarker", marker)
        _sub(root, "NextPartNumberMarker", parts[-1][0] if parts else marker)
        _sub(root, "MaxParts", max_parts)
        _sub(root, "IsTruncated", str(truncated).lower())
        for number, part in parts:
            node = _sub(root, "Part")
            _sub(node, "PartNumber", number)
            _sub(node, "LastModified", _iso8601(part.last_modified))
            _sub(node, "ETag", _quoted(part.etag))
            _sub(node, "HashCrc64ecma", part.crc64)
            _sub(node, "Size", len(part.data))
        return _xml_response(root)

    # ----------------------------------------------------------------------------- admin

    def _admin(self, method: str, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """Emulator-only endpoints for out-of-process benchmarks (never part of OSS)."""
        try:
            if method == "POST" and path == "/_admin/generate":
                keys = self.generate(
                    query["bucket"],
                    query.get("prefix", ""),
                    int(query["count"]),
                    int(query["size"]),
                    query.get("seed", "0"),
                )
                return 200, {
                    "bucket": query["bucket"],
                    "count": len(keys),
                    "first": keys[:1],
                    "last": keys[-1:],
                }
            if method == "GET" and path == "/_admin/stats":
                return 200, self.stats()
            if method == "POST" and path == "/_admin/reset":
                self.clear_records()
                return 200, {}
        except (KeyError, ValueError) as exc:
            return 400, {"error": repr(exc)}
        return 404, {"error": f"no admin endpoint {method} {path}"}


_Handler = Callable[[OssEmulator, _Exchange, str, OssRecord], _Response]
_HANDLERS: dict[str, _Handler] = {
    "ListBuckets": OssEmulator._list_buckets,
    "PutBucket": OssEmulator._put_bucket,
    "DeleteBucket": OssEmulator._delete_bucket,
    "GetBucketInfo": OssEmulator._get_bucket_info,
    "GetBucketLocation": OssEmulator._get_bucket_location,
    "ListObjects": OssEmulator._list_objects,
    "ListObjectsV2": OssEmulator._list_objects_v2,
    "ListMultipartUploads": OssEmulator._list_multipart_uploads,
    "DeleteMultipleObjects": OssEmulator._delete_multiple_objects,
    "PutObject": OssEmulator._put_object,
    "CopyObject": OssEmulator._copy_object,
    "GetObject": OssEmulator._get_object,
    "HeadObject": OssEmulator._head_object,
    "GetObjectMeta": OssEmulator._get_object_meta,
    "DeleteObject": OssEmulator._delete_object,
    "InitiateMultipartUpload": OssEmulator._initiate_multipart_upload,
    "UploadPart": OssEmulator._upload_part,
    "CompleteMultipartUpload": OssEmulator._complete_multipart_upload,
    "AbortMultipartUpload": OssEmulator._abort_multipart_upload,
    "ListParts": OssEmulator._list_parts,
}
assert set(_HANDLERS) == OPERATIONS
#: Signed sub-resources each operation understands; any other one makes the request unsupported.
_ALLOWED_SUBRESOURCES: dict[str, frozenset[str]] = {
    "ListObjectsV2": frozenset({"continuation-token"}),
    "GetBucketInfo": frozenset({"bucketInfo"}),
    "GetBucketLocation": frozenset({"location"}),
    "ListMultipartUploads": frozenset({"uploads"}),
    "DeleteMultipleObjects": frozenset({"delete"}),
    "UploadPart": frozenset({"uploadId", "partNumber"}),
    "GetObjectMeta": frozenset({"objectMeta"}),
    "InitiateMultipartUpload": frozenset({"uploads", "sequential"}),
    "CompleteMultipartUpload": frozenset({"uploadId"}),
    "AbortMultipartUpload": frozenset({"uploadId"}),
    "ListParts": frozenset({"uploadId"}),
}


# --------------------------------------------------------------------------------- helpers


def _signature_mismatch(access_key_id: str, string_to_sign: str, canonical: str | None = None) -> OssError:
    extra = {"OSSAccessKeyId": access_key_id, "StringToSign": string_to_sign}
    if canonical is not None:
        extra["CanonicalRequest"] = canonical
    return OssError(
        403,
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
        extra,
    )


def _v1_string_to_sign(exchange: _Exchange) -> bytes:
    """What ``ProviderAuth.__get_bytes_to_sign`` signs, rebuilt from the received request."""
    headers = exchange.headers
    oss_headers = sorted((k, v) for k, v in headers.items() if k.startswith("x-oss-"))
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in oss_headers)
    resource = f"/{exchange.bucket}/{exchange.key}" if exchange.bucket else "/"
    subresources = sorted((k, v) for k, v in exchange.query.items() if k in SIGNED_SUBRESOURCES)
    if subresources:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in subresources)
    date = headers.get("x-oss-date") or headers.get("date", "")
    return "\n".join(
        [
            exchange.method,
            headers.get("content-md5", ""),
            headers.get("content-type", ""),
            date,
            canonical_headers + resource,
        ]
    ).encode()


def _v4_canonical_request(exchange: _Exchange, additional: list[str]) -> bytes:
    """What ``ProviderAuthV4.__get_canonical_request_bytes`` signs, rebuilt from the request."""
    uri = quote(f"/{exchange.bucket}/{exchange.key}" if exchange.bucket else "/", safe="/")
    params = sorted((quote(k, safe=""), quote(v, safe="")) for k, v in exchange.query.items())
    query = "&".join(f"{k}={v}" if v else k for k, v in params)
    signed = {"content-type", "content-md5", *additional}
    headers = sorted((k, v) for k, v in exchange.headers.items() if k.startswith("x-oss-") or k in signed)
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in headers)
    payload = exchange.headers.get("x-oss-content-sha256", "UNSIGNED-PAYLOAD")
    return "\n".join(
        [exchange.method, uri, query, canonical_headers, ";".join(sorted(additional)), payload]
    ).encode()


def _int_param(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name, "")
    if text == "":
        if default < low:
            raise OssError(400, "InvalidArgument", f"{name} is required.", {"ArgumentName": name})
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise OssError(
            400,
            "InvalidArgument",
            f"Argument {name} must be an integer in [{low}, {high}].",
            {"ArgumentName": name, "ArgumentValue": text},
        )
    return value


def _list_bucket_root(bucket: str, prefix: str) -> ET.Element:
    """A ListObjects (v1 or v2) result's root element, with its Name and (encoded) Prefix."""
    root = ET.Element("ListBucketResult")
    _sub(root, "Name", bucket)
    _sub(root, "Prefix", prefix)
    return root


def _add_list_limits(
    root: ET.Element, query: Mapping[str, str], max_keys: int, delimiter: str, truncated: bool
) -> None:
    """A ListObjects result's MaxKeys, (encoded) Delimiter, EncodingType asked for and IsTruncated."""
    _sub(root, "MaxKeys", max_keys)
    _sub(root, "Delimiter", delimiter)
    if query.get("encoding-type"):
        _sub(root, "EncodingType", query["encoding-type"])
    _sub(root, "IsTruncated", str(truncated).lower())


def _result_root(tag: str, query: Mapping[str, str]) -> ET.Element:
    """A result's root element, its first child the ``EncodingType`` the request asked for, if any."""
    root = ET.Element(tag)
    if query.get("encoding-type"):
        _sub(root, "EncodingType", query["encoding-type"])
    return root


def _stored_response(root: ET.Element, obj: StoredObject) -> _Response:
    """The XML result of a request that stored ``obj`` (copy, complete), its ETag and CRC-64 as headers."""
    response = _xml_response(root)
    response.headers.update({"ETag": _quoted(obj.etag), "x-oss-hash-crc64ecma": str(obj.crc64)})
    return response


def _encoder(query: Mapping[str, str]) -> Callable[[str], str]:
    encoding = query.get("encoding-type", "")
    if encoding not in ("", "url"):
        raise OssError(
            400, "InvalidArgument", "The encoding-type must be url.", {"ArgumentName": "encoding-type"}
        )
    return _url_encode if encoding == "url" else (lambda text: text)


def _encode_token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise OssError(
            400,
            "InvalidArgument",
            "The continuation token provided is incorrect.",
            {"ArgumentName": "continuation-token"},
        ) from exc


def _after_prefix(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: none exists)."""
    last = ord(prefix[-1])
    return None if last == 0x10FFFF else prefix[:-1] + chr(last + 1)


def _page(
    keys: list[str], prefix: str, delimiter: str, marker: str, max_keys: int
) -> tuple[list[tuple[str, str]], bool]:
    """One listing page: ("key"|"prefix", name) items after ``marker`` and whether more follow.

    Keys that roll up into a common prefix count once; a common prefix not greater than
    ``marker`` was returned on an earlier page and is skipped, so paging by NextMarker never
    repeats or loses one.
    """
    index = bisect.bisect_right(keys, marker) if marker else 0
    if prefix:
        index = max(index, bisect.bisect_left(keys, prefix))
    items: list[tuple[str, str]] = []
    while index < len(keys):
        key = keys[index]
        if not key.startswith(prefix):
            break
        common = None
        if delimiter:
            position = key.find(delimiter, len(prefix))
            if position >= 0:
                common = key[: position + len(delimiter)]
        if common is not None and common <= marker:
            bound = _after_prefix(common)
            index = bisect.bisect_left(keys, bound) if bound else index + 1
            continue
        if len(items) == max_keys:
            return items, True
        if common is None:
            items.append(("key", key))
            index += 1
        else:
            items.append(("prefix", common))
            bound = _after_prefix(common)
            index = bisect.bisect_left(keys, bound) if bound else index + 1
            while bound is None and index < len(keys) and keys[index].startswith(common):
                index += 1
    return items, False


def _add_items(
    root: ET.Element,
    items: list[tuple[str, str]],
    objects: Mapping[str, StoredObject],
    encode: Callable[[str], str],
    owner: bool,
) -> None:
    for kind, name in items:
        if kind == "key":
            obj = objects[name]
            node = _sub(root, "Contents")
            _sub(node, "Key", encode(name))
            _sub(node, "LastModified", _iso8601(obj.last_modified))
            _sub(node, "ETag", _quoted(obj.etag))
            _sub(node, "Type", obj.object_type)
            _sub(node, "Size", obj.size)
            _sub(node, "StorageClass", "Standard")
            if owner:
                owner_node = _sub(node, "Owner")
                _sub(owner_node, "ID", OWNER_ID)
                _sub(owner_node, "DisplayName", OWNER_ID)
    for kind, name in items:
        if kind == "prefix":
            _sub(_sub(root, "CommonPrefixes"), "Prefix", encode(name))


def _xml_response(root: ET.Element) -> _Response:
    return _Response(200, {"Content-Type": "application/xml"}, _xml(root))


def _object_headers(obj: StoredObject) -> dict[str, str]:
    headers = {
        "Content-Type": obj.content_type,
        "ETag": _quoted(obj.etag),
        "Last-Modified": _http_date(obj.last_modified),
        "Accept-Ranges": "bytes",
        "x-oss-object-type": obj.object_type,
        "x-oss-storage-class": "Standard",
        "x-oss-hash-crc64ecma": str(obj.crc64),
    }
    if obj.content_md5:
        headers["Content-MD5"] = obj.content_md5
    headers.update({f"x-oss-meta-{k}": v for k, v in obj.metadata.items()})
    return headers


def _user_metadata(headers: Mapping[str, str]) -> dict[str, str]:
    return {k[len("x-oss-meta-") :]: v for k, v in headers.items() if k.startswith("x-oss-meta-")}


def _check_content_md5(exchange: _Exchange) -> None:
    sent = exchange.headers.get("content-md5")
    if sent is not None and sent != base64.b64encode(hashlib.md5(exchange.body).digest()).decode():
        raise OssError(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")


def _check_conditions(exchange: _Exchange, obj: StoredObject) -> None:
    """If-Match / If-Unmodified-Since answer 412; If-None-Match / If-Modified-Since answer 304."""
    headers = exchange.headers
    modified = math.floor(obj.last_modified)
    if "if-match" in headers and headers["if-match"].strip('"') != obj.etag:
        raise OssError(
            412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold."
        )
    since = _parse_http_date(headers.get("if-unmodified-since", ""))
    if since is not None and modified > since:
        raise OssError(
            412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold."
        )
    not_modified = False
    if "if-none-match" in headers:
        not_modified = headers["if-none-match"].strip('"') == obj.etag
    else:
        since = _parse_http_date(headers.get("if-modified-since", ""))
        not_modified = since is not None and modified <= since
    if not_modified:
        error = OssError(304, "", "")
        error.headers = {"ETag": _quoted(obj.etag), "Last-Modified": _http_date(obj.last_modified)}
        raise error


def _parse_range(header: str, size: int, standard: bool) -> tuple[int, int] | None:
    """The (first, last) byte a Range asks for, None for the whole object (200), or 416.

    Follows OSS: only ``bytes=`` with the first of several ranges; by default anything invalid or
    out of range is ignored; with ``x-oss-range-behavior: standard`` the end is clamped, an
    over-long suffix returns the whole object as 206 and a start past the end is 416.
    """
    if not header.startswith("bytes="):
        return None
    match = _RANGE_RE.match(header[len("bytes=") :].split(",")[0])
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first_text, last_text = match.groups()
    unsatisfiable = OssError(416, "InvalidRange", "The requested range cannot be satisfied.")
    unsatisfiable.headers = {"Content-Range": f"bytes */{size}"}
    if first_text == "":  # suffix: the last N bytes
        length = int(last_text)
        if standard:
            if length == 0 or size == 0:
                raise unsatisfiable
            return max(0, size - length), size - 1
        return (size - length, size - 1) if 0 < length <= size else None
    first = int(first_text)
    last = int(last_text) if last_text else size - 1
    if last < first:
        return None
    if standard:
        if first >= size:
            raise unsatisfiable
        return first, min(last, size - 1)
    return (first, last) if last < size else None


def _parse_complete_body(body: bytes) -> list[tuple[int, str]]:
    try:
        root = ET.fromstring(body)
        parts = [
            (int(node.findtext("PartNumber") or ""), node.findtext("ETag") or "")
            for node in root.findall("Part")
        ]
    except (ET.ParseError, ValueError) as exc:
        raise OssError(400, "MalformedXML", "The XML you provided was not well-formed.") from exc
    if not parts:
        raise OssError(400, "MalformedXML", "The XML you provided was not well-formed.")
    return parts


def _corrupted(data: bytes) -> bytes:
    """``data`` with its middle byte flipped (empty data stays empty)."""
    if not data:
        return data
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


# --------------------------------------------------------------------------------- HTTP layer


class _Server(ThreadingHTTPServer):
    """A threading server that remembers its connections so ``stop`` can cut keep-alive ones."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _OssHandler(BaseHTTPRequestHandler):
    """Turns raw HTTP into an :class:`_Exchange` and streams the answer back."""

    emulator: ClassVar[OssEmulator]
    protocol_version = "HTTP/1.1"  # keep-alive: requests' pool reuses connections
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server_version = "AliyunOSS"
    sys_version = ""

    def _handle(self) -> None:
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = self._read_body(headers)
        except (ValueError, OSError):
            self.close_connection = True
            return
        if url.path.startswith("/_admin/"):
            self._admin(url.path, dict(parse_qsl(url.query, keep_blank_values=True)))
            return
        exchange = _Exchange(
            method=self.command,
            path=url.path,
            query=dict(parse_qsl(url.query, keep_blank_values=True)),
            headers=headers,
            body=body,
        )
        response, record = self.emulator._serve(exchange)
        if response is None:
            self._cut()
            return
        try:
            self._write(response, record)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client gave up mid-answer

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _read_body(self, headers: Mapping[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunk = self.rfile.read(size)
                if len(chunk) != size:
                    raise ValueError("truncated chunk")
                chunks.append(chunk)
                self.rfile.readline(1024)
        length = int(headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            raise ValueError("truncated body")
        return body

    def _admin(self, path: str, query: dict[str, str]) -> None:
        status, payload = self.emulator._admin(self.command, path, query)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _cut(self) -> None:
        """Close the connection now: FIN after whatever was sent, no further requests on it."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _write(self, response: _Response, record: OssRecord) -> None:
        body = memoryview(response.body)
        headers = response.headers
        headers.setdefault("Content-Length", str(len(body)))
        if response.drop_after is not None and len(body) == 0:
            self._cut()  # nothing to cut in the middle of: drop before the answer
            return
        self.send_response(response.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if response.head or not len(body):
            return
        if not response.stream:
            self._send(body, record)
            return
        limit = len(body) if response.drop_after is None else response.drop_after
        rate = response.rate
        chunk = self.emulator.chunk_size
        if rate:
            chunk = max(16 * 1024, min(chunk, int(rate / 20)))
        started = time.monotonic()
        offset = 0
        while offset < limit:
            piece = body[offset : min(offset + chunk, limit)]
            corrupt_at = response.corrupt_at
            if corrupt_at is not None and offset <= corrupt_at < offset + len(piece):
                flipped = bytearray(piece)  # copy only the chunk holding the flipped byte
                flipped[corrupt_at - offset] ^= 0xFF
                piece = memoryview(flipped)
            self._send(piece, record)
            offset += len(piece)
            if rate:
                delay = started + offset / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        if response.drop_after is not None:
            self._cut()

    def _send(self, piece: memoryview, record: OssRecord) -> None:
        with self.emulator._lock:  # counted before the write: a client that read it sees it counted
            record.bytes_sent += len(piece)
        try:
            self.wfile.write(piece)
        except OSError:
            with self.emulator._lock:
                record.bytes_sent -= len(piece)
            raise

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean: requests are recorded on the emulator instead."""


# --------------------------------------------------------------------------------- processes

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def start_subprocess(
    access_keys: Mapping[str, str] | None = None,
    *,
    latency_ms: float = 0.0,
    bandwidth_mbps: float | None = None,
    buckets: Iterable[str] = (),
    region: str = DEFAULT_REGION,
    timeout: float = 20.0,
) -> tuple[subprocess.Popen[str], str]:
    """Run the emulator as its own process (for benchmarks); return it and its endpoint.

    ``bandwidth_mbps`` is megabytes (10**6 bytes) per second per connection. The caller owns the
    process: ``proc.terminate(); proc.wait()``.
    """
    command = [sys.executable, "-m", "fakes.oss", "--port", "0", "--region", region]
    for access_key_id, secret in (access_keys or {DEFAULT_ACCESS_KEY_ID: DEFAULT_ACCESS_KEY_SECRET}).items():
        command += ["--access-key", f"{access_key_id}:{secret}"]
    if latency_ms:
        command += ["--latency-ms", str(latency_ms)]
    if bandwidth_mbps:
        command += ["--bandwidth-mbps", str(bandwidth_mbps)]
    for bucket in buckets:
        command += ["--bucket", bucket]
    proc = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline() if proc.stdout else ""))
    reader.start()
    reader.join(timeout)
    endpoint = lines[0].strip() if lines else ""
    if not endpoint.startswith("http://"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the OSS emulator process did not print its endpoint (got {endpoint!r})")
    return proc, endpoint


def _admin_call(
    endpoint: str, method: str, path: str, query: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    url = f"{endpoint}{path}"
    if query:
        url += "?" + "&".join(f"{quote(str(k))}={quote(str(v), safe='')}" for k, v in query.items())
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())


def generate_remote(
    endpoint: str, bucket: str, prefix: str, count: int, size: int, seed: int | str = 0
) -> int:
    """Ask an emulator (any process) to create objects like :meth:`OssEmulator.generate`; return count."""
    query = {"bucket": bucket, "prefix": prefix, "count": count, "size": size, "seed": seed}
    return int(_admin_call(endpoint, "POST", "/_admin/generate", query)["count"])


def remote_stats(endpoint: str) -> dict[str, Any]:
    """Request counts and bytes of an emulator running in any process."""
    return _admin_call(endpoint, "GET", "/_admin/stats")


def reset_remote_stats(endpoint: str) -> None:
    _admin_call(endpoint, "POST", "/_admin/reset")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fakes.oss",
        description="OSS emulator: prints its endpoint as the first stdout line, serves until killed.",
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--region", default=DEFAULT_REGION)
    parser.add_argument(
        "--access-key",
        action="append",
        default=[],
        metavar="AK:SK",
        help="repeatable; default test-ak:test-sk",
    )
    parser.add_argument(
        "--bucket", action="append", default=[], help="bucket to create at start (repeatable)"
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="first-byte latency of every answer")
    parser.add_argument(
        "--bandwidth-mbps",
        type=float,
        default=None,
        help="per-connection GET body cap in megabytes (10**6 bytes) per second",
    )
    args = parser.parse_args(argv)
    keys = dict(item.split(":", 1) for item in args.access_key) if args.access_key else None
    emulator = OssEmulator(
        keys,
        region=args.region,
        latency_seconds=args.latency_ms / 1000,
        bandwidth_bytes_per_second=args.bandwidth_mbps * 1e6 if args.bandwidth_mbps else None,
        port=args.port,
    )
    for bucket in args.bucket:
        emulator.create_bucket(bucket)
    emulator.start()
    print(emulator.endpoint, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
