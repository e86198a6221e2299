"""The OSS emulator, driven through the real oss2 SDK over HTTP.

Code that stages datasets and publishes artifacts is tested against this emulator, so these tests
make sure the SDK's own code paths (signing, XML parsing, paging iterators, crc checks, resumable
transfers) work against it unmodified, and that each injected fault looks to the SDK like the
failure it stands for.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from typing import TYPE_CHECKING

import oss2
import pytest
import requests
import urllib3

from fakes.oss import (
    OssEmulator,
    OssFaultPlan,
    crc64,
    generate_remote,
    generated_bytes,
    multipart_etag,
    remote_stats,
    start_subprocess,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

AK, SK = "test-ak", "test-sk"
REGION = "cn-wulanchabu"
BUCKET = "datasets"


@pytest.fixture
def oss() -> Iterator[OssEmulator]:
    with OssEmulator({AK: SK}, region=REGION) as emulator:
        emulator.create_bucket(BUCKET)
        yield emulator
    assert not emulator.internal_errors
    assert not emulator.unsupported


def bucket_for(oss: OssEmulator, auth: object | None = None, name: str = BUCKET) -> oss2.Bucket:
    return oss2.Bucket(auth or oss2.Auth(AK, SK), oss.endpoint, name, region=REGION, connect_timeout=10)


@pytest.fixture
def bucket(oss: OssEmulator) -> oss2.Bucket:
    return bucket_for(oss)


# ------------------------------------------------------------------------------ signatures


@pytest.mark.parametrize(
    ("auth", "access_key_id"),
    [
        (oss2.Auth(AK, SK), AK),
        (oss2.AuthV4(AK, SK), AK),
        (oss2.StsAuth("sts-ak", "sts-sk", "token-1"), "sts-ak"),
        (oss2.StsAuth("sts-ak", "sts-sk", "token-1", auth_version=oss2.AUTH_VERSION_4), "sts-ak"),
    ],
    ids=["v1", "v4", "sts-v1", "sts-v4"],
)
def test_signed_requests_are_accepted(oss: OssEmulator, auth: object, access_key_id: str) -> None:
    oss.accept_token("sts-ak", "sts-sk", "token-1")
    bucket = bucket_for(oss, auth)
    key = "dir/a key+with%odd&chars=ü.bin"  # every escaping rule of the path and both signatures
    bucket.put_object(key, b"payload", headers={"x-oss-meta-origin": "test"})
    assert bucket.get_object(key).read() == b"payload"
    assert [o.key for o in oss2.ObjectIteratorV2(bucket, prefix="dir/", continuation_token="")] == [key]
    assert oss.head(BUCKET, key).metadata == {"origin": "test"}
    assert {r.access_key_id for r in oss.records()} == {access_key_id}


@pytest.mark.parametrize("version", [oss2.AUTH_VERSION_1, oss2.AUTH_VERSION_4])
def test_wrong_secret_is_rejected_with_signature_does_not_match(oss: OssEmulator, version: str) -> None:
    oss.put(BUCKET, "k", b"x")
    bucket = bucket_for(oss, oss2.make_auth(AK, "not-the-secret", version))
    with pytest.raises(oss2.exceptions.SignatureDoesNotMatch) as caught:
        bucket.get_object("k")
    assert caught.value.status == 403
    assert len(caught.value.request_id) == 24
    assert "StringToSign" in caught.value.details


def test_unknown_key_and_bad_sts_token_are_rejected(oss: OssEmulator) -> None:
    oss.accept_token("sts-ak", "sts-sk", "token-1")
    with pytest.raises(oss2.exceptions.ServerError) as unknown:
        bucket_for(oss, oss2.Auth("nobody", SK)).get_bucket_info()
    assert (unknown.value.status, unknown.value.code) == (403, "InvalidAccessKeyId")
    with pytest.raises(oss2.exceptions.ServerError) as bad_token:
        bucket_for(oss, oss2.StsAuth("sts-ak", "sts-sk", "token-2")).get_bucket_info()
    assert bad_token.value.code == "InvalidAccessKeyId"
    oss.expire_token("sts-ak")
    with pytest.raises(oss2.exceptions.ServerError) as expired:
        bucket_for(oss, oss2.StsAuth("sts-ak", "sts-sk", "token-1")).get_bucket_info()
    assert expired.value.code == "SecurityTokenExpired"


def test_v4_with_another_region_is_rejected(oss: OssEmulator) -> None:
    bucket = oss2.Bucket(oss2.AuthV4(AK, SK), oss.endpoint, BUCKET, region="cn-beijing")
    with pytest.raises(oss2.exceptions.InvalidArgument):
        bucket.get_bucket_info()


# ------------------------------------------------------------------------------ buckets and listing


def test_missing_bucket_and_key(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    with pytest.raises(oss2.exceptions.NoSuchBucket):
        bucket_for(oss, name="no-such-bucket").get_object("k")
    with pytest.raises(oss2.exceptions.NoSuchKey):
        bucket.get_object("missing")
    with pytest.raises(oss2.exceptions.NoSuchKey):  # HEAD has no body: the error rides in x-oss-err
        bucket.head_object("missing")
    assert not bucket.object_exists("missing")
    info = bucket.get_bucket_info()
    assert (info.name, info.location) == (BUCKET, f"oss-{REGION}")
    bucket_for(oss, name="fresh-bucket").create_bucket()
    assert "fresh-bucket" in oss.buckets()


KEY_COUNT = 2350


@pytest.fixture
def many_keys(oss: OssEmulator) -> list[str]:
    keys = [f"v1/part-{i:05d}.bin" for i in range(KEY_COUNT)]
    for key in keys:
        oss.put(BUCKET, key, key.encode())
    oss.put(BUCKET, "v1/special key+%&ü.bin", b"s")
    oss.put(BUCKET, "v0/old.bin", b"o")
    return sorted([*keys, "v1/special key+%&ü.bin"])


@pytest.mark.slow
@pytest.mark.parametrize("iterator", [oss2.ObjectIterator, oss2.ObjectIteratorV2])
def test_iterators_page_through_thousands_of_keys(
    oss: OssEmulator, bucket: oss2.Bucket, many_keys: list[str], iterator: type
) -> None:
    listed = list(iterator(bucket, prefix="v1/", max_keys=1000))
    assert [o.key for o in listed] == many_keys
    assert listed[0].size == len(many_keys[0].encode())
    assert listed[0].etag == hashlib.md5(many_keys[0].encode()).hexdigest().upper()
    operation = "ListObjects" if iterator is oss2.ObjectIterator else "ListObjectsV2"
    assert oss.count(operation) == 3  # 1000 + 1000 + 351
    assert [o.key for o in iterator(bucket)] == ["v0/old.bin", *many_keys]  # default max-keys 100


@pytest.mark.parametrize("iterator", [oss2.ObjectIterator, oss2.ObjectIteratorV2])
def test_delimiter_rolls_up_prefixes_across_pages(
    oss: OssEmulator, bucket: oss2.Bucket, iterator: type
) -> None:
    for directory in range(7):
        for i in range(5):
            oss.put(BUCKET, f"root/d{directory}/f{i}", b"x")
    for i in range(3):
        oss.put(BUCKET, f"root/top{i}", b"x")
    listed = list(iterator(bucket, prefix="root/", delimiter="/", max_keys=2))
    prefixes = [o.key for o in listed if o.is_prefix()]
    files = [o.key for o in listed if not o.is_prefix()]
    assert prefixes == [f"root/d{d}/" for d in range(7)]  # each exactly once, though split over pages
    assert files == [f"root/top{i}" for i in range(3)]


def test_list_objects_v2_start_after_and_bad_max_keys(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    for key in ("a", "b", "c", "d"):
        oss.put(BUCKET, key, b"x")
    result = bucket.list_objects_v2(start_after="b", max_keys=1)
    assert [o.key for o in result.object_list] == ["c"]
    assert result.is_truncated
    rest = bucket.list_objects_v2(continuation_token=result.next_continuation_token, max_keys=10)
    assert [o.key for o in rest.object_list] == ["d"]
    assert not rest.is_truncated
    with pytest.raises(oss2.exceptions.InvalidArgument):
        bucket.list_objects(max_keys=1001)


# ------------------------------------------------------------------------------ objects


def test_head_object_reports_what_was_stored(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    data = bytes(range(256)) * 40
    put = bucket.put_object("obj.bin", data)
    head = bucket.head_object("obj.bin")
    md5 = hashlib.md5(data).hexdigest().upper()
    assert (put.etag, head.etag) == (md5, md5)
    assert head.headers["etag"] == f'"{md5}"'
    assert head.content_length == len(data)
    assert head.object_type == "Normal"
    assert head.server_crc == crc64(data) == put.crc
    assert abs(head.last_modified - time.time()) < 5
    assert head.request_id and head.headers["x-oss-request-id"] == head.request_id
    assert oss.bytes_served() == 0  # HEAD sends no object bytes


def test_ranged_get_returns_the_slice_and_the_whole_object_crc(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    data = bytes(i % 251 for i in range(1000))
    oss.put(BUCKET, "r.bin", data)
    part = bucket.get_object("r.bin", byte_range=(100, 199))
    assert part.status == 206
    assert part.headers["Content-Range"] == "bytes 100-199/1000"
    assert part.read() == data[100:200]
    assert part.server_crc == crc64(data)  # the crc of the whole object, as OSS answers
    assert bucket.get_object("r.bin", byte_range=(None, 10)).read() == data[-10:]
    assert bucket.get_object("r.bin", byte_range=(990, None)).read() == data[990:]
    assert oss.records("GetObject")[0].range == (100, 199)


def test_out_of_range_follows_oss_default_and_standard_behaviour(
    oss: OssEmulator, bucket: oss2.Bucket
) -> None:
    data = b"0123456789" * 100
    oss.put(BUCKET, "r.bin", data)
    whole = bucket.get_object("r.bin", byte_range=(500, 2000))  # default: ignored, whole object
    assert (whole.status, whole.read()) == (200, data)
    standard = {"x-oss-range-behavior": "standard"}
    clamped = bucket.get_object("r.bin", byte_range=(500, 2000), headers=standard)
    assert (clamped.status, clamped.headers["Content-Range"]) == (206, "bytes 500-999/1000")
    assert clamped.read() == data[500:]
    with pytest.raises(oss2.exceptions.ServerError) as caught:
        bucket.get_object("r.bin", byte_range=(1000, 2000), headers=standard)
    assert (caught.value.status, caught.value.code) == (416, "InvalidRange")


def test_put_object_crc_is_checked_by_oss2(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    data = b"a" * 50_000
    assert bucket.put_object("p.bin", data).crc == crc64(data)
    oss.fail_next("PutObject", "corrupt")  # the server stores a flipped byte and reports its crc
    with pytest.raises(oss2.exceptions.InconsistentError):
        bucket.put_object("q.bin", data)
    assert oss.get(BUCKET, "q.bin") != data
    assert oss.bytes_uploaded() == 2 * len(data)


def test_conditional_get_and_delete(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    etag = oss.put(BUCKET, "c.bin", b"v1").etag
    assert bucket.get_object("c.bin", headers={"If-Match": etag}).read() == b"v1"
    with pytest.raises(oss2.exceptions.NotModified):
        bucket.get_object("c.bin", headers={"If-None-Match": f'"{etag}"'})
    assert bucket.get_object("c.bin").read() == b"v1"  # the 304 left the keep-alive stream clean
    oss.replace(BUCKET, "c.bin", b"v2")
    with pytest.raises(oss2.exceptions.PreconditionFailed):
        bucket.get_object("c.bin", headers={"If-Match": etag})
    bucket.delete_object("c.bin")
    assert oss.keys(BUCKET) == []
    oss.put(BUCKET, "src.bin", b"copied")
    bucket.copy_object(BUCKET, "src.bin", "dst.bin")
    assert oss.get(BUCKET, "dst.bin") == b"copied"
    assert bucket.batch_delete_objects(["src.bin", "dst.bin"]).deleted_keys == ["src.bin", "dst.bin"]


@pytest.mark.slow
def test_large_object_streams(oss: OssEmulator, bucket: oss2.Bucket, tmp_path: Path) -> None:
    data = generated_bytes(1, "big", 24 * 1024 * 1024)
    oss.put(BUCKET, "big.bin", data)
    started = time.monotonic()
    bucket.get_object_to_file("big.bin", str(tmp_path / "big.bin"))  # checks the crc of the body
    assert time.monotonic() - started < 10
    assert (tmp_path / "big.bin").read_bytes() == data
    assert oss.bytes_served(BUCKET, "big.bin") == len(data)


# ------------------------------------------------------------------------------ multipart and resumable


def test_resumable_upload_uses_multipart(oss: OssEmulator, bucket: oss2.Bucket, tmp_path: Path) -> None:
    data = generated_bytes(7, "upload", 350 * 1024)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    result = oss2.resumable_upload(
        bucket,
        "up/model.bin",
        str(source),
        store=oss2.ResumableStore(root=str(tmp_path)),
        multipart_threshold=100 * 1024,
        part_size=100 * 1024,
        num_threads=2,
    )
    parts = [data[i : i + 100 * 1024] for i in range(0, len(data), 100 * 1024)]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest().upper() + "-4"
    assert multipart_etag(hashlib.md5(p).hexdigest() for p in parts) == expected
    assert result.etag == expected
    assert result.crc == crc64(data)
    stored = oss.head(BUCKET, "up/model.bin")
    assert (stored.data, stored.object_type, stored.etag) == (data, "Multipart", expected)
    assert oss.count("UploadPart") == 4
    assert bucket.head_object("up/model.bin").object_type == "Multipart"
    assert oss.uploads(BUCKET) == []


def test_multipart_rejects_bad_parts_and_abort(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    upload_id = bucket.init_multipart_upload("m.bin").upload_id
    small = bucket.upload_part("m.bin", upload_id, 1, b"x" * 10)
    last = bucket.upload_part("m.bin", upload_id, 2, b"y" * 10)
    listed = bucket.list_parts("m.bin", upload_id)
    assert [(p.part_number, p.size) for p in listed.parts] == [(1, 10), (2, 10)]
    with pytest.raises(oss2.exceptions.ServerError) as too_small:
        bucket.complete_multipart_upload(
            "m.bin", upload_id, [oss2.models.PartInfo(1, small.etag), oss2.models.PartInfo(2, last.etag)]
        )
    assert too_small.value.code == "EntityTooSmall"
    with pytest.raises(oss2.exceptions.ServerError) as wrong_etag:
        bucket.complete_multipart_upload("m.bin", upload_id, [oss2.models.PartInfo(1, "0" * 32)])
    assert wrong_etag.value.code == "InvalidPart"
    bucket.abort_multipart_upload("m.bin", upload_id)
    with pytest.raises(oss2.exceptions.NoSuchUpload):
        bucket.list_parts("m.bin", upload_id)
    assert not oss.keys(BUCKET)


def test_resumable_download_in_ranged_parts(oss: OssEmulator, bucket: oss2.Bucket, tmp_path: Path) -> None:
    data = generated_bytes(3, "download", 450 * 1024)
    oss.put(BUCKET, "d.bin", data)
    target = tmp_path / "d.bin"
    oss2.resumable_download(
        bucket,
        "d.bin",
        str(target),
        store=oss2.ResumableDownloadStore(root=str(tmp_path)),
        multiget_threshold=100 * 1024,
        part_size=100 * 1024,
        num_threads=3,
    )
    assert target.read_bytes() == data  # oss2 also compared the combined part crcs with the server's
    assert oss.count("GetObject") == 5
    assert all(r.range is not None for r in oss.records("GetObject"))
    assert oss.bytes_served(BUCKET, "d.bin") == len(data)


def test_source_changed_during_a_resumable_download(
    oss: OssEmulator, bucket: oss2.Bucket, tmp_path: Path
) -> None:
    oss.put(BUCKET, "d.bin", b"a" * 300 * 1024)
    changed = threading.Event()

    def change_once(bucket_name: str, key: str) -> None:
        if not changed.is_set():
            changed.set()
            oss.replace(bucket_name, key, b"b" * 300 * 1024)

    oss.after_get(change_once)
    with pytest.raises(oss2.exceptions.PreconditionFailed):  # later parts send If-Match: old ETag
        oss2.resumable_download(
            bucket,
            "d.bin",
            str(tmp_path / "d.bin"),
            store=oss2.ResumableDownloadStore(root=str(tmp_path)),
            multiget_threshold=100 * 1024,
            part_size=100 * 1024,
            num_threads=1,
        )
    assert changed.is_set()
    assert oss.count("GetObject", status=412) >= 1


# ------------------------------------------------------------------------------ faults


def test_unavailable_is_a_server_error_that_only_iterators_retry(
    oss: OssEmulator, bucket: oss2.Bucket
) -> None:
    oss.put(BUCKET, "k", b"x")
    oss.fail_next("GetObject", "unavailable")
    with pytest.raises(oss2.exceptions.ServerError) as caught:
        bucket.get_object("k")
    assert (caught.value.status, caught.value.code) == (503, "ServiceUnavailable")
    assert oss.count("GetObject") == 1  # oss2's Bucket does not retry
    assert bucket.get_object("k").read() == b"x"
    oss.fail_next("ListObjects", "unavailable", times=2)
    assert [o.key for o in oss2.ObjectIterator(bucket)] == ["k"]  # 3 tries (request_retries)
    assert oss.count("ListObjects", status=503) == 2
    assert oss.count("ListObjects", status=200) == 1


def test_dropped_connection_mid_body_fails_the_read(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    data = generated_bytes(5, "drop", 3 * 1024 * 1024)
    oss.put(BUCKET, "k", data)
    oss.fail_next("GetObject", "drop", key="k")
    result = bucket.get_object("k")  # headers arrive fine
    assert result.status == 200
    with pytest.raises((requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError)):
        result.read()
    assert oss.bytes_served(key="k") == len(data) // 2
    assert bucket.get_object("k").read() == data  # the pool replaced the dead connection


def test_dropped_request_changes_nothing(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    oss.fail_next("PutObject", "drop")
    with pytest.raises(oss2.exceptions.RequestError):
        bucket.put_object("k", b"data")
    assert oss.keys(BUCKET) == []
    assert [r.status for r in oss.records("PutObject")] == [0]  # neither oss2 nor urllib3 retried


def test_corrupted_body_is_caught_by_crc(oss: OssEmulator, bucket: oss2.Bucket, tmp_path: Path) -> None:
    data = generated_bytes(9, "corrupt", 200_000)
    oss.put(BUCKET, "k", data)
    oss.fail_next("GetObject", "corrupt", times=2)
    result = bucket.get_object("k")
    body = result.read()
    assert len(body) == len(data) and body != data
    assert sum(a != b for a, b in zip(body, data, strict=True)) == 1
    assert result.server_crc == crc64(data) != crc64(body) == result.client_crc
    with pytest.raises(oss2.exceptions.InconsistentError):
        bucket.get_object_to_file("k", str(tmp_path / "k"))


@pytest.mark.slow
def test_slow_fault_and_latency_delay_answers(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    oss.put(BUCKET, "k", b"x")
    oss.fail_next("HeadObject", "slow", seconds=0.3)
    started = time.monotonic()
    bucket.head_object("k")
    assert time.monotonic() - started >= 0.3
    oss.latency_seconds = 0.2
    started = time.monotonic()
    bucket.get_object("k").read()
    assert time.monotonic() - started >= 0.2


@pytest.mark.slow
def test_bandwidth_cap_is_per_connection(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    data = generated_bytes(2, "bw", 2_000_000)
    oss.put(BUCKET, "k", data)
    # A slow cap (2 s for the whole object on one connection, 0.5 s for a quarter) leaves the four
    # connections over a second of room for thread scheduling on a loaded machine.
    oss.bandwidth_bytes_per_second = 1_000_000
    started = time.monotonic()
    assert bucket.get_object("k").read() == data
    sequential = time.monotonic() - started
    assert sequential >= 1.6
    started = time.monotonic()
    pieces: dict[int, bytes] = {}

    def fetch(start: int) -> None:
        pieces[start] = bucket.get_object("k", byte_range=(start, start + 499_999)).read()

    threads = [threading.Thread(target=fetch, args=(start,)) for start in range(0, 2_000_000, 500_000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < sequential * 0.8  # four connections, four caps
    assert b"".join(pieces[start] for start in sorted(pieces)) == data


def test_rate_plan_is_reproducible(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    oss.put(BUCKET, "k", b"x")

    def outcomes() -> list[int]:
        oss.clear_records()
        oss.faults = OssFaultPlan(unavailable_rate=0.5, seed=42, operations=frozenset({"HeadObject"}))
        for _ in range(20):
            with contextlib.suppress(oss2.exceptions.ServerError):
                bucket.head_object("k")
        return [r.status for r in oss.records("HeadObject")]

    first = outcomes()
    assert 0 < first.count(503) < 20
    assert outcomes() == first
    bucket.get_object("k").read()  # not targeted by the plan
    assert oss.count("GetObject", status=200) == 1


def test_stop_cuts_pooled_connections(oss: OssEmulator, bucket: oss2.Bucket) -> None:
    oss.put(BUCKET, "k", b"x")
    bucket.get_object("k").read()
    oss.stop()
    with pytest.raises(oss2.exceptions.RequestError):
        bucket.get_object("k")


# ------------------------------------------------------------------------------ separate process


@pytest.mark.slow
def test_subprocess_serves_and_generates_objects() -> None:
    proc, endpoint = start_subprocess({AK: SK}, buckets=["bench"], latency_ms=1)
    try:
        assert generate_remote(endpoint, "bench", "data/", count=40, size=1000, seed=3) == 40
        bucket = oss2.Bucket(oss2.Auth(AK, SK), endpoint, "bench")
        keys = [o.key for o in oss2.ObjectIterator(bucket, prefix="data/")]
        assert keys == [f"data/{i:06d}" for i in range(40)]
        assert bucket.get_object(keys[7]).read() == generated_bytes(3, keys[7], 1000)
        stats = remote_stats(endpoint)
        assert stats["counts"] == {"ListObjects": 1, "GetObject": 1}
        assert stats["bytes_served"] == 1000
    finally:
        proc.terminate()
        proc.wait(timeout=10)
