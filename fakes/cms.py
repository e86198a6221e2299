"""CloudMonitor 2019-01-01 emulator: DescribeMetricList over the GPU series a test sets per DLC job (RPC).

A test says how busy a job's GPUs are (:meth:`CloudMonitorEmulator.set_gpu_use`: per pod, a
utilization and the GPU memory held, each a number or a function of the time and the pod), and
the emulator answers DescribeMetricList from it as CloudMonitor would: one datapoint per pod and
reporting period in the asked range, up to the clock's now.

Action and wire names are the SDK's (alibabacloud_cms20190101 4.0.10): ``POST /`` RPC with the
parameters in the query (Namespace, MetricName, Dimensions, StartTime, EndTime, Period, Length,
NextToken, Express); the answer's ``Datapoints`` is a JSON **string** of a list. Query parameters
the SDK's request model does not know are refused.

Documented rules the emulator enforces (DescribeMetricListRequest docstrings, and the
DescribeMetricList API reference, help.aliyun.com document 51936):

- Namespace and MetricName: "This parameter is required."
- StartTime / EndTime: "UNIX timestamp: the number of milliseconds that have elapsed since
  00:00:00 UTC on January 1, 1970" or "YYYY-MM-DD hh:mm:ss" (older references:
  ``YYYY-MM-DDThh:mm:ssZ``); "The time range is a left-open and right-closed interval. The value
  of StartTime must be earlier than the value of EndTime"; "The interval between StartTime and
  EndTime must be less than or equal to 31 days."
- Dimensions: key-value pairs as JSON (``{"instanceId": "i-..."}``, or a list of such objects);
  "A single request can be used to query a maximum of 50 instances."
- Length: "The maximum value of Length in a single request is 1440"; its default 1000 (the PAI
  GetMetrics proxy's docstring: "Default value: 1000").
- NextToken: "If a value is returned for this parameter, it indicates that more data is
  available. To retrieve the next page, use the returned value as the NextToken in your next
  request. A null value indicates that all data has been retrieved."
- Period: "If you do not set this parameter, the reporting period that was specified when the
  metric was registered is used"; "The statistical period of each metric ... is different". A
  datapoint summarizes the period ending at its ``timestamp`` (milliseconds).
- Code "200" and Success true in a successful answer ("A value of 200 indicates that the call was
  successful").

Decisions where the service's behaviour is not documented:

- The ``acs_pai_dlc`` metrics served are :data:`GPU_UTILIZATION` and :data:`GPU_MEMORY_USED`
  (docs/fidelity.md, "CloudMonitor (GPU use of DLC jobs)", says where the names come from), each
  reported every :data:`REPORTING_PERIOD` seconds per pod, with the dimensions ``jobId``, ``pod``,
  ``regionId`` and ``userId`` (the PAI GetMetrics docstring's example dimensions). A Period that is
  not a whole multiple of the reporting period is refused (400 ``InvalidParameter``): the data
  cannot be aggregated to it.
- A datapoint carries its series' dimensions, ``timestamp`` and ``Average``/``Maximum``/
  ``Minimum`` (the reference's example datapoint); one pod's GPUs are reported together.
- A dimension set selects the series whose dimensions hold every one of its pairs; a set that
  matches nothing adds nothing (no error).
- Codes: a missing Namespace / MetricName answers 400 ``MissingNamespace`` / ``MissingMetricName``
  (the gateway's ``Missing<Parameter>`` form); a bad value 400 ``InvalidParameter``. A namespace or
  metric the emulator does not serve answers HTTP 200 with Success false and Code
  ``ResourceNotFound`` (the answer's own verdict fields, which the SDK documents).
- Points are in time order, then pod order; without StartTime the range starts an hour before
  EndTime, and EndTime defaults to now.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from alibabacloud_cms20190101 import models as cms_models

from fakes.base import ApiError, ApiRequest, query_checked
from fakes.ram import RamAuthorizedEmulator

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

NAMESPACE = "acs_pai_dlc"
GPU_UTILIZATION = "JOB_GPU_ACCELERATOR_DUTTY_UTIL"
GPU_MEMORY_USED = "JOB_GPU_MEMORY_USED"
REPORTING_PERIOD = 60
MAX_INSTANCES = 50
DEFAULT_LENGTH = 1000
MAX_LENGTH = 1440
MAX_RANGE_SECONDS = 31 * 24 * 3600
DEFAULT_RANGE_SECONDS = 3600
#: A value per pod and time: a number, or ``f(epoch_seconds, pod)``.
Series = float | Callable[[float, str], float]


@dataclass
class JobGpuUse:
    """What a job's pods report from ``since`` (epoch seconds) on."""

    job_id: str
    pods: tuple[str, ...]
    since: float
    utilization: Series
    memory_used_mib: Series

    def value(self, metric: str, at: float, pod: str) -> float:
        series = self.utilization if metric == GPU_UTILIZATION else self.memory_used_mib
        return float(series(at, pod) if callable(series) else series)


class CloudMonitorEmulator(RamAuthorizedEmulator):
    """CloudMonitor: DescribeMetricList of the ``acs_pai_dlc`` GPU metrics."""

    api_version = "2019-01-01"

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        region: str = "cn-wulanchabu",
        user_id: str = "1234567890123456",
    ) -> None:
        super().__init__(access_keys)
        self.region = region
        self.user_id = user_id
        self.jobs: dict[str, JobGpuUse] = {}
        #: The metrics of ``acs_pai_dlc`` this emulator serves; a test may take one away.
        self.metrics = {GPU_UTILIZATION, GPU_MEMORY_USED}
        #: Issued NextTokens: the request they continue (its parameters but the token) and where.
        self._next_tokens: dict[str, tuple[tuple[tuple[str, str], ...], int]] = {}
        request_models = {"DescribeMetricList": cms_models.DescribeMetricListRequest}
        handler = query_checked(self._describe_metric_list, request_models, dict, lambda: None)
        self.add_rpc_action("DescribeMetricList", handler, cms_models.DescribeMetricListResponseBody)

    # ----------------------------------------------------------------------------- setup

    def set_gpu_use(
        self,
        job_id: str,
        pods: Sequence[str],
        utilization: Series,
        memory_used_mib: Series = 20_000.0,
        since: float | None = None,
    ) -> JobGpuUse:
        """Make ``job_id``'s ``pods`` report ``utilization`` (percent) and ``memory_used_mib`` from
        ``since`` (default: the clock's now) on."""
        with self._lock:
            use = JobGpuUse(
                job_id, tuple(pods), self.clock() if since is None else since, utilization, memory_used_mib
            )
            self.jobs[job_id] = use
            return use

    # ----------------------------------------------------------------------------- handler

    def _describe_metric_list(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        namespace, metric = _required(query, "Namespace"), _required(query, "MetricName")
        period = _period(query.get("Period"))
        end = _time(query, "EndTime", self.clock())
        start = _time(query, "StartTime", end - DEFAULT_RANGE_SECONDS)
        if start >= end:
            raise _invalid("StartTime", "must be earlier than EndTime")
        if end - start > MAX_RANGE_SECONDS:
            raise _invalid("EndTime", "the interval between StartTime and EndTime must be at most 31 days")
        length = _length(query.get("Length"))
        dimensions = _dimensions(query.get("Dimensions"))
        if namespace != NAMESPACE or metric not in self.metrics:
            return {
                "Code": "ResourceNotFound",
                "Message": f"The metric {namespace}/{metric} does not exist.",
                "Success": False,
            }
        points = self._points(metric, dimensions, start, min(end, self.clock()), period)
        first = self._resume(query)
        page = points[first : first + length]
        answer: dict[str, Any] = {
            "Code": "200",
            "Success": True,
            "Period": str(period),
            "Datapoints": json.dumps(page),
        }
        if first + length < len(points):
            token = secrets.token_hex(24)
            self._next_tokens[token] = (_continued(query), first + length)
            answer["NextToken"] = token
        return answer

    def _resume(self, query: Mapping[str, str]) -> int:
        """Where a NextToken continues; it must have been issued for this very request."""
        token = query.get("NextToken")
        if not token:
            return 0
        issued = self._next_tokens.get(token)
        if issued is None or issued[0] != _continued(query):
            raise _invalid("NextToken", f"{token!r} was not issued for this request")
        return issued[1]

    def _points(
        self, metric: str, dimensions: list[dict[str, str]], start: float, end: float, period: int
    ) -> list[dict[str, Any]]:
        """Every period boundary in (start, end] since a matching series began, in time then pod order."""
        series = []
        for use in self.jobs.values():
            for pod in use.pods:
                labels = self._labels(use, pod)
                if any(selector.items() <= labels.items() for selector in dimensions):
                    series.append((use, pod, labels))
        points = []
        for use, pod, labels in series:
            first = max(start, use.since)
            at = (int(first) // period + 1) * period
            while at <= end:
                value = round(use.value(metric, at, pod), 2)
                points.append(
                    {
                        "timestamp": at * 1000,
                        **labels,
                        "Average": value,
                        "Maximum": value,
                        "Minimum": value,
                    }
                )
                at += period
        pods = {(use.job_id, pod): index for index, (use, pod, _) in enumerate(series)}
        return sorted(points, key=lambda point: (point["timestamp"], pods[(point["jobId"], point["pod"])]))

    def _labels(self, use: JobGpuUse, pod: str) -> dict[str, str]:
        return {"jobId": use.job_id, "pod": pod, "regionId": self.region, "userId": self.user_id}


def _required(query: Mapping[str, str], name: str) -> str:
    value = query.get(name)
    if not value:
        raise ApiError(400, f"Missing{name}", f"{name} is mandatory for this action.")
    return value


def _period(text: str | None) -> int:
    if text is None or text == "":
        return REPORTING_PERIOD
    if not text.isdigit() or int(text) == 0 or int(text) % REPORTING_PERIOD:
        raise _invalid(
            "Period", f"{text!r} is not a whole multiple of the metric's {REPORTING_PERIOD} s period"
        )
    return int(text)


def _time(query: Mapping[str, str], name: str, default: float) -> float:
    """Epoch seconds of a UNIX-milliseconds value or a ``YYYY-MM-DD hh:mm:ss`` / ``...Thh:mm:ssZ`` time
    (read as UTC: the reference names no zone); ``default`` when the query has none."""
    text = query.get(name)
    if not text:
        return default
    if text.isdigit():
        return int(text) / 1000
    for layout in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, layout).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise _invalid(name, f"{text!r} is neither UNIX milliseconds nor YYYY-MM-DD hh:mm:ss")


def _length(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_LENGTH
    if not text.isdigit() or not 1 <= int(text) <= MAX_LENGTH:
        raise _invalid("Length", f"{text!r} must be 1 to {MAX_LENGTH}")
    return int(text)


def _dimensions(text: str | None) -> list[dict[str, str]]:
    """The dimension sets a request names; none names every series of the metric."""
    if not text:
        return [{}]
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid("Dimensions", f"not JSON: {exc}") from exc
    sets = parsed if isinstance(parsed, list) else [parsed]
    if not all(isinstance(item, dict) and all(isinstance(v, str) for v in item.values()) for item in sets):
        raise _invalid("Dimensions", "must be an object of strings or a list of them")
    if len(sets) > MAX_INSTANCES:
        raise _invalid("Dimensions", f"{len(sets)} instances; a request may name at most {MAX_INSTANCES}")
    return sets


def _continued(query: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((key, value) for key, value in query.items() if key != "NextToken"))


def _invalid(name: str, problem: str) -> ApiError:
    return ApiError(400, "InvalidParameter", f"The parameter {name} is invalid: {problem}.")
