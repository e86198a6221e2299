"""Print the dataset version ``make demo`` makes next in a local object store folder.

Usage: python include/demo_version.py FOLDER

The first demo's version is 2026-11-22; each later one is the week after the newest version the
folder holds, so every ``make demo`` trains on data it has not seen (each synthetic version's samples
are its own) and the summary shows whether the promotion gate replaced the champion or held it.
Standard library only: make runs it before the virtualenv exists.
"""

from __future__ import annotations

import re
import sys
from datetime import date, timedelta
from pathlib import Path

FIRST = date(2026, 11, 22)
_VERSION = re.compile(r"\d{4}-\d\d-\d\d")


def next_version(folder: Path) -> str:
    """The week after the newest ``YYYY-MM-DD`` version in ``folder``; ``FIRST`` when it holds none."""
    names = [entry.name for entry in folder.iterdir()] if folder.is_dir() else []
    made = sorted(name for name in names if _VERSION.fullmatch(name))
    return (date.fromisoformat(made[-1]) + timedelta(days=7)).isoformat() if made else FIRST.isoformat()


if __name__ == "__main__":
    print(next_version(Path(sys.argv[1])))
