"""CloudMonitor 2019-01-01 (DescribeMetricList) through the ``alibaba_cloud`` connection.

PAI-DLC reports its jobs' GPU use to CloudMonitor (namespace ``acs_pai_dlc``): DLC's own
GetJobMetrics "is no longer maintained" for every job type but pay-as-you-go jobs on general
computing resources (GetJobMetrics reference). :meth:`CloudMonitorHook.describe_metric_list` reads
every datapoint of one metric for a set of dimensions over a time range: every page (NextToken),
and the dimensions ``MAX_DIMENSIONS`` at a time, the most one request may name
(DescribeMetricListRequest: "A single request can be used to query a maximum of 50 instances").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook, abody
from aliyun_training.hooks.retry import AlibabaCloudApiError

if TYPE_CHECKING:
    from datetime import datetime

#: Dimension sets (instances) one DescribeMetricList may name.
MAX_DIMENSIONS = 50
#: Datapoints a page holds: the documented default of ``Length`` (its maximum is 1440).
PAGE_LENGTH = 1000
ACTION = "DescribeMetricList"

#: One datapoint as CloudMonitor writes it, and the dimension sets (instances) a request names.
Datapoint = dict[str, Any]
Dimensions = Sequence[Mapping[str, str]]
#: A page's datapoints and the next page's token (None on the last).
Page = tuple[list[Datapoint], str | None]


class CloudMonitorHook(AlibabaCloudHook):
    """CloudMonitor's metric data; ``a*`` methods are the async twins."""

    hook_name = "Alibaba Cloud CloudMonitor"
    service = "cms"

    def describe_metric_list(
        self,
        namespace: str,
        metric_name: str,
        dimensions: Dimensions,
        start: datetime,
        end: datetime,
        period: int = 60,
    ) -> list[Datapoint]:
        """Every datapoint of ``metric_name`` for ``dimensions`` in (``start``, ``end``]: each one a
        dict as CloudMonitor writes it (``timestamp`` in milliseconds, the dimensions' keys, the
        statistics such as ``Average``)."""
        points: list[Datapoint] = []
        for chunk in _chunks(dimensions):

            def page(token: str | None, chunk: Dimensions = chunk) -> Page:
                request = _request(namespace, metric_name, chunk, start, end, period, token)
                return _page(self.conn.describe_metric_list(request).body)

            points += self.call_token_pages(ACTION, page)
        return points

    async def adescribe_metric_list(
        self,
        namespace: str,
        metric_name: str,
        dimensions: Dimensions,
        start: datetime,
        end: datetime,
        period: int = 60,
    ) -> list[Datapoint]:
        points: list[Datapoint] = []
        for chunk in _chunks(dimensions):

            async def page(token: str | None, chunk: Dimensions = chunk) -> Page:
                request = _request(namespace, metric_name, chunk, start, end, period, token)
                return _page(await abody(self.conn.describe_metric_list_async(request)))

            points += [point async for point in self.acall_token_pages(ACTION, page)]
        return points


def _chunks(dimensions: Dimensions) -> list[Dimensions]:
    return [dimensions[first : first + MAX_DIMENSIONS] for first in range(0, len(dimensions), MAX_DIMENSIONS)]


def _request(
    namespace: str,
    metric_name: str,
    dimensions: Dimensions,
    start: datetime,
    end: datetime,
    period: int,
    token: str | None,
) -> Any:
    """One page's request. Times go as UNIX milliseconds, the one format with no time zone to
    guess (the other documented one, ``YYYY-MM-DD hh:mm:ss``, names none)."""
    from alibabacloud_cms20190101 import models

    return models.DescribeMetricListRequest(
        namespace=namespace,
        metric_name=metric_name,
        dimensions=json.dumps([dict(item) for item in dimensions], separators=(",", ":")),
        start_time=str(int(start.timestamp() * 1000)),
        end_time=str(int(end.timestamp() * 1000)),
        period=str(period),
        length=str(PAGE_LENGTH),
        next_token=token,
    )


def _page(body: Any) -> Page:
    """A page's datapoints (``Datapoints`` is a JSON string) and the next page's token.

    The answer carries its own verdict besides the HTTP status: ``Success`` and ``Code`` ("A value
    of 200 indicates that the call was successful"); a refusal in the body is an API error too.
    """
    if body.success is False or (body.code not in (None, "", "200")):
        raise AlibabaCloudApiError(ACTION, str(body.code or "Failed"), body.message or "", body.request_id, 1)
    points = json.loads(body.datapoints or "[]")
    if not isinstance(points, list):
        raise AlibabaCloudApiError(
            ACTION, "InvalidDatapoints", "Datapoints is not a JSON list", body.request_id, 1
        )
    return points, body.next_token or None
