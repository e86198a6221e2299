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
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import stat
import uuid
from pathlib import Path

from aliyun_training.validation import SpecError

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
log = logging.getLogger(__name__)


def partial_of(target: Path) -> Path:
    """Where a publication of ``target`` is assembled: a hidden sibling, renamed into place at the end."""
    return target.with_name(f".{target.name}.partial")


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
