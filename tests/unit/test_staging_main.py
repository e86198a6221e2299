"""staging.__main__: the staging command a staging pod runs, driven here on local folders.

Its contract with the pod's caller: the StagedDataset record is the last line on stdout, as JSON;
bad input exits 2 and a failed staging 1, each with the error on stderr.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from aliyun_training.staging.__main__ import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A version of two files, one in a subfolder."""
    folder = tmp_path / "object-store" / "cifar10" / "v1"
    (folder / "shards").mkdir(parents=True)
    (folder / "meta.json").write_text('{"classes": 10}')
    (folder / "shards" / "train-0000.npz").write_bytes(b"\x00" * 1000)
    return folder


def test_a_version_is_staged_under_the_target_and_its_record_is_the_last_line_on_stdout(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cpfs" / "cifar10"

    code = main(
        ["--source", f"file://{source}/", "--target", str(target), "--version", "v1", "--workers", "2"]
    )

    assert code == 0
    staged = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (staged["uri"], staged["version"], staged["files"], staged["bytes"]) == (
        str(target / "v1"),
        "v1",
        2,
        1015,
    )
    assert (staged["source_uri"], staged["mode"]) == (f"file://{source}/", "direct")
    assert (target / "v1" / "shards" / "train-0000.npz").read_bytes() == b"\x00" * 1000
    assert (target / "v1" / "meta.json").read_text() == '{"classes": 10}'


@pytest.mark.parametrize(
    ("uri", "error"),
    [
        (
            "s3://ml-data/cifar10/v1/",
            "error: source_uri: scheme 's3' of 's3://ml-data/cifar10/v1/' is not supported",
        ),
        ("oss://ml-data/cifar10/v1/", "error: region: OSS needs a region (fix: pass --region"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    uri: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--source", uri, "--target", str(tmp_path / "cpfs"), "--version", "v1"])

    printed = capsys.readouterr()
    assert (code, printed.out) == (2, "")
    assert printed.err.startswith(error), printed.err
    assert not (tmp_path / "cpfs").exists()


def test_a_staging_that_fails_exits_1_with_its_error(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_folder = tmp_path / "cpfs"
    not_a_folder.write_text("a file where the versions should go")

    code = main(["--source", f"file://{source}/", "--target", str(not_a_folder), "--version", "v1"])

    printed = capsys.readouterr()
    assert (code, printed.out) == (1, "")
    assert printed.err.startswith(f"error: target {not_a_folder} cannot be created"), printed.err
