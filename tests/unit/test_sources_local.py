"""``file://`` sources list only regular files inside the source; anything else is refused by listing.

A FIFO would hang the copy forever, a link can lead anywhere on the machine, and a linked directory
used to be skipped silently (its files missing from the version). Each is refused, naming the path
and the fix, before a single byte is read.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from aliyun_training.staging.engine import MANIFEST_NAME, stage_dataset
from aliyun_training.staging.sources import LocalObjectSource, _special_kind
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

FIX = "(fix: replace it with the regular files it stands for, or remove it from the dataset version under"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "v1"
    (root / "train").mkdir(parents=True)
    (root / "train" / "shard-0.npz").write_bytes(b"shard zero " * 100)
    (root / "test.npz").write_bytes(b"test " * 50)
    return root


def _uri(path: Path) -> str:
    return path.as_uri() + "/"


def _refusal(source: Path) -> str:
    with pytest.raises(SpecError) as caught:
        LocalObjectSource(_uri(source)).list()
    message = str(caught.value)
    assert FIX in message and message.startswith("source_uri: ")
    return message


def _finishes(call: Callable[[], object], fifo: Path, seconds: float = 10.0) -> BaseException | None:
    """Run ``call`` in a thread; if it blocks on ``fifo``, unblock the reader and fail the test."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the test, whatever it is
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # EOF for the blocked reader
        thread.join()
        pytest.fail(f"staging hung reading the FIFO {fifo}")
    return outcome[0]


def test_a_fifo_is_refused_by_listing_and_staging_does_not_hang(source, tmp_path):
    fifo = source / "train" / "shard-1.npz"
    os.mkfifo(fifo)
    target_root = tmp_path / "cpfs"

    error = _finishes(lambda: stage_dataset(_uri(source), target_root, "v1"), fifo)

    assert isinstance(error, SpecError), error
    assert str(error).startswith(f"source_uri: {fifo} is a FIFO (named pipe), not a regular file; nothing")
    assert not (target_root / "v1").exists(), "refused before the target was even created"


def test_a_socket_is_refused(source, monkeypatch):
    monkeypatch.chdir(source)  # a short relative path: socket paths are limited to ~100 bytes
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind("control.sock")
        assert f"{source / 'control.sock'} is a socket, not a regular file" in _refusal(source)
    finally:
        server.close()


def test_devices_are_named_as_such() -> None:
    """Making a device node needs privileges; the listing names the kind from the mode bits alone."""
    assert _special_kind(stat.S_IFCHR | 0o600) == "character device"
    assert _special_kind(stat.S_IFBLK | 0o600) == "block device"
    assert _special_kind(stat.S_IFREG | 0o600) is None


def test_a_dangling_link_is_refused(source):
    (source / "train" / "shard-1.npz").symlink_to(source / "train" / "gone.npz")

    message = _refusal(source)

    assert (
        f"{source / 'train' / 'shard-1.npz'} is a symbolic link to {source / 'train' / 'gone.npz'}" in message
    )
    assert "which leads to no file" in message


def test_a_link_loop_is_refused(source):
    (source / "a").symlink_to(source / "b")
    (source / "b").symlink_to(source / "a")

    assert "which leads to no file" in _refusal(source)


def test_a_link_out_of_the_source_is_refused(source, tmp_path):
    secret = tmp_path / "airflow.cfg"
    secret.write_text("fernet_key = not for the dataset\n")
    (source / "config.txt").symlink_to(secret)

    message = _refusal(source)

    assert f"{source / 'config.txt'} is a symbolic link to {secret}, outside the source directory" in message


@pytest.mark.parametrize("inside", [True, False], ids=["inside", "outside"])
def test_a_linked_directory_is_refused_rather_than_silently_skipped(source, tmp_path, inside):
    other = source / "train" if inside else tmp_path / "more-shards"
    other.mkdir(exist_ok=True)
    (other / "shard-9.npz").write_bytes(b"nine")
    (source / "extra").symlink_to(other)

    message = _refusal(source)

    reason = f"the directory {other}" if inside else f"{other}, outside the source directory"
    assert f"{source / 'extra'} is a symbolic link to {reason}" in message


def test_a_link_to_a_file_inside_the_source_is_copied_as_that_file(source, tmp_path):
    (source / "latest.npz").symlink_to(source / "train" / "shard-0.npz")

    staged = stage_dataset(_uri(source), tmp_path / "cpfs", "v1")

    copy = Path(staged.uri) / "latest.npz"
    assert not copy.is_symlink() and copy.read_bytes() == b"shard zero " * 100
    assert staged.files == 3 and (Path(staged.uri) / MANIFEST_NAME).is_file()


def test_a_source_directory_that_is_itself_a_link_is_staged(source, tmp_path):
    (tmp_path / "current").symlink_to(source)

    staged = stage_dataset(_uri(tmp_path / "current"), tmp_path / "cpfs", "v1")

    assert staged.files == 2


def test_an_unreadable_folder_is_refused_instead_of_skipped(source, monkeypatch):
    """os.walk drops a folder it cannot read; the listing says so instead (simulated: tests run as root)."""
    real_scandir = os.scandir

    def scandir(path):  # the one edge no real file can reach when the tests run as root
        if Path(path) == source / "train":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)

    with pytest.raises(SpecError) as caught:
        LocalObjectSource(_uri(source)).list()

    assert str(caught.value).startswith(
        f"source_uri: {source / 'train'} cannot be listed (Permission denied)"
    )
