"""Container Registry 2018-12-01 (ACR Enterprise) through the ``alibaba_cloud`` connection.

Repositories, build rules, build records and their logs, and repository tags. Every answer carries
``Code`` and ``IsSuccess``; ACR answers some refusals with HTTP 200 and ``IsSuccess: false``, and
each method here raises those as :class:`AlibabaCloudApiError` like any other refusal. The two
lists answer PageNo, PageSize and TotalCount (a string) and are read page by page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook, abody, credential_error
from aliyun_training.hooks.retry import AlibabaCloudApiError

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Items per page of ListRepoBuildRecord / ListRepoBuildRule. The SDK and the API reference give no
#: default or maximum (the reference's example is 30); pages end by TotalCount, not by a short page,
#: so a service that answers fewer per page is still read to the end.
PAGE_SIZE = 100


def not_found(code: str) -> bool:
    """ACR's codes for a repository, build record or tag that does not exist (``REPO_NOT_EXIST``,
    ``*NotFound``, ``*_NOT_FOUND``); never one about the caller's credentials."""
    if credential_error(code):
        return False
    return "NOT_EXIST" in code.upper() or "NOTFOUND" in code.upper().replace(".", "").replace("_", "")


class CrHook(AlibabaCloudHook):
    """ACR Enterprise calls of the ``acr`` image builder, each under the retry policy."""

    hook_name = "Alibaba Cloud Container Registry"
    service = "cr"

    def get_repository(
        self,
        instance_id: str,
        *,
        repo_id: str | None = None,
        namespace: str | None = None,
        repo_name: str | None = None,
    ) -> Any:
        """GetRepository by ``repo_id``, or by ``namespace`` + ``repo_name`` when no id is given."""
        from alibabacloud_cr20181201 import models

        request = models.GetRepositoryRequest(
            instance_id=instance_id,
            repo_id=repo_id,
            repo_namespace_name=None if repo_id else namespace,
            repo_name=None if repo_id else repo_name,
        )
        return self._call("GetRepository", lambda: self.conn.get_repository(request).body)

    def build_records(self, instance_id: str, repo_id: str, max_pages: int | None = None) -> Iterator[Any]:
        """ListRepoBuildRecord, newest records first, page by page as they are read."""
        from alibabacloud_cr20181201 import models

        def page(number: int) -> tuple[list[Any], str | None]:
            request = models.ListRepoBuildRecordRequest(
                instance_id=instance_id, repo_id=repo_id, page_no=number, page_size=PAGE_SIZE
            )
            body = _checked("ListRepoBuildRecord", self.conn.list_repo_build_record(request).body)
            return body.build_records or [], body.total_count

        return self.call_pages("ListRepoBuildRecord", page, max_pages)

    def build_rules(self, instance_id: str, repo_id: str) -> Iterator[Any]:
        """ListRepoBuildRule, page by page as they are read."""
        from alibabacloud_cr20181201 import models

        def page(number: int) -> tuple[list[Any], str | None]:
            request = models.ListRepoBuildRuleRequest(
                instance_id=instance_id, repo_id=repo_id, page_no=number, page_size=PAGE_SIZE
            )
            body = _checked("ListRepoBuildRule", self.conn.list_repo_build_rule(request).body)
            return body.build_rules or [], body.total_count

        return self.call_pages("ListRepoBuildRule", page)

    def update_build_rule(self, request: Any) -> None:
        """UpdateRepoBuildRule (an ``UpdateRepoBuildRuleRequest``)."""
        self._call("UpdateRepoBuildRule", lambda: self.conn.update_repo_build_rule(request).body)

    def create_build_record(self, request: Any) -> Any:
        """CreateBuildRecordByRule (a ``CreateBuildRecordByRuleRequest``): the answer, with BuildRecordId."""
        return self._call(
            "CreateBuildRecordByRule", lambda: self.conn.create_build_record_by_rule(request).body
        )

    def get_build_record(self, instance_id: str, build_record_id: str) -> Any:
        """GetRepoBuildRecord: Status, Image.ImageTag, StartTime/EndTime (ms)."""
        request = _record_request(instance_id, build_record_id)
        return self._call("GetRepoBuildRecord", lambda: self.conn.get_repo_build_record(request).body)

    async def aget_build_record(self, instance_id: str, build_record_id: str) -> Any:
        request = _record_request(instance_id, build_record_id)
        return await self._acall(
            "GetRepoBuildRecord", lambda: abody(self.conn.get_repo_build_record_async(request))
        )

    def build_log(self, instance_id: str, repo_id: str, build_record_id: str, offset: int) -> list[Any]:
        """One page of ListRepoBuildRecordLog from ``offset``: LineNumber, Message, BuildStage entries."""
        request = _log_request(instance_id, repo_id, build_record_id, offset)
        body = self._call(
            "ListRepoBuildRecordLog", lambda: self.conn.list_repo_build_record_log(request).body
        )
        return list(body.build_record_logs or [])

    async def abuild_log(
        self, instance_id: str, repo_id: str, build_record_id: str, offset: int
    ) -> list[Any]:
        request = _log_request(instance_id, repo_id, build_record_id, offset)
        body = await self._acall(
            "ListRepoBuildRecordLog", lambda: abody(self.conn.list_repo_build_record_log_async(request))
        )
        return list(body.build_record_logs or [])

    def get_repo_tag(self, instance_id: str, repo_id: str, tag: str) -> Any | None:
        """GetRepoTag (Digest, Status), or None when the repository has no such tag."""
        from alibabacloud_cr20181201 import models

        request = models.GetRepoTagRequest(instance_id=instance_id, repo_id=repo_id, tag=tag)
        return self.call_or_none(
            "GetRepoTag", lambda: _checked("GetRepoTag", self.conn.get_repo_tag(request).body), not_found
        )

    def cancel_build_record(self, instance_id: str, repo_id: str, build_record_id: str) -> None:
        from alibabacloud_cr20181201 import models

        request = models.CancelRepoBuildRecordRequest(
            instance_id=instance_id, repo_id=repo_id, build_record_id=build_record_id
        )
        self._call("CancelRepoBuildRecord", lambda: self.conn.cancel_repo_build_record(request).body)

    def _call(self, action: str, fn: Any) -> Any:
        return self.call(action, lambda: _checked(action, fn()))

    async def _acall(self, action: str, fn: Any) -> Any:
        async def checked() -> Any:
            return _checked(action, await fn())

        return await self.acall(action, checked)


def _checked(action: str, body: Any) -> Any:
    """An ``IsSuccess: false`` answer is a refusal: raised, with its Code and RequestId."""
    if body is not None and body.is_success is False:
        raise AlibabaCloudApiError(
            action, body.code or "IsSuccessFalse", "IsSuccess is false", body.request_id, 1
        )
    return body


def _record_request(instance_id: str, build_record_id: str) -> Any:
    from alibabacloud_cr20181201 import models

    return models.GetRepoBuildRecordRequest(instance_id=instance_id, build_record_id=build_record_id)


def _log_request(instance_id: str, repo_id: str, build_record_id: str, offset: int) -> Any:
    from alibabacloud_cr20181201 import models

    return models.ListRepoBuildRecordLogRequest(
        instance_id=instance_id, repo_id=repo_id, build_record_id=build_record_id, offset=offset
    )
