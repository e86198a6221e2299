"""ECS 2014-05-26 through the ``alibaba_cloud`` connection: the security group a DLC job's pods join."""

from __future__ import annotations

from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook


def security_group_missing(code: str) -> bool:
    return "NotFound" in code


class EcsHook(AlibabaCloudHook):
    """The ECS reads of the network checks, under the retry policy."""

    hook_name = "Alibaba Cloud ECS"
    service = "ecs"

    def describe_security_group(self, security_group_id: str) -> Any | None:
        """DescribeSecurityGroupAttribute's body (its VpcId is on every page of rules), or None when
        the group does not exist."""
        from alibabacloud_ecs20140526 import models

        request = models.DescribeSecurityGroupAttributeRequest(
            region_id=self.region, security_group_id=security_group_id
        )
        return self.call_or_none(
            "DescribeSecurityGroupAttribute",
            lambda: self.conn.describe_security_group_attribute(request).body,
            security_group_missing,
        )
