"""Atomic publication of a directory: readers see the old complete version or the new one, never a mix."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def publish_directory(partial: Path, target: Path) -> None:
    """Rename ``partial`` to ``target``; an existing ``target`` is removed only after the swap."""
    if not target.exists():
        os.replace(partial, target)
        return
    retired = target.with_name(f".{target.name}.retired-{uuid.uuid4().hex[:8]}")
    os.replace(target, retired)
    os.replace(partial, target)
    shutil.rmtree(retired)
