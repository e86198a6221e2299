"""Staging from OSS through the real oss2 client against the OSS emulator, and artifacts from and to OSS.

The client is configured from the ``alibaba_cloud_default`` connection (endpoint, V4 signing,
credentials), exactly as the staging operator does it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from aliyun_training.artifacts.collect import publish_artifacts
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.stage_records import BuiltImage, FixedDataset, JobResult, StagedDataset
from aliyun_training.staging import engine
from aliyun_training.staging import oss as oss_module
from aliyun_training.staging.engine import JOURNAL_NAME, MANIFEST_NAME, StagingError, stage_dataset
from aliyun_training.staging.opening import open_source
from aliyun_training.staging.oss import OssClientConfig, OssObjectSource
from aliyun_training.validation import SpecError
from fakes.cloud import emulated_oss
from fakes.oss import OssEmulator, crc64

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "LTAI-staging", "staging-secret-value"
BUCKET = "training-data"
REGION = "cn-wulanchabu"
REPO_ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "labels.json": b'{"classes": ["cat", "dog"]}',
    "train/shard-0.npz": os.urandom(3000),
    "train/shard-1.npz": os.urandom(5000),
    "test.npz": os.urandom(2048),
}
#: Larger than the (lowered) multipart threshold, so it is read as parallel ranges.
BIG = os.urandom(300 * 1024)


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranged reads from 256 KiB in 64 KiB parts, so tests exercise them with small objects."""
    monkeypatch.setattr(engine, "MULTIPART_THRESHOLD", 256 * 1024)
    monkeypatch.setattr(engine, "PART_SIZE", 64 * 1024)


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[OssEmulator]:
    with emulated_oss(monkeypatch, AK, SK, BUCKET) as emulator:
        yield emulator


def put_version(oss: OssEmulator, version: str, files: dict[str, bytes] | None = None) -> str:
    for key, data in {**FILES, "big.bin": BIG, **(files or {})}.items():
        oss.put(BUCKET, f"cifar10/{version}/{key}", data)
    return f"oss://{BUCKET}/cifar10/{version}/"


def source(uri: str) -> OssObjectSource:
    return OssObjectSource(uri, config=OssClientConfig.from_connection("alibaba_cloud_default"))


def staged_files(version_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(version_dir).as_posix(): p.read_bytes()
        for p in version_dir.rglob("*")
        if p.is_file() and p.name != MANIFEST_NAME
    }


def expected(files: dict[str, bytes] | None = None) -> dict[str, bytes]:
    return {**FILES, "big.bin": BIG, **(files or {})}


def gets(oss: OssEmulator, version: str, key: str) -> int:
    return oss.count("GetObject", key=f"cifar10/{version}/{key}", status=None)


@pytest.mark.slow
def test_a_version_is_staged_verified_by_crc64_and_big_objects_come_in_ranges(oss, tmp_path):
    uri = put_version(oss, "v1")

    staged = stage_dataset(source(uri), tmp_path, "v1", workers=4)

    assert staged_files(tmp_path / "v1") == expected()
    assert staged.files == 5 and staged.transferred_files == 5
    assert staged.bytes == staged.transferred_bytes == sum(len(d) for d in expected().values())
    assert staged.source_uri == uri
    manifest = json.loads((tmp_path / "v1" / MANIFEST_NAME).read_text())
    by_path = {entry["path"]: entry for entry in manifest["files"]}
    assert by_path["big.bin"]["crc64"] == str(crc64(BIG))
    assert by_path["big.bin"]["etag"] == oss.head(BUCKET, "cifar10/v1/big.bin").etag
    ranges = [r.range for r in oss.records("GetObject") if r.key == "cifar10/v1/big.bin"]
    assert len(ranges) == 5, "300 KiB in 64 KiB parts"
    assert gets(oss, "v1", "labels.json") == 1


@pytest.mark.slow
def test_listing_pages_through_more_than_a_thousand_objects(oss, tmp_path):
    for i in range(1203):
        oss.put(BUCKET, f"many/v1/part-{i:05d}", i.to_bytes(4, "big"))

    staged = stage_dataset(source(f"oss://{BUCKET}/many/v1/"), tmp_path, "v1", workers=8)

    assert staged.files == 1203
    assert oss.count("ListObjectsV2") == 2
    assert (tmp_path / "v1" / "part-01202").read_bytes() == (1202).to_bytes(4, "big")


@pytest.mark.slow
def test_an_unchanged_rerun_transfers_zero_bytes(oss, tmp_path):
    uri = put_version(oss, "v1")
    first = stage_dataset(source(uri), tmp_path, "v1")
    served = oss.bytes_served()

    again = stage_dataset(source(uri), tmp_path, "v1")

    assert (again.transferred_files, again.transferred_bytes) == (0, 0)
    assert oss.bytes_served() == served
    assert again.checksum == first.checksum


def test_a_changed_object_is_the_only_one_copied_the_rest_are_linked(oss, tmp_path):
    uri = put_version(oss, "v1")
    stage_dataset(source(uri), tmp_path, "v1")
    inode = (tmp_path / "v1" / "big.bin").stat().st_ino
    oss.replace(BUCKET, "cifar10/v1/labels.json", b'{"classes": ["cat", "dog", "bird"]}')

    again = stage_dataset(source(uri), tmp_path, "v1")

    assert again.transferred_files == 1
    assert gets(oss, "v1", "labels.json") == 2 and gets(oss, "v1", "test.npz") == 1
    assert (tmp_path / "v1" / "labels.json").read_bytes() == b'{"classes": ["cat", "dog", "bird"]}'
    assert (tmp_path / "v1" / "big.bin").stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.is_dir()) == []


def test_a_corrupted_byte_in_transit_is_caught_and_fetched_again(oss, tmp_path, caplog):
    uri = put_version(oss, "v1")
    oss.fail_next("GetObject", "corrupt", key="cifar10/v1/test.npz")

    stage_dataset(source(uri), tmp_path, "v1")

    assert (tmp_path / "v1" / "test.npz").read_bytes() == FILES["test.npz"]
    assert gets(oss, "v1", "test.npz") == 2
    assert "test.npz failed CRC64 verification" in caplog.text


def test_a_corrupted_range_of_a_big_object_is_caught(oss, tmp_path):
    uri = put_version(oss, "v1")
    oss.fail_next("GetObject", "corrupt", key="cifar10/v1/big.bin")

    stage_dataset(source(uri), tmp_path, "v1")

    assert (tmp_path / "v1" / "big.bin").read_bytes() == BIG


def test_an_object_corrupted_every_time_fails_and_publishes_nothing(oss, tmp_path):
    uri = put_version(oss, "v1")
    oss.fail_next("GetObject", "corrupt", times=engine.VERIFY_ATTEMPTS, key="cifar10/v1/test.npz")

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(source(uri), tmp_path, "v1")

    assert "test.npz arrived corrupted 3 times (CRC64 mismatch)" in str(excinfo.value)
    assert not (tmp_path / "v1").exists()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["unavailable", "drop", "slow"])
def test_unavailable_dropped_and_slow_reads_are_retried(oss, tmp_path, fault):
    uri = put_version(oss, "v1")
    oss.fail_next("GetObject", fault, times=2, key="cifar10/v1/train/shard-1.npz", seconds=0.2)

    stage_dataset(source(uri), tmp_path, "v1")

    assert staged_files(tmp_path / "v1") == expected()
    assert gets(oss, "v1", "train/shard-1.npz") == (1 if fault == "slow" else 3)


@pytest.mark.slow
def test_a_source_rewritten_during_a_ranged_copy_fails_and_keeps_the_old_version(oss, tmp_path):
    uri = put_version(oss, "v1")
    first = stage_dataset(source(uri), tmp_path, "v1")
    oss.replace(BUCKET, "cifar10/v1/big.bin", os.urandom(300 * 1024))
    oss.after_get(
        lambda bucket, key: key.endswith("big.bin") and oss.replace(bucket, key, os.urandom(300 * 1024))
    )

    with pytest.raises(StagingError) as excinfo:
        stage_dataset(source(uri), tmp_path, "v1", workers=2)

    assert "source object big.bin changed during the copy" in str(excinfo.value)
    assert "nothing was published" in str(excinfo.value)
    assert json.loads((tmp_path / "v1" / MANIFEST_NAME).read_text())["checksum"] == first.checksum
    assert (tmp_path / "v1" / "big.bin").read_bytes() == BIG


def test_concurrent_stagers_of_one_version_copy_it_once(oss, tmp_path):
    uri = put_version(oss, "v1")
    barrier = threading.Barrier(2)

    def stage() -> StagedDataset:
        barrier.wait()
        return stage_dataset(source(uri), tmp_path, "v1", workers=2)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: stage(), range(2)))

    assert sorted(r.transferred_files for r in results) == [0, 5]
    assert staged_files(tmp_path / "v1") == expected()
    assert gets(oss, "v1", "labels.json") == 1


def test_a_backfill_stages_three_versions_side_by_side(oss, tmp_path):
    versions = ["2026-11-08", "2026-11-15", "2026-11-22"]
    for version in versions:
        put_version(oss, version, {"version.txt": version.encode()})

    first = [stage_dataset(source(f"oss://{BUCKET}/cifar10/{v}/"), tmp_path, v) for v in versions]
    rerun = [stage_dataset(source(f"oss://{BUCKET}/cifar10/{v}/"), tmp_path, v) for v in versions]

    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == versions
    for version, staged in zip(versions, first, strict=True):
        assert (tmp_path / version / "version.txt").read_text() == version
        assert staged.uri == str(tmp_path / version) and staged.transferred_files == 6
    assert len({s.checksum for s in first}) == 3
    assert [s.transferred_files for s in rerun] == [0, 0, 0]


# -- bad input: a clear error, nothing published, nothing existing removed ----------------------


@pytest.mark.slow
def test_an_empty_prefix_says_to_upload_the_version(oss, tmp_path):
    with pytest.raises(SpecError, match=r"source_uri: no objects under oss://training-data/cifar10/v9/"):
        stage_dataset(source(f"oss://{BUCKET}/cifar10/v9/"), tmp_path, "v9")
    assert not (tmp_path / "v9").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (f"oss://{BUCKET}/", "names a whole bucket"),
        (f"oss://{BUCKET}", "names a whole bucket"),
        (f"oss://{BUCKET}/a/../b/", "contains '..'"),
        ("oss:///cifar10/v1/", "is not an OSS URI"),
    ],
)
def test_a_malformed_source_uri_names_the_field_and_the_fix(oss, uri, message):
    with pytest.raises(SpecError) as excinfo:
        source(uri)
    assert str(excinfo.value).startswith("source_uri:") and message in str(excinfo.value)
    assert "(fix:" in str(excinfo.value)


def test_a_missing_bucket_is_a_spec_error(oss, tmp_path):
    with pytest.raises(SpecError, match="bucket no-such-bucket does not exist"):
        stage_dataset(source("oss://no-such-bucket/cifar10/v1/"), tmp_path, "v1")


@pytest.mark.parametrize("key", ["../escape.bin", "sub/../../escape.bin", "/absolute.bin"])
def test_keys_that_would_escape_the_target_are_rejected_before_copying(oss, tmp_path, key):
    uri = put_version(oss, "v1", {key: b"x"})

    with pytest.raises(SpecError, match="would escape the target directory"):
        stage_dataset(source(uri), tmp_path / "root", "v1")

    assert oss.count("GetObject") == 0
    assert not (tmp_path / "escape.bin").exists() and not (tmp_path / "root" / "v1").exists()


def test_a_target_that_is_not_writable_is_reported(oss, tmp_path, monkeypatch):
    """A read-only mount cannot be made here (tests may run as root), so the permission check is faked."""
    uri = put_version(oss, "v1")
    real_access = os.access
    monkeypatch.setattr(engine.os, "access", lambda path, mode: mode != os.W_OK and real_access(path, mode))

    with pytest.raises(StagingError, match="is not writable; check the mount and its permissions"):
        stage_dataset(source(uri), tmp_path, "v1")

    assert oss.count("GetObject") == 0


def test_not_enough_space_fails_before_any_object_is_read(oss, tmp_path, monkeypatch):
    uri = put_version(oss, "v1")
    monkeypatch.setattr(
        engine.shutil, "disk_usage", lambda path: SimpleNamespace(total=10**9, used=10**9 - 1000, free=1000)
    )

    with pytest.raises(StagingError, match="not enough free space"):
        stage_dataset(source(uri), tmp_path, "v1")

    assert oss.count("GetObject") == 0
    assert not (tmp_path / "v1").exists()


# -- crash and resume, through the command line ----------------------------------------------


def _cli(uri: str, target: Path, oss: OssEmulator) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT / "plugins"),
        "ALIBABA_CLOUD_ACCESS_KEY_ID": AK,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SK,
    }
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "aliyun_training.staging", "--source", uri, "--target", str(target)),
            *("--version", "v1", "--region", REGION, "--endpoint", oss.endpoint, "--workers", "2"),
        ],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_the_cli_stages_from_oss_with_credentials_from_the_environment(oss, tmp_path):
    uri = put_version(oss, "v1")

    process = _cli(uri, tmp_path, oss)
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 0, stderr
    staged = StagedDataset.model_validate(json.loads(stdout.strip().splitlines()[-1]))
    assert staged.files == 5 and staged.uri == str(tmp_path / "v1")
    assert SK not in stdout + stderr
    assert {r.access_key_id for r in oss.records("GetObject")} == {AK}


@pytest.mark.slow
def test_a_run_killed_mid_copy_resumes_without_fetching_finished_files_again(oss, tmp_path):
    for i in range(40):
        oss.put(BUCKET, f"slow/v1/file-{i:03d}", os.urandom(1024))
    oss.latency_seconds = 0.05
    process = _cli(f"oss://{BUCKET}/slow/v1/", tmp_path, oss)
    journal = tmp_path / ".v1.partial" / JOURNAL_NAME
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_journaled(journal)) < 10:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=30)
    finished = _journaled(journal)
    assert 10 <= len(finished) < 40, f"the run was not killed mid-copy: {stderr}"
    oss.latency_seconds = 0.0
    oss.clear_records()

    staged = stage_dataset(source(f"oss://{BUCKET}/slow/v1/"), tmp_path, "v1")

    fetched_again = {r.key.removeprefix("slow/v1/") for r in oss.records("GetObject")}
    assert fetched_again.isdisjoint(finished)
    assert staged.transferred_files == 40 - len(finished)
    assert staged.files == 40 and not (tmp_path / ".v1.partial").exists()


def _journaled(journal: Path) -> set[str]:
    if not journal.exists():
        return set()
    keys = set()
    for line in journal.read_text().splitlines():
        try:
            keys.add(json.loads(line)["path"])
        except (json.JSONDecodeError, KeyError):
            continue
    return keys


# -- the other direction: artifacts to OSS ---------------------------------------------------


def test_artifacts_are_uploaded_with_the_manifest_last(oss, tmp_path, monkeypatch):
    monkeypatch.setattr(oss_module, "MULTIPART_THRESHOLD", 256 * 1024)
    monkeypatch.setattr(oss_module, "PART_SIZE", 128 * 1024)
    output = tmp_path / "job-output"
    (output / "checkpoints").mkdir(parents=True)
    checkpoint = os.urandom(400 * 1024)
    (output / "checkpoints" / "epoch-1.pt").write_bytes(checkpoint)
    epochs = [{"epoch": 1, "train_loss": 0.5, "test_loss": 0.6, "test_accuracy": 0.7, "seconds": 1.0}]
    (output / "metrics.json").write_text(json.dumps({"epochs": epochs}))
    job = JobResult(
        job_id="dlc-123",
        display_name="cifar10-run",
        backend="dlc",
        status="Succeeded",
        output_uri=str(output),
    )
    dataset = StagedDataset(uri="/mnt/cpfs/v1", version="v1", files=1, bytes=1, manifest_uri="", checksum="c")
    runtime = BuiltImage(uri="registry/train:1", digest="sha256:x", python="3.11")

    artifacts = publish_artifacts(
        model="cifar10",
        artifact_root=f"oss://{BUCKET}/models/",
        job=job,
        dataset=dataset,
        runtime=runtime,
        oss=OssClientConfig.from_connection("alibaba_cloud_default"),
    )

    prefix = "models/cifar10/v1/cifar10-run/"
    assert artifacts.uri == f"oss://{BUCKET}/{prefix}"
    assert artifacts.manifest_uri == f"oss://{BUCKET}/{prefix}manifest.json"
    assert oss.get(BUCKET, prefix + "checkpoints/epoch-1.pt") == checkpoint
    assert oss.count("UploadPart") >= 3, "the checkpoint went up in parts"
    writes = [r.key for r in oss.records() if r.operation in ("PutObject", "CompleteMultipartUpload")]
    assert writes[-1] == prefix + "manifest.json"
    manifest = json.loads(oss.get(BUCKET, prefix + "manifest.json"))
    assert manifest["job"]["job_id"] == "dlc-123"
    assert {f["path"] for f in manifest["files"]} >= {"checkpoints/epoch-1.pt", "metrics.json"}


@pytest.mark.slow
def test_a_failed_upload_is_retried_and_a_bad_artifact_root_is_named(oss, tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "a.txt").write_text("a")
    oss.fail_next("PutObject", "unavailable", times=2)
    config = OssClientConfig.from_connection("alibaba_cloud_default")

    files, size = oss_module.upload_directory(tmp_path / "set", f"oss://{BUCKET}/out/", config)

    assert (files, size) == (1, 1) and oss.get(BUCKET, "out/a.txt") == b"a"
    with pytest.raises(SpecError, match=r"artifact_root: .* names a whole bucket"):
        oss_module.upload_directory(tmp_path / "set", f"oss://{BUCKET}/", config)


def _cloud_job(output_uri: str) -> JobResult:
    return JobResult(
        job_id="dlc-7f3a",
        display_name="cifar10-train-7f3a",
        backend="dlc",
        status="Succeeded",
        output_uri=output_uri,
    )


FIXED = FixedDataset(version="v1", dataset_id="d-cifar10", mount_path="/mnt/data/cifar10")
VERIFIED = BuiltImage(uri="registry/train@sha256:x", digest="sha256:x", python="3.10", verified=True)


def test_a_cloud_jobs_outputs_are_collected_from_oss_verified_and_published_to_oss(oss, tmp_path):
    output_uri = f"oss://{BUCKET}/outputs/cifar10-train-7f3a/"
    epochs = [{"epoch": 1, "train_loss": 0.5, "test_loss": 0.6, "test_accuracy": 0.7, "seconds": 1.0}]
    checkpoint = os.urandom(300 * 1024)  # above the lowered threshold: read in ranges
    outputs = {
        "metrics.json": json.dumps({"epochs": epochs}).encode(),
        "checkpoints/epoch-0001.pt": checkpoint,
        "model.pt": b"model",
        "stdout.log": b"not collected",
    }
    for key, data in outputs.items():
        oss.put(BUCKET, f"outputs/cifar10-train-7f3a/{key}", data)

    artifacts = publish_artifacts(
        model="cifar10",
        artifact_root=f"oss://{BUCKET}/models/",
        job=_cloud_job(output_uri),
        dataset=FIXED,
        runtime=VERIFIED,
        oss=OssClientConfig.from_connection("alibaba_cloud_default"),
    )

    prefix = "models/cifar10/v1/cifar10-train-7f3a/"
    assert artifacts.uri == f"oss://{BUCKET}/{prefix}"
    assert oss.get(BUCKET, prefix + "checkpoints/epoch-0001.pt") == checkpoint
    manifest = json.loads(oss.get(BUCKET, prefix + "manifest.json"))
    assert manifest["job"]["job_id"] == "dlc-7f3a" and manifest["job"]["output_uri"] == output_uri
    assert manifest["dataset"]["dataset_id"] == "d-cifar10" and manifest["timings"]["staging_seconds"] is None
    assert {f["path"] for f in manifest["files"]} == {"metrics.json", "checkpoints/epoch-0001.pt", "model.pt"}
    assert "fixed dataset d-cifar10" in oss.get(BUCKET, prefix + "report.html").decode()
    read = {r.key for r in oss.records("GetObject")}
    assert "outputs/cifar10-train-7f3a/stdout.log" not in read, "only the collected names are read"
    ranges = [r.range for r in oss.records("GetObject") if r.key.endswith("epoch-0001.pt") and r.range]
    assert len(ranges) >= 2, "a large checkpoint comes in CRC64-verified ranges"


def test_a_cloud_job_without_metrics_is_named_and_nothing_is_published(oss, tmp_path):
    oss.put(BUCKET, "outputs/cifar10-train-7f3a/checkpoints/epoch-0001.pt", b"checkpoint")
    output_uri = f"oss://{BUCKET}/outputs/cifar10-train-7f3a/"

    with pytest.raises(ArtifactError) as excinfo:
        publish_artifacts(
            model="cifar10",
            artifact_root=str(tmp_path / "artifacts"),
            job=_cloud_job(output_uri),
            dataset=FIXED,
            runtime=VERIFIED,
            oss=OssClientConfig.from_connection("alibaba_cloud_default"),
        )

    assert f"job dlc-7f3a wrote no metrics.json under {output_uri}" in str(excinfo.value)
    assert oss.count("GetObject") == 0 and not (tmp_path / "artifacts").exists()


def test_open_source_picks_the_oss_source_for_oss_uris(oss):
    opened = open_source(
        f"oss://{BUCKET}/cifar10/v1", config=OssClientConfig.from_connection("alibaba_cloud_default")
    )
    assert isinstance(opened, OssObjectSource) and opened.uri == f"oss://{BUCKET}/cifar10/v1/"


def test_folder_markers_are_not_data(oss, tmp_path):
    uri = put_version(oss, "v1")
    oss.put(BUCKET, "cifar10/v1/", b"")  # the console's "create folder" for the version itself
    oss.put(BUCKET, "cifar10/v1/empty-dir/", b"")

    staged = stage_dataset(source(uri), tmp_path, "v1")

    assert staged.files == 5 and staged_files(tmp_path / "v1") == expected()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["a/./b"], "would escape the target directory or alias another"),
        (["a//b"], "would escape the target directory or alias another"),
        (["train"], "object 'train' is also a folder of 'train/shard-0.npz'"),
    ],
)
def test_keys_that_alias_or_clash_on_a_filesystem_are_rejected_before_copying(oss, tmp_path, keys, message):
    uri = put_version(oss, "v1", dict.fromkeys(keys, b"x"))

    with pytest.raises(SpecError, match=message):
        stage_dataset(source(uri), tmp_path, "v1")

    assert oss.count("GetObject") == 0 and not (tmp_path / "v1").exists()


@pytest.mark.slow
@pytest.mark.parametrize("uri", [f"oss://{BUCKET}/data#2024/v1/", f"oss://{BUCKET}/data?x/v1/"])
def test_a_prefix_that_urlparse_would_cut_short_is_rejected(oss, uri):
    with pytest.raises(SpecError, match=r"contains '\?', '#' or ';'"):
        source(uri)


@pytest.mark.slow
def test_files_an_earlier_failed_run_left_are_not_published(oss, tmp_path):
    uri = put_version(oss, "v1")
    oss.fail_next("GetObject", "unavailable", times=engine.READ_ATTEMPTS, key="cifar10/v1/test.npz")
    with pytest.raises(Exception, match="503"):
        stage_dataset(source(uri), tmp_path, "v1", workers=1)
    assert (tmp_path / ".v1.partial" / "labels.json").exists()
    oss.delete(BUCKET, "cifar10/v1/labels.json")  # the source dropped an object since

    staged = stage_dataset(source(uri), tmp_path, "v1")

    published = sorted(p.relative_to(tmp_path / "v1").as_posix() for p in (tmp_path / "v1").rglob("*"))
    assert staged.files == 4 and "labels.json" not in published
    assert not [name for name in published if name.endswith(".part")]
