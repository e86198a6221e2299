"""Atomic publication of a directory: readers see the old complete version or the new one, never a mix.

Replacing a published directory swaps it with the new one in one ``renameat2(RENAME_EXCHANGE)`` where
the filesystem supports it (ext4, xfs, btrfs...), so there is no moment without a version. Where it
does not (NFS, which CPFS may be mounted as), the old directory is renamed aside first; if the
process dies between the two renames, the next publication (and ``restore_retired``) puts the old
version back instead of leaving nothing.

Publication replaces and then deletes the directory at its target, and the target is partly chosen
by whoever triggers a run (``<root>/<dataset version>``), so it only ever replaces a directory an
earlier publication wrote, recognised by the manifest every publication writes into it. Anything
else is refused before anything is copied, with a SpecError naming the directory:

- a target that exists without that manifest (a regular file, not a link), such as a DAG folder;
- a target, its ``.<name>.partial`` sibling (which is written into and pruned) or a lock file that
  is a symbolic link: a link can point anywhere, so it is never written through, replaced or
  deleted;
- a ``.<name>.retired-*`` sibling that is a link or holds no manifest is not put back in place (and
  never deleted): it is left alone with a warning.

The root itself (and the folders above the target) may be links: they are the administrator's mount
layout, set in the environment file, not something a trigger chooses.

One writer per target: ``publication_lock`` holds an exclusive ``flock`` on ``.<name>.lock`` beside
the target while a publisher reads its source, fills the partial directory and publishes it, so two
publishers never share a partial directory. The staging engine waits for it (the second stager then
finds the version staged); artifact publication does not wait and names the holder, which each
holder writes into the lock file.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import shutil
import socket
import stat
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
log = logging.getLogger(__name__)


def partial_of(target: Path) -> Path:
    """Where a publication of ``target`` is assembled: a hidden sibling, renamed into place at the end."""
    return target.with_name(f".{target.name}.partial")


def lock_of(target: Path) -> Path:
    """The lock file of ``target``: a hidden sibling, kept after publication (see ``publication_lock``)."""
    return target.with_name(f".{target.name}.lock")


class PublicationBusy(RuntimeError):
    """Another publisher holds the lock of a target (raised only to a publisher that does not wait)."""

    def __init__(self, lock: Path, holder: str) -> None:
        super().__init__(f"{lock} is held by {holder}")
        self.lock = lock
        self.holder = holder


@contextlib.contextmanager
def publication_lock(target: Path, field: str, *, wait: bool) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_of(target)``: one writer per target at a time.

    The file is opened without following a link and refused unless it is a plain file of its own
    (a hard link to another file would have that file overwritten with the holder's name). It is
    never deleted: a writer waiting on a deleted lock file and one that created a new one would both
    hold "the" lock. The kernel drops the lock when its holder dies, so a killed publisher leaves
    nothing that blocks the next one. Without ``wait``, a held lock raises PublicationBusy naming
    the holder as it wrote itself into the file.
    """
    path = lock_of(target)
    refuse_link(path, field)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        _refuse_shared_file(fd, path, field)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            written = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            raise PublicationBusy(path, written or "a publisher that has not written its name yet") from None
        _write_holder(fd)
        yield
    finally:
        os.close(fd)


def holder_description() -> str:
    """Who is publishing, for a lock: the process and host, and the Airflow task when one runs it."""
    task = [
        os.environ.get(f"AIRFLOW_CTX_{name}") for name in ("DAG_ID", "DAG_RUN_ID", "TASK_ID", "TRY_NUMBER")
    ]
    who = f"pid {os.getpid()} on {socket.gethostname()}"
    return f"{who} (Airflow task {task[0]}/{task[1]}/{task[2]}, try {task[3]})" if all(task) else who


def _write_holder(fd: int) -> None:
    """Name the holder in its lock file, for a publisher that finds it held.

    Best effort: on a full disk the name cannot be written, and the run must still get as far as
    saying that there is no space (the file is then empty, and a contender says so).
    """
    os.ftruncate(fd, 0)
    with contextlib.suppress(OSError):
        os.pwrite(
            fd,
            f"{holder_description()} since {datetime.now(UTC).isoformat(timespec='seconds')}\n".encode(),
            0,
        )


def _refuse_shared_file(fd: int, path: Path, field: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise SpecError(
            f"{field}: {path} is not a plain lock file (it is a special file or a hard link to another "
            "file); publishing never writes into a file it cannot tell is its own (fix: remove it)"
        )


def check_publishable(target: Path, manifest: str, field: str) -> None:
    """Raise SpecError unless publishing to ``target`` can only replace what a publication wrote.

    ``manifest`` is the file every publication writes into its directory; ``field`` the setting
    that chose ``target``, named in the error with the fix.
    """
    refuse_link(target, field)
    refuse_link(partial_of(target), field)
    if os.path.lexists(target) and not _published(target, manifest):
        raise SpecError(
            f"{field}: {target} already exists and holds no {manifest}, so it was not published here; "
            "publishing never replaces or deletes a directory it did not publish "
            f"(fix: change {field} so that it names a new directory, or move {target} away if it may "
            "be replaced)"
        )


def refuse_link(path: Path, field: str) -> None:
    """Raise SpecError when ``path`` is a symbolic link (dangling or not)."""
    if path.is_symlink():
        raise SpecError(
            f"{field}: {path} is a symbolic link (to {os.readlink(path)}); publishing never writes "
            f"through, replaces or deletes a link, which could point anywhere (fix: remove the link, "
            f"or change {field} so that it names a real directory)"
        )


def publish_directory(target: Path, manifest: str, field: str) -> None:
    """Make ``partial_of(target)`` the content of ``target``; an existing ``target`` is removed only
    after the swap.

    Checked again here, right before anything is replaced: a directory may have appeared at the
    target while the content was copied.
    """
    partial = partial_of(target)
    restore_retired(target, manifest)
    check_publishable(target, manifest, field)
    if not os.path.lexists(target):
        os.replace(partial, target)
        return
    if _exchange(partial, target):
        shutil.rmtree(partial)  # it now holds the previous version
        return
    retired = target.with_name(f".{target.name}.retired-{uuid.uuid4().hex[:8]}")
    os.replace(target, retired)
    os.replace(partial, target)
    shutil.rmtree(retired)


def restore_retired(target: Path, manifest: str) -> None:
    """Put back a version a publication renamed aside and then died before replacing."""
    if os.path.lexists(target):
        return
    retired = sorted(target.parent.glob(f".{target.name}.retired-*"))
    ours = [path for path in retired if _published(path, manifest)]
    for path in retired:
        if path not in ours:
            log.warning("Not restoring %s: a link or without %s, so no publication left it", path, manifest)
    if ours:
        os.replace(ours[-1], target)


def _published(directory: Path, manifest: str) -> bool:
    """Whether ``directory`` is a real directory holding ``manifest`` as a regular file."""
    try:
        return stat.S_ISDIR(os.lstat(directory).st_mode) and stat.S_ISREG(
            os.lstat(directory / manifest).st_mode
        )
    except OSError:
        return False


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically; False when the system or filesystem cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))
