"""Staging only ever replaces a version it published (publish.py, through the staging engine).

``staging.target_root`` + ``dataset_version`` (and ``artifact_root``) choose the directory a
publication swaps out and deletes; a trigger picks the version. Whatever sits there that staging
did not publish, or any link on the way, must survive untouched and be named in the error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aliyun_training.staging.engine import MANIFEST_NAME, stage_dataset
from aliyun_training.validation import SpecError

FILES = {"train/shard-0.npz": b"shard zero " * 300, "test.npz": b"test " * 100}


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for key, content in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(content)
    return root


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` (links not followed) with its content or link target."""
    snapshot: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            snapshot[key] = f"-> {os.readlink(path)}"
        elif path.is_file():
            snapshot[key] = path.read_bytes()
    return snapshot


@pytest.fixture
def source(tmp_path: Path) -> str:
    return _tree(tmp_path / "bucket" / "v1", FILES).as_uri() + "/"


def test_a_foreign_directory_at_the_target_is_refused_and_survives_untouched(source, tmp_path):
    """/opt/airflow + version "dags": the DAG folder is not a staged version and must not be swapped out."""
    airflow = tmp_path / "opt" / "airflow"
    _tree(airflow / "dags", {"retrain.py": b"from airflow import DAG\n", "lib/util.py": b"x = 1\n"})
    before = _snapshot(airflow)

    with pytest.raises(SpecError) as caught:
        stage_dataset(source, airflow, "dags")

    assert str(caught.value) == (
        f"dataset_version: {airflow / 'dags'} already exists and holds no _manifest.json, so it was not "
        "published here; publishing never replaces or deletes a directory it did not publish (fix: change "
        f"dataset_version so that it names a new directory, or move {airflow / 'dags'} away if it may be "
        "replaced)"
    )
    assert _snapshot(airflow) == before, "nothing written, nothing removed, not even a lock file"


def test_a_symlinked_target_is_refused_and_what_it_points_at_survives(source, tmp_path):
    elsewhere = _tree(tmp_path / "elsewhere", {MANIFEST_NAME: b"{}", "precious.txt": b"keep me"})
    root = tmp_path / "cpfs"
    root.mkdir()
    (root / "v1").symlink_to(elsewhere)

    with pytest.raises(SpecError) as caught:
        stage_dataset(source, root, "v1")

    message = str(caught.value)
    assert message.startswith(f"dataset_version: {root / 'v1'} is a symbolic link (to {elsewhere})")
    assert "fix: remove the link" in message
    assert _snapshot(elsewhere) == {MANIFEST_NAME: b"{}", "precious.txt": b"keep me"}
    assert (root / "v1").is_symlink()


def test_a_symlinked_partial_directory_is_refused_before_anything_is_written_into_it(source, tmp_path):
    """The partial directory is written into and pruned: through a link that would delete foreign files."""
    elsewhere = _tree(tmp_path / "elsewhere", {"precious.txt": b"keep me"})
    root = tmp_path / "cpfs"
    root.mkdir()
    (root / ".v1.partial").symlink_to(elsewhere)

    with pytest.raises(SpecError, match=r"\.v1\.partial is a symbolic link"):
        stage_dataset(source, root, "v1")

    assert _snapshot(elsewhere) == {"precious.txt": b"keep me"}
    assert not (root / "v1").exists()


def test_a_symlinked_lock_file_is_refused_and_its_target_not_truncated(source, tmp_path):
    config = tmp_path / "airflow.cfg"
    config.write_text("[core]\n")
    root = tmp_path / "cpfs"
    root.mkdir()
    (root / ".v1.lock").symlink_to(config)

    with pytest.raises(SpecError, match=r"\.v1\.lock is a symbolic link"):
        stage_dataset(source, root, "v1")

    assert config.read_text() == "[core]\n"


def test_a_retired_sibling_that_is_a_link_or_not_ours_is_left_alone(source, tmp_path, caplog):
    elsewhere = _tree(tmp_path / "elsewhere", {MANIFEST_NAME: b"{}", "precious.txt": b"keep me"})
    root = tmp_path / "cpfs"
    root.mkdir()
    (root / ".v1.retired-0000dead").symlink_to(elsewhere)
    _tree(root / ".v1.retired-0000beef", {"notes.txt": b"not a staged version"})

    staged = stage_dataset(source, root, "v1")

    target = root / "v1"
    assert staged.uri == str(target) and not target.is_symlink()
    assert {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()} == {
        *FILES,
        MANIFEST_NAME,
    }
    assert _snapshot(elsewhere) == {MANIFEST_NAME: b"{}", "precious.txt": b"keep me"}
    assert (root / ".v1.retired-0000beef" / "notes.txt").read_bytes() == b"not a staged version"
    assert "Not restoring" in caplog.text


def test_a_target_root_that_is_a_link_is_the_administrators_layout_and_is_used(source, tmp_path):
    real = tmp_path / "mnt" / "cpfs"
    real.mkdir(parents=True)
    (tmp_path / "datasets").symlink_to(real)

    staged = stage_dataset(source, tmp_path / "datasets", "v1")

    assert staged.files == len(FILES)
    assert (real / "v1" / MANIFEST_NAME).is_file()


def test_republishing_our_own_version_still_swaps_it_in_one_step(source, tmp_path, monkeypatch):
    root = tmp_path / "cpfs"
    stage_dataset(source, root, "v1")
    Path(source.removeprefix("file://"), "test.npz").write_bytes(b"changed test split")
    renames: list[tuple[str, str]] = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append((str(a), str(b))), real_replace(a, b))[1])

    stage_dataset(source, root, "v1")

    assert (root / "v1" / "test.npz").read_bytes() == b"changed test split"
    assert not [r for r in renames if r[1] == str(root / "v1")], "swapped by renameat2, never renamed over"
    assert sorted(p.name for p in root.iterdir()) == [".v1.lock", "v1"]
