"""The job contract's checkpoints: saved atomically under CHECKPOINT_DIR, resumed from RESUME_FROM.

The pipeline sets ``CHECKPOINT_DIR`` on every try of a round (the same directory each time) and
``RESUME_FROM`` (that directory) on a retry after a failure that lost the machines, not the code:
a preemption or an infrastructure fault. Each checkpoint is a directory ``epoch-NNNN/`` whose files
are written first and whose ``COMPLETE`` marker, naming every file with its SHA-256, is written
last; the directory is built under a temporary name and renamed into place. A directory without the
marker, or whose files do not match it, is skipped and never loaded.

A marker is data a job wrote, on storage other jobs may share: it may name only regular files
directly inside its own checkpoint directory. Any other name (a path, a link, a device, a FIFO)
makes the checkpoint unusable without that path being opened, so a marker cannot make a resume
read the machine's files, hang on a pipe or stream a device.

Stdlib only, shared by the example training scripts (run by path, next to them in the image).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

MARKER = "COMPLETE"
CHECKPOINT_NAME = re.compile(r"epoch-(\d{4,})")
METRICS = "metrics.json"
#: The exit code for unusable data (sysexits.h's EX_DATAERR): the pipeline fails such a run at once
#: instead of retrying it, as no retry can fix the data.
DATA_ERROR_EXIT = 65
#: Which try of the task this is (the pipeline's TRAINING_ATTEMPT), recorded with every epoch.
ATTEMPT = int(os.environ.get("TRAINING_ATTEMPT", "1"))

T = TypeVar("T")


def checkpoint_dir(out_dir: Path) -> Path:
    """Where this try saves: ``CHECKPOINT_DIR``, else ``<out>/checkpoints`` (a run by hand)."""
    return Path(os.environ.get("CHECKPOINT_DIR") or out_dir / "checkpoints")


def save(root: Path, epoch: int, files: dict[str, bytes], meta: dict[str, Any]) -> Path:
    """Write one epoch's checkpoint: its files, then the marker, then the rename that publishes it."""
    final = root / f"epoch-{epoch:04d}"
    building = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    try:
        for name, data in files.items():
            (building / name).write_bytes(data)
        marker = {
            "epoch": epoch,
            "files": {name: _sha256(data) for name, data in files.items()},
            "meta": meta,
        }
        (building / MARKER).write_text(json.dumps(marker))
        if final.exists():
            # The same epoch saved again (a retry that resumed before it): the new one replaces it.
            shutil.rmtree(final)
        os.replace(building, final)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


def complete(root: Path) -> list[tuple[int, Path]]:
    """Every checkpoint directory with a marker, newest epoch first (not yet verified)."""
    found = [
        (int(match.group(1)), path)
        for path in (root.iterdir() if root.is_dir() else [])
        if (match := CHECKPOINT_NAME.fullmatch(path.name)) and (path / MARKER).is_file()
    ]
    return sorted(found, reverse=True)


def load_newest(root: Path, read: Callable[[dict[str, bytes], dict[str, Any]], T]) -> tuple[T, Path] | None:
    """The newest checkpoint whose files match its marker and that ``read`` accepts.

    ``read`` gets the files' bytes and the marker's ``meta`` and raises on anything it cannot use; a
    checkpoint that fails is reported and the next older one tried, so a corrupt save costs one
    epoch, never the run.
    """
    for _epoch, path in complete(root):
        try:
            marker = json.loads(read_member(path, MARKER))
            files = {name: read_member(path, name) for name in marker["files"]}
            bad = sorted(name for name, digest in marker["files"].items() if _sha256(files[name]) != digest)
            if bad:
                raise ValueError(f"{bad} do not match the marker's checksums")
            return read(files, marker["meta"]), path
        except Exception as exc:
            print(
                f"checkpoint {path} is unusable ({type(exc).__name__}: {exc}); trying an older one",
                flush=True,
            )
    return None


def resume_source(root: Path) -> Path | None:
    """Where to resume from: ``RESUME_FROM`` when the pipeline set it, else None.

    Without it, an existing complete checkpoint is named loudly: this try trains from scratch on
    purpose (a new round, or a failure class configured not to resume), never by accident.
    """
    resume_from = os.environ.get("RESUME_FROM")
    if resume_from:
        return Path(resume_from)
    existing = complete(root)
    if existing:
        print(f"RESUME_FROM is not set: training from scratch although {existing[0][1]} exists", flush=True)
    return None


def resume(out_dir: Path, decode: Callable[[dict[str, bytes]], dict[str, Any]]) -> dict[str, Any] | None:
    """The state to resume from (``decode``'s dict plus ``history`` and ``resumes``), or None.

    ``history`` is the metrics of the epochs the checkpoint covers; ``resumes`` lists every resume
    of the round, this one included, for the run report. When RESUME_FROM holds nothing usable the
    script says so and trains from the first epoch.
    """
    source = resume_source(checkpoint_dir(out_dir))
    if source is None:
        return None

    def read(files: dict[str, bytes], meta: dict[str, Any]) -> dict[str, Any]:
        return {**decode(files), "history": meta["history"], "resumes": meta.get("resumes", [])}

    found = load_newest(source, read)
    if found is None:
        print(f"RESUME_FROM={source} has no usable checkpoint: training from epoch 1", flush=True)
        return None
    state, path = found
    print(f"resuming from {path} (epoch {state['epoch']})", flush=True)
    resumed = {"attempt": ATTEMPT, "from_epoch": state["epoch"], "checkpoint": str(path)}
    return {**state, "resumes": [*state["resumes"], resumed]}


def save_epoch(out_dir: Path, epoch: int, state: bytes, metrics: dict[str, Any]) -> None:
    """Publish metrics.json (``epochs`` and ``resumes`` among its keys), then the epoch's checkpoint,
    which carries the same history, so a resumed try reports every epoch of the round."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{METRICS}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(metrics, indent=2) + "\n")
    os.replace(tmp, out_dir / METRICS)
    meta = {"history": metrics["epochs"], "resumes": metrics["resumes"]}
    save(checkpoint_dir(out_dir), epoch, {"state.pt": state}, meta)


def read_member(directory: Path, name: str) -> bytes:
    """The bytes of ``name``, a regular file directly inside ``directory``; ValueError otherwise.

    The name is checked as text and the entry with ``lstat`` before anything is opened, so a path
    out of the directory, a link, a device or a FIFO is refused unread. The open then refuses a link
    and does not wait for a writer (``O_NOFOLLOW | O_NONBLOCK``), and the opened file is checked
    again, so an entry swapped after the check is refused too.
    """
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(
            f"the marker names {name!r}, which is not a file name in {directory} "
            "(a marker may name only files directly inside its checkpoint directory)"
        )
    member = directory / name
    kind = _kind(os.lstat(member).st_mode)
    if kind != "regular file":
        raise ValueError(
            f"{member} is a {kind}, not a regular file "
            "(a checkpoint's marker and the files it names must be regular files, not links)"
        )
    fd = os.open(member, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as opened:
        kind = _kind(os.fstat(opened.fileno()).st_mode)
        if kind != "regular file":
            raise ValueError(f"{member} became a {kind} after it was checked")
        return opened.read()


def _kind(mode: int) -> str:
    """What a file is, in the words of the message that refuses it."""
    kinds = (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((word for test, word in kinds if test(mode)), "special file")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
