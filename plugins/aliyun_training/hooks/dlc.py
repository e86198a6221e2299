"""PAI-DLC through the ``alibaba_cloud`` connection."""

from __future__ import annotations

from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook


class DlcHook(AlibabaCloudHook):
    """The PAI-DLC 2020-12-03 client of an ``alibaba_cloud`` connection, with the retry policy."""

    hook_name = "Alibaba Cloud PAI-DLC"

    @property
    def dlc(self) -> Any:
        return self.client("dlc")

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
