"""Reading the verify job's tools' output: the prefixes log collectors and mpirun put on each line,
and the one error for output a tool did not write as expected. Standard library only."""

from __future__ import annotations

import re

# Prefixes a job log puts before a tool's own line: an ISO-8601 timestamp (kubectl --timestamps,
# DLC log service) and mpirun --tag-output's "[1,0]<stdout>:".
_TIMESTAMP = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+")
_MPI_TAG = re.compile(r"^\s*\[\d+,\d+\]<(?:stdout|stderr)>:")


class ImageCheckError(ValueError):
    """A tool's output holds no result to judge: the message says what was expected and what was seen."""


def strip_prefixes(line: str) -> str:
    """The tool's own line, without the timestamp and mpirun tag a job log may put before it."""
    line = _TIMESTAMP.sub("", line, count=1)
    return _MPI_TAG.sub("", line, count=1)
