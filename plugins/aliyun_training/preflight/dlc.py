"""Checks for the PAI-DLC backend that need only the connection: can we reach DLC and list jobs?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.findings import Finding, Verdict
from aliyun_training.hooks.alibaba_cloud import AlibabaCloudConnectionError
from aliyun_training.hooks.retry import AlibabaCloudApiError

if TYPE_CHECKING:
    from aliyun_training.backends.dlc.backend import DlcBackend

_FIXES = {
    "Forbidden": "grant the RAM identity the PAI-DLC actions (AliyunPAIDLCFullAccess, or the "
    "policy in the Lingjun guide)",
    "Forbidden.RAM": "grant the RAM identity the PAI-DLC actions (AliyunPAIDLCFullAccess, or the "
    "policy in the Lingjun guide)",
    "InvalidAccessKeyId.NotFound": "fix access_key_id in the alibaba_cloud connection",
    "SignatureDoesNotMatch": "fix access_key_secret in the alibaba_cloud connection",
}


def check_dlc_access(backend: DlcBackend) -> Finding:
    """ListJobs in the workspace with the run's credentials: proves endpoint, keys and permission."""
    where = f"workspace {backend.workspace_id or '(default)'} via connection {backend.alibaba_cloud_conn_id}"
    try:
        backend.find("preflight-access-check")
    except AlibabaCloudConnectionError as exc:
        return Finding.failed_with("dlc_access", exc, "fix the connection extras")
    except AlibabaCloudApiError as exc:
        fix = _FIXES.get(exc.code, "check the connection's region, endpoints and the workspace id")
        return Finding(check="dlc_access", verdict=Verdict.FAIL, found=f"{where}: {exc}", fix=fix)
    return Finding(check="dlc_access", verdict=Verdict.PASS, found=f"ListJobs allowed in {where}")
