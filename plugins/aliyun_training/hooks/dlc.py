"""PAI-DLC 2020-12-03 through the ``alibaba_cloud`` connection: jobs, pod logs, events, console links."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook, abody

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

#: ListJobs' largest page ("PageSize": maximum 100, default 10, in the API reference's metadata).
LIST_JOBS_PAGE_SIZE = 100


class DlcHook(AlibabaCloudHook):
    """The PAI-DLC calls a backend makes, each under the retry policy; ``a*`` methods are async twins."""

    hook_name = "Alibaba Cloud PAI-DLC"
    service = "dlc"

    def create_job(self, request: Any, existing: Callable[[], str | None]) -> str:
        """CreateJob; the new job's id. CreateJob has no idempotency token, so a retry after a lost
        answer first asks ``existing`` for the job that answer may have made (its id, or None)."""
        return self.call_once("CreateJob", lambda: self.conn.create_job(request).body.job_id, existing)

    def jobs(
        self,
        *,
        workspace_id: str | None,
        start_time: str,
        display_name: str | None = None,
        status: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> Iterator[Any]:
        """ListJobs newest first from ``start_time``: every page, each read only when reached.

        DisplayName matches fuzzily (``name`` also lists ``name-2``); the caller compares exactly.
        ``status`` is one of the job statuses ListJobsRequest's docstring lists: one, as it
        documents no way to ask for several. ``tags`` ("The tags used for filtering"; the SDK sends
        the map as JSON) narrows the listing to jobs carrying them; the caller checks them again.
        """
        from alibabacloud_pai_dlc20201203 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.ListJobsRequest(
                display_name=display_name,
                status=status,
                tags=tags,
                workspace_id=workspace_id,
                start_time=start_time,
                sort_by="GmtCreateTime",
                order="desc",
                page_number=number,
                page_size=LIST_JOBS_PAGE_SIZE,
            )
            body = self.conn.list_jobs(request).body
            return body.jobs or [], body.total_count

        return self.call_pages("ListJobs", page)

    async def ajobs_by_id(
        self, job_ids: Sequence[str], *, workspace_id: str | None, start_time: str
    ) -> list[Any]:
        """ListJobs of the jobs ``job_ids`` ("JobIds: A list of job IDs separated by commas") created
        since ``start_time``: one page, so at most ``LIST_JOBS_PAGE_SIZE`` ids per call. A job the
        answer leaves out (deleted, created earlier, another workspace) is the caller's to ask about."""
        from alibabacloud_pai_dlc20201203 import models

        if len(job_ids) > LIST_JOBS_PAGE_SIZE:
            raise ValueError(f"ListJobs answers at most {LIST_JOBS_PAGE_SIZE} jobs a page; ask in chunks")
        request = models.ListJobsRequest(
            job_ids=",".join(job_ids),
            workspace_id=workspace_id,
            start_time=start_time,
            page_number=1,
            page_size=LIST_JOBS_PAGE_SIZE,
        )
        body = await self.acall("ListJobs", lambda: abody(self.conn.list_jobs_async(request)))
        return list(body.jobs or [])

    def get_job(self, job_id: str) -> Any:
        """GetJob with its details (pods, status history): the answer's body."""
        return self.call("GetJob", lambda: self.conn.get_job(job_id, _get_job_request()).body)

    async def aget_job(self, job_id: str) -> Any:
        return await self.acall("GetJob", lambda: abody(self.conn.get_job_async(job_id, _get_job_request())))

    def get_pod_logs(self, job_id: str, pod_id: str, *, max_lines: int, start_time: str | None) -> list[str]:
        """GetPodLogs: at most ``max_lines`` lines written since ``start_time`` (DLC's format)."""
        request = _logs_request(max_lines, start_time)
        body = self.call("GetPodLogs", lambda: self.conn.get_pod_logs(job_id, pod_id, request).body)
        return list(body.logs or [])

    async def aget_pod_logs(
        self, job_id: str, pod_id: str, *, max_lines: int, start_time: str | None
    ) -> list[str]:
        request = _logs_request(max_lines, start_time)
        body = await self.acall(
            "GetPodLogs", lambda: abody(self.conn.get_pod_logs_async(job_id, pod_id, request))
        )
        return list(body.logs or [])

    def get_job_events(self, job_id: str) -> Any:
        """GetJobEvents with its defaults: the last 7 days, at most 2000 events (SDK docstring)."""
        return self.call("GetJobEvents", lambda: self.conn.get_job_events(job_id, _events_request()).body)

    async def aget_job_events(self, job_id: str) -> Any:
        return await self.acall(
            "GetJobEvents", lambda: abody(self.conn.get_job_events_async(job_id, _events_request()))
        )

    def get_pod_events(self, job_id: str, pod_id: str) -> list[str]:
        """GetPodEvents with its defaults (the last 7 days, at most 2000 events): the pod's own
        events (scheduling, image pulls, mounts, evictions), oldest first."""
        body = self.call(
            "GetPodEvents", lambda: self.conn.get_pod_events(job_id, pod_id, _pod_events_request()).body
        )
        return list(body.events or [])

    async def aget_pod_events(self, job_id: str, pod_id: str) -> list[str]:
        body = await self.acall(
            "GetPodEvents",
            lambda: abody(self.conn.get_pod_events_async(job_id, pod_id, _pod_events_request())),
        )
        return list(body.events or [])

    def get_sanity_checks(self, job_id: str) -> Any:
        """ListJobSanityCheckResults: it takes no paging parameters, one answer holds every round."""
        return self.call(
            "ListJobSanityCheckResults",
            lambda: self.conn.list_job_sanity_check_results(job_id, _sanity_checks_request()).body,
        )

    async def aget_sanity_checks(self, job_id: str) -> Any:
        return await self.acall(
            "ListJobSanityCheckResults",
            lambda: abody(self.conn.list_job_sanity_check_results_async(job_id, _sanity_checks_request())),
        )

    def stop_job(self, job_id: str) -> None:
        self.call("StopJob", lambda: self.conn.stop_job(job_id))

    async def astop_job(self, job_id: str) -> None:
        await self.acall("StopJob", lambda: self.conn.stop_job_async(job_id))

    def console_url(self, job_id: str, workspace_id: str | None) -> str:
        """The job's page in the PAI console.

        The format is the one Alibaba Cloud's own PAI-DLC job skill documents (repository
        aliyun/alibabacloud-aiops-skills, skill alibabacloud-pai-dlc-job, "Generate console links":
        https://pai.console.aliyun.com/?regionId={region}&workspaceId={workspace_id}#/dlc/jobs/{job_id}/overview).
        """
        return (
            f"https://pai.console.aliyun.com/?regionId={self.region}&workspaceId={workspace_id or ''}"
            f"#/dlc/jobs/{job_id}/overview"
        )


def _get_job_request() -> Any:
    from alibabacloud_pai_dlc20201203 import models

    return models.GetJobRequest(need_detail=True)


def _logs_request(max_lines: int, start_time: str | None) -> Any:
    from alibabacloud_pai_dlc20201203 import models

    return models.GetPodLogsRequest(max_lines=max_lines, start_time=start_time)


def _events_request() -> Any:
    """GetJobEvents with its defaults.

    Which end of a longer list MaxEventsNum keeps is not documented; asking the default and keeping
    the newest few (the caller's choice) shows the newest events either way, where asking for 20
    could show the first 20.
    """
    from alibabacloud_pai_dlc20201203 import models

    return models.GetJobEventsRequest()


def _pod_events_request() -> Any:
    from alibabacloud_pai_dlc20201203 import models

    return models.GetPodEventsRequest()


def _sanity_checks_request() -> Any:
    from alibabacloud_pai_dlc20201203 import models

    return models.ListJobSanityCheckResultsRequest()
