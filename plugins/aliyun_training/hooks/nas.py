"""NAS 2017-06-26 through the ``alibaba_cloud`` connection: CPFS data flows and their tasks.

Id filters (Key DataFlowIds / TaskIds) match parts of ids, so the look-ups compare exactly;
DescribeDataFlows / DescribeDataFlowTasks answer MaxResults entries (10 to 100, default 20) and a
NextToken while more remain: every page is read, at the largest size.
"""

from __future__ import annotations

from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook, abody

#: The most entries DescribeDataFlows / DescribeDataFlowTasks answer per page (SDK: 10 to 100).
MAX_RESULTS = 100


class NasHook(AlibabaCloudHook):
    """The data-flow calls of the CPFS stager, each under the retry policy; ``a*`` are async twins."""

    hook_name = "Alibaba Cloud NAS"
    service = "nas"

    def find_data_flow(self, file_system_id: str, data_flow_id: str) -> Any | None:
        """The data flow of that exact id on the file system, or None."""
        from alibabacloud_nas20170626 import models

        def page(token: str | None) -> tuple[list[Any], str | None]:
            request = models.DescribeDataFlowsRequest(
                file_system_id=file_system_id,
                filters=[models.DescribeDataFlowsRequestFilters(key="DataFlowIds", value=data_flow_id)],
                max_results=MAX_RESULTS,
                next_token=token,
            )
            body = self.conn.describe_data_flows(request).body
            return (body.data_flow_info.data_flow if body.data_flow_info else None) or [], body.next_token

        flows = self.call_token_pages("DescribeDataFlows", page)
        return next((flow for flow in flows if flow.data_flow_id == data_flow_id), None)

    def create_data_flow_task(self, request: Any) -> str:
        """CreateDataFlowTask; the task id. Its ClientToken makes a retried call answer the same task."""
        return self.call("CreateDataFlowTask", lambda: self.conn.create_data_flow_task(request).body.task_id)

    def find_data_flow_task(self, file_system_id: str, task_id: str) -> Any | None:
        """The task of that exact id on the file system (status, ProgressStats), or None."""

        def page(token: str | None) -> tuple[list[Any], str | None]:
            body = self.conn.describe_data_flow_tasks(_tasks_request(file_system_id, task_id, token)).body
            return _tasks_of(body), body.next_token

        tasks = self.call_token_pages("DescribeDataFlowTasks", page)
        return next((task for task in tasks if task.task_id == task_id), None)

    async def afind_data_flow_task(self, file_system_id: str, task_id: str) -> Any | None:
        async def page(token: str | None) -> tuple[list[Any], str | None]:
            request = _tasks_request(file_system_id, task_id, token)
            body = await abody(self.conn.describe_data_flow_tasks_async(request))
            return _tasks_of(body), body.next_token

        async for task in self.acall_token_pages("DescribeDataFlowTasks", page):
            if task.task_id == task_id:
                return task
        return None

    def cancel_data_flow_task(self, file_system_id: str, data_flow_id: str, task_id: str) -> None:
        """Ask the service to cancel the task (it goes Canceling, then Canceled)."""
        request = _cancel_request(file_system_id, data_flow_id, task_id)
        self.call("CancelDataFlowTask", lambda: self.conn.cancel_data_flow_task(request))

    async def acancel_data_flow_task(self, file_system_id: str, data_flow_id: str, task_id: str) -> None:
        request = _cancel_request(file_system_id, data_flow_id, task_id)
        await self.acall("CancelDataFlowTask", lambda: self.conn.cancel_data_flow_task_async(request))


def _tasks_request(file_system_id: str, task_id: str, token: str | None) -> Any:
    from alibabacloud_nas20170626 import models

    return models.DescribeDataFlowTasksRequest(
        file_system_id=file_system_id,
        filters=[models.DescribeDataFlowTasksRequestFilters(key="TaskIds", value=task_id)],
        max_results=MAX_RESULTS,
        next_token=token,
    )


def _tasks_of(body: Any) -> list[Any]:
    return (body.task_info.task if body.task_info else None) or []


def _cancel_request(file_system_id: str, data_flow_id: str, task_id: str) -> Any:
    from alibabacloud_nas20170626 import models

    return models.CancelDataFlowTaskRequest(
        file_system_id=file_system_id, data_flow_id=data_flow_id, task_id=task_id
    )
