"""RAM 2015-05-01 through the ``alibaba_cloud`` connection: a role and the policies attached to it."""

from __future__ import annotations

import json
from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook


def entity_missing(code: str) -> bool:
    """RAM answers ``EntityNotExist.Role`` / ``EntityNotExist.Policy`` for an unknown name."""
    return "NotExist" in code or "NotFound" in code


class RamHook(AlibabaCloudHook):
    """The RAM reads of the permissions check, each under the retry policy."""

    hook_name = "Alibaba Cloud RAM"
    service = "ram"

    def get_role(self, role_name: str) -> Any | None:
        """GetRole's role, or None when there is no role of that name."""
        from alibabacloud_ram20150501 import models

        request = models.GetRoleRequest(role_name=role_name)
        body = self.call_or_none("GetRole", lambda: self.conn.get_role(request).body, entity_missing)
        return body.role if body is not None else None

    def role_policies(self, role_name: str) -> list[Any]:
        """Every policy attached to the role (PolicyName, PolicyType, ...).

        One answer lists them all: neither the request nor the answer has RAM's
        Marker/MaxItems/IsTruncated paging (ListRoles and ListPolicies do), so there is no second page.
        """
        from alibabacloud_ram20150501 import models

        request = models.ListPoliciesForRoleRequest(role_name=role_name)
        body = self.call("ListPoliciesForRole", lambda: self.conn.list_policies_for_role(request).body)
        return list((body.policies.policy if body.policies else None) or [])

    def policy_document(self, policy_name: str, policy_type: str) -> dict[str, Any]:
        """The JSON document of the policy's default version."""
        from alibabacloud_ram20150501 import models

        request = models.GetPolicyRequest(policy_name=policy_name, policy_type=policy_type)
        body = self.call("GetPolicy", lambda: self.conn.get_policy(request).body)
        return json.loads(body.default_policy_version.policy_document)
