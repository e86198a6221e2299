"""A checkpoint's COMPLETE marker is data a job wrote: it may name only regular files in its directory.

Each case plants a newest checkpoint whose marker's checksums match what it names, so only the
refusal keeps it from loading; an audit hook records every path opened (and refuses the forbidden
one, so a regression fails the assertion instead of streaming /dev/zero or reading a real file).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import ModuleType

CHECKPOINTS_PY = Path(__file__).resolve().parents[2] / "include" / "training" / "checkpoints.py"
SECRET = b"outside the checkpoint directory"


def _load_checkpoints() -> ModuleType:
    """The training scripts' module, loaded by path as they import it (next to them, not a package)."""
    spec = importlib.util.spec_from_file_location("training_checkpoints_under_test", CHECKPOINTS_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checkpoints = _load_checkpoints()

#: Audit hooks cannot be removed: one hook serves every test and records only inside ``_opens``.
_recording: dict[str, Any] = {"opened": None, "forbidden": set()}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _recording["opened"] is None or not isinstance(args[0], str | bytes | os.PathLike):
        return
    path = os.path.abspath(os.fsdecode(args[0]))
    _recording["opened"].append(path)
    if path in _recording["forbidden"]:
        raise PermissionError(f"test refused opening {path}: the marker's target must never be opened")


sys.addaudithook(_audit)


@contextlib.contextmanager
def _opens(*forbidden: Path) -> Iterator[list[str]]:
    """Every path opened inside the block; opening one of ``forbidden`` (or what it links to) fails."""
    _recording["forbidden"] = {os.path.abspath(p) for p in forbidden} | {
        os.path.realpath(p) for p in forbidden
    }
    _recording["opened"] = []
    try:
        yield _recording["opened"]
    finally:
        _recording["opened"], _recording["forbidden"] = None, set()


class Planted(NamedTuple):
    name: str  # what the marker names
    target: Path  # the path that must not be opened
    reason: str  # what the printed report says


def _dot_dot_etc_hostname(checkpoint: Path) -> Planted:
    # From <tmp>/ckpt/epoch-0002, ../../etc/hostname is <tmp>/etc/hostname: a real file out of reach.
    target = checkpoint.parents[1] / "etc" / "hostname"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return Planted("../../etc/hostname", target, "which is not a file name in")


def _dev_zero(checkpoint: Path) -> Planted:
    return Planted("/dev/zero", Path("/dev/zero"), "which is not a file name in")


def _file_in_a_subdirectory(checkpoint: Path) -> Planted:
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "x").write_bytes(SECRET)
    return Planted("sub/x", checkpoint / "sub" / "x", "which is not a file name in")


def _symlink_to_a_file_outside(checkpoint: Path) -> Planted:
    outside = checkpoint.parents[1] / "outside.bin"
    outside.write_bytes(SECRET)
    (checkpoint / "state.pt").symlink_to(outside)
    return Planted("state.pt", checkpoint / "state.pt", "is a symbolic link, not a regular file")


def _fifo(checkpoint: Path) -> Planted:
    os.mkfifo(checkpoint / "state.pt")
    return Planted("state.pt", checkpoint / "state.pt", "is a FIFO, not a regular file")


def _plant(root: Path, make: Callable[[Path], Planted]) -> Planted:
    """Epoch 1 saved properly, then an epoch 2 whose marker names what ``make`` planted."""
    checkpoints.save(root, 1, {"state.pt": b"weights 1"}, {"history": [], "epoch": 1})
    checkpoint = root / "epoch-0002"
    checkpoint.mkdir()
    planted = make(checkpoint)
    marker = {"epoch": 2, "files": {planted.name: hashlib.sha256(SECRET).hexdigest()}, "meta": {"epoch": 2}}
    (checkpoint / checkpoints.MARKER).write_text(json.dumps(marker))
    return planted


def _load_newest_within(root: Path, seconds: float = 10) -> Any:
    """``load_newest`` in a thread: a FIFO opened for reading would block it forever."""
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(checkpoints.load_newest(root, lambda files, meta: (files, meta))),
        daemon=True,
    )
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"load_newest({root}) still runs after {seconds} s: it opened something"
    return result[0]


@pytest.mark.parametrize(
    "make",
    [_dot_dot_etc_hostname, _dev_zero, _file_in_a_subdirectory, _symlink_to_a_file_outside, _fifo],
    ids=["dot-dot-etc-hostname", "dev-zero", "sub-x", "symlink-outside", "fifo"],
)
def test_a_marker_naming_anything_but_a_regular_file_inside_is_skipped_unopened(
    tmp_path: Path, make: Callable[[Path], Planted], capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ckpt"
    planted = _plant(root, make)

    with _opens(planted.target) as opened:
        (files, meta), path = _load_newest_within(root)

    assert (path.name, files, meta) == ("epoch-0001", {"state.pt": b"weights 1"}, {"history": [], "epoch": 1})
    printed = capsys.readouterr().out
    assert f"checkpoint {root / 'epoch-0002'} is unusable (ValueError: " in printed
    assert planted.reason in printed and "trying an older one" in printed
    assert {str(planted.target), os.path.realpath(planted.target)}.isdisjoint(opened), "the target was opened"
    assert str(root / "epoch-0001" / "state.pt") in opened, "the recorder saw the good checkpoint's read"


def test_a_marker_that_is_a_symlink_is_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ckpt"
    checkpoints.save(root, 1, {"state.pt": b"weights 1"}, {"history": [], "epoch": 1})
    elsewhere = tmp_path / "elsewhere-marker.json"
    elsewhere.write_text(json.dumps({"epoch": 2, "files": {}, "meta": {"epoch": 2}}))
    (root / "epoch-0002").mkdir()
    link = root / "epoch-0002" / checkpoints.MARKER
    link.symlink_to(elsewhere)

    with _opens(link) as opened:
        (_files, meta), path = _load_newest_within(root)

    assert (path.name, meta["epoch"]) == ("epoch-0001", 1)
    assert f"{link} is a symbolic link, not a regular file" in capsys.readouterr().out
    assert {str(link), str(elsewhere)}.isdisjoint(opened)


def test_a_valid_checkpoint_with_several_files_loads_them_all(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    checkpoints.save(root, 3, {"state.pt": b"weights", "optimizer.pt": b"moments"}, {"epoch": 3})

    (files, meta), path = _load_newest_within(root)

    assert (path.name, files, meta) == (
        "epoch-0003",
        {"state.pt": b"weights", "optimizer.pt": b"moments"},
        {"epoch": 3},
    )
