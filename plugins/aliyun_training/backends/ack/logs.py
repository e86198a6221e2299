"""Reading an ACK job's logs: every started pod's new lines since a cursor, merged by the kubelet's
timestamps and prefixed with their node, each read bounded in bytes (the log API counts
``sinceSeconds`` in whole seconds, so a read asks a little further back and drops what it saw)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from aliyun_training.backends.ack.status import rfc3339, stamp_key
from aliyun_training.backends.base import LogChunk, node_line

#: Bytes of new log read per poll at most; the rest comes with the next poll.
LOG_BYTES_PER_POLL = 256 * 1024


#: The log API counts ``sinceSeconds`` in whole seconds and ``limitBytes`` from the start of that
#: window, so a read cut short asks again from a second before its last line and gets the lines it
#: has seen first: each read that stops at its bound doubles the next one's, up to this many bytes.
LOG_BYTES_MAX = 16 * 1024 * 1024


#: How far ahead of the worker's clock a log line's timestamp may be before the clocks are taken to
#: disagree (see ``merged_chunk``).
LOG_CLOCK_SKEW_SECONDS = 60.0


@dataclass(frozen=True)
class _StampedLine:
    key: tuple[str, int]
    stamp: str
    node: int
    text: str


def merged_chunk(
    reads: list[tuple[int, dict[str, Any], str | None]], seen: dict[str, Any], asked_at: float
) -> LogChunk:
    """The pods' new lines merged by timestamp, each prefixed with its node, and each pod's cursor.

    No line is logged after one written later: the pods are read one after another, so a line
    stamped after the first read began (``asked_at``) may still be written to a pod read before it,
    and waits for the next poll; so do the other pods' lines stamped after the last whole line of a
    read cut at its byte bound (``read_limit``). The first rule compares the worker's clock with the
    kubelets': where a line read is more than ``LOG_CLOCK_SKEW_SECONDS`` in the worker's future the
    clocks disagree, and holding lines back by the worker's clock would hold them for good, so only
    the second applies. A pod with no log (deleted between listing and reading: cleanPodPolicy, a
    restart) keeps its cursor.
    """
    read: list[tuple[str, list[_StampedLine], bool]] = []
    truncated_at: list[tuple[str, int]] = []
    for node, pod, text in reads:
        if text is None:
            continue
        name = pod["metadata"]["name"]
        lines, reached, truncated = _new_lines(node, seen.get(name), text)
        read.append((name, lines, truncated))
        if truncated:
            truncated_at.append(reached)
    newest = max((line.key for _, lines, _ in read for line in lines), default=None)
    if newest is not None and newest <= stamp_key(rfc3339(asked_at + LOG_CLOCK_SKEW_SECONDS)):
        truncated_at.append(stamp_key(rfc3339(asked_at)))
    cut = min(truncated_at, default=None)
    shown = [[line for line in lines if cut is None or line.key <= cut] for _, lines, _ in read]
    pods = dict(seen)
    for (name, _, truncated), lines in zip(read, shown, strict=True):
        pods[name] = _advance(pods.get(name), lines, truncated)
    merged = heapq.merge(*shown, key=lambda line: line.key)
    return LogChunk(
        lines=[node_line(line.node, line.text) for line in merged],
        cursor={"pods": pods} if pods else {},
        more=any(truncated for _, _, truncated in read),
    )


def _new_lines(
    node: int, cursor: dict[str, Any] | None, text: str
) -> tuple[list[_StampedLine], tuple[str, int], bool]:
    """A pod's lines after the last one its cursor saw (lines sharing that timestamp are told
    apart by counting), the time of the last whole line read, seen or not, and whether the read
    stopped at its byte bound (it may end mid-line: only whole lines are kept, the rest comes next
    poll)."""
    last = (cursor or {}).get("last")
    seen_at_last = (cursor or {}).get("seen_at_last", 0)
    last_key = stamp_key(last) if last else None
    truncated = len(text.encode()) >= read_limit(cursor)
    complete = text[: text.rfind("\n") + 1] if truncated else text
    lines: list[_StampedLine] = []
    skipped = 0
    key = last_key or ("", 0)
    for raw in complete.splitlines():
        stamp, _, line = raw.partition(" ")
        key = stamp_key(stamp)
        if last_key is not None and key < last_key:
            continue
        if last_key is not None and key == last_key and skipped < seen_at_last:
            skipped += 1
            continue
        lines.append(_StampedLine(key, stamp, node, line))
    return lines, key, truncated


def _advance(cursor: dict[str, Any] | None, shown: list[_StampedLine], truncated: bool) -> dict[str, Any]:
    """A pod's cursor after ``shown``: its last timestamp, how many lines of it were seen, and the
    next read's byte bound (doubled after a read cut short, see ``LOG_BYTES_MAX``)."""
    limit = min(2 * read_limit(cursor), LOG_BYTES_MAX) if truncated else LOG_BYTES_PER_POLL
    if not shown:
        return {**(cursor or {}), "limit": limit}
    last = shown[-1]
    same = (cursor or {}).get("seen_at_last", 0) if (cursor or {}).get("last") == last.stamp else 0
    seen_at_last = same + sum(1 for line in shown if line.key == last.key)
    return {"last": last.stamp, "seen_at_last": seen_at_last, "limit": limit}


def read_limit(cursor: dict[str, Any] | None) -> int:
    """The byte bound of a pod's next log read."""
    return int((cursor or {}).get("limit", LOG_BYTES_PER_POLL))
