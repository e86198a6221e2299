"""Range queries against a Prometheus HTTP API (``/api/v1/query_range``), as the ACK backend reads GPU use.

ACK's GPU monitoring exports the DCGM exporter's metrics to a Prometheus (ACK's managed
Prometheus, or one of the cluster's own); an environment names its base URL
(``gpu_metrics_url``). The query is a GET with ``query``, ``start`` and ``end`` (UNIX seconds)
and ``step`` (seconds); the answer is ``{"status": "success", "data": {"resultType": "matrix",
"result": [{"metric": {...labels}, "values": [[<unix seconds>, "<value>"], ...]}]}}``, or
``{"status": "error", "errorType", "error"}`` (Prometheus docs, "HTTP API": "Range queries",
"Format overview"). Prometheus refuses more than 11,000 points per series ("exceeded maximum
resolution of 11,000 points per timeseries", web/api/v1/api.go), so :func:`range_step` widens the
step of a long range.

The URL carries no credentials (the ACK settings refuse a user or password in it), so an error may
name it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

#: Prometheus' bound on the points of one series in a range query.
MAX_POINTS = 11_000
QUERY_TIMEOUT_SECONDS = 10.0

#: One series of a matrix: its labels and its (UNIX seconds, value) points.
Series = tuple[dict[str, str], list[tuple[float, float]]]


class PrometheusError(RuntimeError):
    """A range query failed; the message names the server and why."""


def range_step(start: datetime, end: datetime, least: float) -> float:
    """``least`` seconds, or the smallest step that keeps ``start``..``end`` within ``MAX_POINTS``."""
    return max(least, math.ceil((end - start).total_seconds() / MAX_POINTS))


async def aquery_range(url: str, query: str, start: datetime, end: datetime, step: float) -> list[Series]:
    """Every series ``query`` selects over ``start``..``end`` at ``step`` seconds; values that are
    not numbers (``NaN``, ``+Inf``) are left out."""
    import httpx

    where = url.rstrip("/")
    params: dict[str, str | float] = {
        "query": query,
        "start": start.timestamp(),
        "end": end.timestamp(),
        "step": step,
    }
    try:
        async with httpx.AsyncClient(timeout=QUERY_TIMEOUT_SECONDS) as client:
            response = await client.get(f"{where}/api/v1/query_range", params=params)
    except httpx.HTTPError as exc:
        raise PrometheusError(f"{where}: {type(exc).__name__}: {exc}") from None
    try:
        return _matrix(response.json())
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise PrometheusError(f"{where}: HTTP {response.status_code}: {exc}") from None


def _matrix(answer: Any) -> list[Series]:
    """The series of a range query's answer; ValueError naming what is wrong with it."""
    if not isinstance(answer, dict):
        raise ValueError("not a Prometheus API answer")
    if answer.get("status") != "success":
        raise ValueError(f"{answer.get('errorType', 'error')}: {answer.get('error', 'no error given')}")
    data = answer["data"]
    if data.get("resultType") != "matrix":
        raise ValueError(f"a range query answered {data.get('resultType')!r}, not a matrix")
    return [(dict(item.get("metric") or {}), _points(item.get("values") or [])) for item in data["result"]]


def _points(values: list[Any]) -> list[tuple[float, float]]:
    points = []
    for at, text in values:
        value = float(text)
        if math.isfinite(value):
            points.append((float(at), value))
    return points
