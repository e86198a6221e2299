"""Atomic file writes shared by the training script and the dataset generator (run by path)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary sibling and rename it, so a crash never leaves a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as handle:
            write(handle)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
