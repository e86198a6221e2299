"""Publish an artifact set under an ``oss://`` artifact root: one writer at a time, no foreign object touched.

The set goes to ``<artifact_root><model>/<dataset version>/<job>/`` (the target prefix). OSS has no
rename, so the local path's partial directory has no counterpart here: objects are written in place,
manifest.json last. What keeps publishers apart, and away from objects that are not theirs:

1. A lock object beside the target, ``<...>/<dataset version>/.<job>.lock``, created by PutObject with
   ``x-oss-forbid-overwrite: true``. Its JSON body names the holder, a token, an expiry and the keys
   under the target the publication writes or removes. While it is held, a second publisher fails
   with an ArtifactError naming the holder and the expiry. The holder pushes the expiry forward every
   ``RENEW_SECONDS``, so only the lock of a publisher that died (or stalled for ``LOCK_TTL_SECONDS``)
   expires; the next publisher breaks an expired lock and adopts the keys it named, so what a killed
   publication left behind is recognised as ours rather than refused as foreign.
2. Under the lock the target prefix is listed. Objects without a manifest.json of an artifact set
   (foreign content), or objects neither that manifest nor a broken lock names (a foreign object
   inside our set), refuse the publication before anything is uploaded, with a SpecError naming
   artifact_root, the target and the fix, as ``publish.check_publishable`` does on a filesystem.
3. The set is uploaded (``upload_directory``: CRC64-checked, manifest last). Right before the
   manifest, and before anything is deleted, the holder checks the lock is still its own: a
   publisher whose lock was broken never commits a set.
4. Objects of the previous set that the new one no longer has are deleted; the lock is released.

``revise_on_oss`` rewrites objects of a published set (its manifest and report, once the promotion's
outcome is known: ``artifacts.outcome``) under the same lock, each by one PutObject.

A reader of the previous manifest may meet objects of the new set while it is uploaded (objects are
overwritten in place); the manifest's sha256 per file tells them apart.

OSS rules relied on, and where each comes from:

- PutObject with ``x-oss-forbid-overwrite: true`` on an existing key answers 409 ``FileAlreadyExists``
  and stores nothing (OSS error reference 0026-00000201; ``fakes/oss.py`` ``_put_object`` checks and
  stores under one lock, so of two creates exactly one succeeds). oss2 2.19 has no class for that
  code: ``make_exception`` raises ``oss2.exceptions.ServerError`` with status 409 and that code, which
  ``is_transient_oss_error`` does not retry. The emulator models no bucket versioning: that the header
  holds on a versioned bucket is not checked here.
- DeleteObject answers 204 whether or not the key exists (OSS; ``fakes/oss.py`` ``_delete_object``),
  so a retried release is harmless. It takes no precondition (no If-Match), so breaking an expired
  lock re-reads its ETag just before the delete: two publishers breaking the same expired lock in
  the same instant (one request apart) could both go on, the one case the lock does not cover.
- DeleteMultipleObjects takes 1 to 1000 keys a request (OSS; the emulator answers 400 MalformedXML
  otherwise) and oss2's ``batch_delete_objects`` refuses an empty list before sending: stale keys go
  in batches of at most 1000, and no request is made when there are none.
- ListObjectsV2 pages (up to 1000 keys each, followed by oss2's iterator): ``staging.oss.iter_objects``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import posixpath
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aliyun_training.artifacts.manifest import FIELD, MANIFEST_NAME, REPORT_NAME, ArtifactError
from aliyun_training.oss_location import OssLocation, parse_oss_uri
from aliyun_training.staging.oss import (
    OssClientConfig,
    is_transient_oss_error,
    iter_objects,
    upload_directory,
)
from aliyun_training.staging.publish import holder_description
from aliyun_training.staging.sources import with_retries
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

#: How long a lock holds without renewal; the holder renews it every RENEW_SECONDS.
LOCK_TTL_SECONDS = 300.0
RENEW_SECONDS = 60.0
#: Tries per request (transient errors) and rounds of taking a lock that keeps changing hands.
ATTEMPTS = 4
#: DeleteMultipleObjects' limit per request.
DELETE_BATCH = 1000
log = logging.getLogger(__name__)


def publish_to_oss(built: Path, target_uri: str, config: OssClientConfig) -> tuple[int, int]:
    """Publish the set in the directory ``built`` at ``target_uri``, one writer at a time; (files, bytes)."""
    location = parse_oss_uri(target_uri, field=FIELD)
    bucket = config.bucket(location.bucket, enable_crc=True)
    names = sorted(p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file())
    with _locked(bucket, location, names) as lock:
        previous = _previous_set(bucket, location, lock.adopted)
        lock.claim(previous)
        files, size = upload_directory(
            built, location.uri, config, last=[MANIFEST_NAME], before_last=lock.verify
        )
        lock.verify()
        _delete(bucket, location.prefix, sorted(set(previous) - set(names)))
    return files, size


def revise_on_oss(
    target_uri: str, config: OssClientConfig, revise: Callable[[bytes | None], dict[str, bytes]]
) -> bool:
    """Replace objects of the set at ``target_uri`` with what ``revise`` makes of its manifest (None:
    it has none), in ``revise``'s order; whether any was written.

    Under the target's lock, as a publication: no publisher of the set writes meanwhile. PutObject
    replaces an object whole (a reader gets the old one or the new one), and each is written only
    while the lock is still ours.
    """
    location = parse_oss_uri(target_uri, field=FIELD)
    bucket = config.bucket(location.bucket, enable_crc=True)
    with _locked(bucket, location, [MANIFEST_NAME, REPORT_NAME]) as lock:
        files = revise(_read_object(bucket, location.prefix + MANIFEST_NAME))
        for name, data in files.items():
            lock.verify()
            with_retries(
                functools.partial(bucket.put_object, location.prefix + name, data),
                is_transient_oss_error,
                ATTEMPTS,
            )
    return bool(files)


def _read_object(bucket: Any, key: str) -> bytes | None:
    """The object at ``key``; None when there is none."""
    import oss2

    try:
        return with_retries(lambda: bucket.get_object(key).read(), is_transient_oss_error, ATTEMPTS)
    except oss2.exceptions.NoSuchKey:
        return None


class _Lock:
    """The target's lock object as its holder keeps it: renewed in the background, checked on demand."""

    def __init__(self, bucket: Any, location: OssLocation, names: list[str]) -> None:
        self.bucket = bucket
        self.target = location.uri
        head, _, name = location.prefix.rstrip("/").rpartition("/")
        self.key = posixpath.join(head, f".{name}.lock")
        self.uri = f"oss://{location.bucket}/{self.key}"
        self.body: dict[str, Any] = {
            "holder": holder_description(),
            "token": uuid.uuid4().hex,
            "target": self.target,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            "expires": _expiry(),
            "keys": names,
        }
        #: Keys a broken lock named: left by a publication of this set that died.
        self.adopted: set[str] = set()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="artifact-lock", daemon=True)

    def acquire(self) -> None:
        """Create the lock object, breaking it first when its holder let it expire."""
        for _ in range(ATTEMPTS):
            if self._create():
                self._renewer.start()
                return
            held = _read_lock(self.bucket, self.key)
            if held is None:
                continue  # released between our create and our read
            body, etag = held
            if body is None:
                raise SpecError(
                    f"{FIELD}: {self.uri}, where the lock of {self.target} goes, holds an object that is not "
                    "such a lock, so it was not written here and is never replaced (fix: move it away)"
                )
            if self._ours(body):  # our create succeeded; only its answer was lost
                self._renewer.start()
                return
            if not _expired(body):
                raise self._busy(body)
            self._break(body, etag)
        raise ArtifactError(
            f"{FIELD}: the lock {self.uri} of {self.target} changed hands {ATTEMPTS} times while this run "
            "tried to take it; nothing was uploaded (fix: run again once the other publishers finished)"
        )

    def claim(self, keys: list[str]) -> None:
        """Name ``keys`` in the lock too (the previous set, which this publication replaces)."""
        with self._mutex:
            if set(keys) <= set(self.body["keys"]):
                return
            self.body["keys"] = sorted(set(self.body["keys"]) | set(keys))
            self._put(forbid_overwrite=False)

    def verify(self) -> None:
        """Raise ArtifactError unless the lock is still ours (nothing may be committed otherwise)."""
        body = self._current()
        if not self._ours(body):
            now = f"now held by {body['holder']}" if body else "it is gone"
            raise ArtifactError(
                f"{FIELD}: this run lost the lock {self.uri} of {self.target} while uploading ({now}): it "
                f"could not renew it for {LOCK_TTL_SECONDS:.0f} s and another publisher broke it; "
                f"{MANIFEST_NAME} was not written, so what this run uploaded is not a published set "
                "(fix: run again once the other publication finished)"
            )

    def release(self) -> None:
        """Stop renewing and delete the lock if it is still ours; a failure leaves it to expire."""
        import oss2

        self._stop.set()
        if self._renewer.is_alive():
            self._renewer.join()
        try:
            if self._ours(self._current()):
                with_retries(lambda: self.bucket.delete_object(self.key), is_transient_oss_error, ATTEMPTS)
        except (oss2.exceptions.OssError, OSError) as exc:
            log.warning("Could not release %s (%s); it expires by %s", self.uri, exc, self.body["expires"])

    def _current(self) -> dict[str, Any] | None:
        """The lock object's body now; None when it is gone or is no lock."""
        held = _read_lock(self.bucket, self.key)
        return held[0] if held else None

    def _ours(self, body: dict[str, Any] | None) -> bool:
        return body is not None and body["token"] == self.body["token"]

    def _create(self) -> bool:
        """Whether PutObject with forbid-overwrite created the lock (False: the key exists)."""
        import oss2

        try:
            with self._mutex:
                self._put(forbid_overwrite=True)
        except oss2.exceptions.OssError as exc:
            if (exc.status, exc.code) != (409, "FileAlreadyExists"):
                raise
            return False
        return True

    def _put(self, *, forbid_overwrite: bool) -> None:
        headers = {"x-oss-forbid-overwrite": "true"} if forbid_overwrite else {}
        data = json.dumps(self.body).encode()
        with_retries(
            lambda: self.bucket.put_object(self.key, data, headers=headers), is_transient_oss_error, ATTEMPTS
        )

    def _break(self, body: dict[str, Any], etag: str) -> None:
        """Delete an expired lock unless it changed since it was read; adopt the keys it named."""
        import oss2

        try:
            now = with_retries(lambda: self.bucket.head_object(self.key), is_transient_oss_error, ATTEMPTS)
        except oss2.exceptions.NoSuchKey:
            return
        if now.etag != etag:
            return  # renewed or replaced meanwhile: look again
        log.warning("Breaking the lock %s of %s: it expired at %s", self.uri, body["holder"], body["expires"])
        with_retries(lambda: self.bucket.delete_object(self.key), is_transient_oss_error, ATTEMPTS)
        self.adopted |= set(body["keys"])
        self.body["keys"] = sorted(set(self.body["keys"]) | self.adopted)

    def _busy(self, body: dict[str, Any]) -> ArtifactError:
        return ArtifactError(
            f"{FIELD}: another publisher is writing {self.target}: its lock {self.uri} is held by "
            f"{body['holder']} until {body['expires']} (renewed while it runs); nothing was uploaded "
            "(fix: two runs publish the same set — same model, dataset version and job name; let the "
            "other one finish and run this one again if its set should replace that one; if that "
            f"publisher is no longer running, its lock expires at {body['expires']} and the next run "
            "breaks it)"
        )

    def _renew(self) -> None:
        """Push the expiry forward while the lock is ours; verify() catches a lock lost meanwhile."""
        import oss2

        while not self._stop.wait(RENEW_SECONDS):
            try:
                if not self._ours(self._current()):
                    return
                with self._mutex:
                    self.body["expires"] = _expiry()
                    self._put(forbid_overwrite=False)
            except (oss2.exceptions.OssError, OSError) as exc:
                log.warning("Could not renew %s (%s); trying again in %.0f s", self.uri, exc, RENEW_SECONDS)


@contextlib.contextmanager
def _locked(bucket: Any, location: OssLocation, names: list[str]) -> Iterator[_Lock]:
    lock = _Lock(bucket, location, names)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


def _read_lock(bucket: Any, key: str) -> tuple[dict[str, Any] | None, str] | None:
    """(lock body, ETag) of the object at ``key``, the body None when it is no lock; None when absent."""
    import oss2

    try:
        result = with_retries(lambda: bucket.get_object(key), is_transient_oss_error, ATTEMPTS)
        data = result.read()
    except oss2.exceptions.NoSuchKey:
        return None
    return _lock_body(data), result.etag


def _lock_body(data: bytes) -> dict[str, Any] | None:
    """The body of a lock this module wrote, or None."""
    try:
        body = json.loads(data)
        valid = (
            isinstance(body["holder"], str)
            and isinstance(body["token"], str)
            and isinstance(body["keys"], list)
            and datetime.fromisoformat(body["expires"]).tzinfo is not None
        )
    except (ValueError, TypeError, KeyError):
        return None
    return body if valid else None


def _expiry() -> str:
    return (datetime.now(UTC) + timedelta(seconds=LOCK_TTL_SECONDS)).isoformat(timespec="seconds")


def _expired(body: dict[str, Any]) -> bool:
    return datetime.fromisoformat(body["expires"]) <= datetime.now(UTC)


def _previous_set(bucket: Any, location: OssLocation, adopted: set[str]) -> list[str]:
    """The keys under the target, all of an earlier publication of this set; refuse anything else."""
    listed = _list(bucket, location)
    if not listed:
        return []
    ours = _manifest_keys(bucket, location) if MANIFEST_NAME in listed else None
    if ours is None and not set(listed) <= adopted:
        raise SpecError(
            f"{FIELD}: {location.uri} already holds {_objects(listed)} but no {MANIFEST_NAME} of an "
            "artifact set, so they were not published here; publishing never overwrites or deletes "
            f"objects it did not publish and nothing was uploaded (fix: change {FIELD} (or the model) so "
            "that the set goes to a new prefix, or move those objects away if they may be replaced)"
        )
    foreign = sorted(set(listed) - (ours or set()) - adopted)
    if foreign:
        raise SpecError(
            f"{FIELD}: {location.uri} holds {_objects(foreign)} that its {MANIFEST_NAME} does not list, "
            "so they were not published here; publishing never overwrites or deletes objects it did not "
            f"publish and nothing was uploaded (fix: move them out of {location.uri}, or change {FIELD} "
            "so that the set goes to a new prefix)"
        )
    return listed


def _list(bucket: Any, location: OssLocation) -> list[str]:
    import oss2

    try:
        return [obj.key for obj in iter_objects(bucket, location.prefix)]
    except oss2.exceptions.NoSuchBucket:
        raise SpecError(
            f"{FIELD}: bucket {location.bucket} of {location.uri} does not exist "
            "(fix: correct the bucket name or the region of the OSS endpoint)"
        ) from None


def _manifest_keys(bucket: Any, location: OssLocation) -> set[str] | None:
    """The keys an artifact set's manifest accounts for (its files, itself, its report); None if
    the object is not such a manifest."""
    data = with_retries(
        lambda: bucket.get_object(location.prefix + MANIFEST_NAME).read(), is_transient_oss_error, ATTEMPTS
    )
    try:
        manifest = json.loads(data)
        return {entry["path"] for entry in manifest["files"]} | {MANIFEST_NAME, manifest["report"]}
    except (ValueError, TypeError, KeyError):
        return None


def _delete(bucket: Any, prefix: str, keys: list[str]) -> None:
    """Delete ``keys`` (relative to ``prefix``) in batches DeleteMultipleObjects accepts."""
    for start in range(0, len(keys), DELETE_BATCH):
        batch = [prefix + key for key in keys[start : start + DELETE_BATCH]]
        with_retries(functools.partial(bucket.batch_delete_objects, batch), is_transient_oss_error, ATTEMPTS)
    if keys:
        log.info("Deleted %d objects of the previous set under oss://%s", len(keys), prefix)


def _objects(keys: list[str]) -> str:
    """ "2 objects (a, b)", naming at most three."""
    names = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
    return f"{len(keys)} object{'s' if len(keys) != 1 else ''} ({names})"
