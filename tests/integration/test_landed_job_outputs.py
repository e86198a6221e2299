"""What a cloud job landed in OSS is read as data: a NaN in its metrics.json or evaluation.json fails
the task naming the object and the key, read through oss2 from the OSS emulator over HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.artifacts.collect import publish_artifacts
from aliyun_training.artifacts.manifest import ArtifactError
from aliyun_training.stage_records import BuiltImage, JobResult, StagedDataset
from aliyun_training.staging.oss import OssClientConfig
from aliyun_training.staging.versions import read_json_object
from aliyun_training.validation import SpecError
from fakes.cloud import BUCKET, emulated_oss

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fakes.oss import OssEmulator

CONNECTION = "alibaba_cloud_default"
OUTPUT = f"oss://{BUCKET}/outputs/cifar10-run/"
FIX = (
    "not a finite number (fix: write a finite number; leave out, or write null for, a value that "
    "could not be computed)"
)


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[OssEmulator]:
    with emulated_oss(monkeypatch) as emulator:
        yield emulator


def test_a_nan_in_a_cloud_jobs_metrics_json_fails_the_publication_naming_the_object(
    oss: OssEmulator, tmp_path: Path
) -> None:
    oss.put(BUCKET, "outputs/cifar10-run/model.pt", b"weights")
    oss.put(
        BUCKET,
        "outputs/cifar10-run/metrics.json",
        b'{"epochs": [{"train_loss": 0.5, "test_loss": NaN, "test_accuracy": 0.7}]}',
    )
    job = JobResult(
        job_id="dlc-1", display_name="cifar10-run", backend="dlc", status="Succeeded", output_uri=OUTPUT
    )

    with pytest.raises(ArtifactError) as refused:
        publish_artifacts(
            model="cifar10",
            artifact_root=str(tmp_path / "artifacts"),
            job=job,
            dataset=StagedDataset(uri="/d", version="v1", files=1, bytes=1, manifest_uri="", checksum="c"),
            runtime=BuiltImage(uri="registry/train:1", digest="sha256:x", python="3.11"),
            oss=OssClientConfig.from_connection(CONNECTION),
        )

    assert str(refused.value) == f"metrics.json of job dlc-1 in {OUTPUT}: epochs[0].test_loss is NaN, {FIX}"
    assert not (tmp_path / "artifacts").exists()


@pytest.mark.parametrize(
    ("body", "key", "shown"),
    [
        (b'{"candidate": {"accuracy": NaN}}', "candidate.accuracy", "NaN"),
        (
            b'{"candidate": {"accuracy": 0.9}, "champion": {"accuracy": Infinity}}',
            "champion.accuracy",
            "Infinity",
        ),
        (b'{"candidate": {"accuracy": -1e999}}', "candidate.accuracy", "-Infinity"),
    ],
)
def test_a_non_finite_score_in_evaluation_json_is_refused_naming_the_object_and_the_key(
    oss: OssEmulator, body: bytes, key: str, shown: str
) -> None:
    """The evaluation task reads its job's scores with ``read_json_object``; the gate never sees these."""
    oss.put(BUCKET, "outputs/evaluate-run/evaluation.json", body)
    folder = f"oss://{BUCKET}/outputs/evaluate-run/"

    with pytest.raises(SpecError) as refused:
        read_json_object(folder, "evaluation.json", CONNECTION, field="output_uri")

    assert str(refused.value) == f"output_uri: {folder}evaluation.json: {key} is {shown}, {FIX}"


def test_a_document_nested_past_the_parser_fails_naming_it_not_with_a_recursion_error(
    oss: OssEmulator,
) -> None:
    oss.put(BUCKET, "outputs/evaluate-run/evaluation.json", b"[" * 100_000 + b"]" * 100_000)
    folder = f"oss://{BUCKET}/outputs/evaluate-run/"

    with pytest.raises(SpecError, match=r"evaluation\.json nests too deep for Python's JSON parser"):
        read_json_object(folder, "evaluation.json", CONNECTION, field="output_uri")
