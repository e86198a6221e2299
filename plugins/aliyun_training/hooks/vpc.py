"""VPC 2016-04-28 through the ``alibaba_cloud`` connection: VPCs, vSwitches, NAT gateways, SNAT entries.

NAT gateways and SNAT entries are read over every page (VPC answers 10 per page unless asked for
more): a VPC with many gateways or a long SNAT table must not look like one without the entry.
"""

from __future__ import annotations

from typing import Any

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from aliyun_training.hooks.paging import numbered_pages

#: Items per page of DescribeNatGateways and DescribeSnatTableEntries: the most they answer (their
#: SDK docstrings: default 10, maximum 50), so a long listing costs the fewest calls.
PAGE_SIZE = 50


def vpc_missing(code: str) -> bool:
    """DescribeVpcs documents no not-found error (an unknown VpcId lists nothing); VPC's other
    actions answer ``InvalidVpcId.NotFound``, which means the same here."""
    return code.startswith("InvalidVpcId")


def vswitch_missing(code: str) -> bool:
    return code.startswith("InvalidVSwitchId") or code.endswith("NotFound")


class VpcHook(AlibabaCloudHook):
    """The VPC reads of the network checks and of DLC's UserVpc, each under the retry policy."""

    hook_name = "Alibaba Cloud VPC"
    service = "vpc"

    def describe_vpc(self, vpc_id: str) -> Any | None:
        """The VPC with this id in the hook's region, or None.

        Filtered by the one VpcId, so the answer is at most one VPC: the first page holds it.
        """
        from alibabacloud_vpc20160428 import models

        request = models.DescribeVpcsRequest(region_id=self.region, vpc_id=vpc_id)
        body = self.call_or_none("DescribeVpcs", lambda: self.conn.describe_vpcs(request).body, vpc_missing)
        listed = body.vpcs.vpc if body is not None and body.vpcs else None
        return next((vpc for vpc in listed or [] if vpc.vpc_id == vpc_id), None)

    def cidr_blocks(self, vpc_id: str) -> list[str]:
        """Every IPv4 CIDR block of the VPC, as DescribeVpcs' response model names them: CidrBlock,
        SecondaryCidrBlocks.SecondaryCidrBlock and UserCidrs.UserCidr. Empty when the VPC is not found."""
        found = self.describe_vpc(vpc_id)
        if found is None:
            return []
        secondary = found.secondary_cidr_blocks.secondary_cidr_block if found.secondary_cidr_blocks else None
        user = found.user_cidrs.user_cidr if found.user_cidrs else None
        blocks = [found.cidr_block, *(secondary or []), *(user or [])]
        return list(dict.fromkeys(block for block in blocks if block))

    def describe_vswitch(self, switch_id: str) -> Any | None:
        """DescribeVSwitchAttributes' body, or None when the vSwitch does not exist."""
        from alibabacloud_vpc20160428 import models

        request = models.DescribeVSwitchAttributesRequest(region_id=self.region, v_switch_id=switch_id)
        return self.call_or_none(
            "DescribeVSwitchAttributes",
            lambda: self.conn.describe_vswitch_attributes(request).body,
            vswitch_missing,
        )

    def nat_gateways(self, vpc_id: str, network_type: str = "internet") -> list[Any]:
        """Every NAT gateway of the VPC of ``network_type`` (internet: public), over every page;
        none for a VPC that does not exist."""
        from alibabacloud_vpc20160428 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.DescribeNatGatewaysRequest(
                region_id=self.region,
                vpc_id=vpc_id,
                network_type=network_type,
                page_number=number,
                page_size=PAGE_SIZE,
            )
            body = self.conn.describe_nat_gateways(request).body
            return (body.nat_gateways.nat_gateway if body.nat_gateways else None) or [], body.total_count

        listing = self.call_or_none("DescribeNatGateways", lambda: list(numbered_pages(page)), vpc_missing)
        return listing or []

    def snat_entries(self, table_id: str, source_vswitch_id: str | None = None) -> list[Any]:
        """The entries of one SNAT table (those of one vSwitch when it is given), over every page."""
        from alibabacloud_vpc20160428 import models

        def page(number: int) -> tuple[list[Any], int | None]:
            request = models.DescribeSnatTableEntriesRequest(
                region_id=self.region,
                snat_table_id=table_id,
                source_vswitch_id=source_vswitch_id,
                page_number=number,
                page_size=PAGE_SIZE,
            )
            body = self.conn.describe_snat_table_entries(request).body
            listed = body.snat_table_entries.snat_table_entry if body.snat_table_entries else None
            return listed or [], body.total_count

        return list(self.call_pages("DescribeSnatTableEntries", page))
