"""Atomic publication of a directory: readers see the old complete version or the new one, never a mix.

Replacing a published directory swaps it with the new one in one ``renameat2(RENAME_EXCHANGE)`` where
the filesystem supports it (ext4, xfs, btrfs...), so there is no moment without a version. Where it
does not (NFS, which CPFS may be mounted as), the old directory is renamed aside first; if the
process dies between the two renames, the next publication (and ``restore_retired``) puts the old
version back instead of leaving nothing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def publish_directory(partial: Path, target: Path) -> None:
    """Make ``partial`` the content of ``target``; an existing ``target`` is removed only after the swap."""
    restore_retired(target)
    if not target.exists():
        os.replace(partial, target)
        return
    if _exchange(partial, target):
        shutil.rmtree(partial)  # it now holds the previous version
        return
    retired = target.with_name(f".{target.name}.retired-{uuid.uuid4().hex[:8]}")
    os.replace(target, retired)
    os.replace(partial, target)
    shutil.rmtree(retired)


def restore_retired(target: Path) -> None:
    """Put back a version a publication renamed aside and then died before replacing."""
    if target.exists():
        return
    retired = sorted(target.parent.glob(f".{target.name}.retired-*"))
    if retired:
        os.replace(retired[-1], target)


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
