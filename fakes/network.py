"""VPC 2016-04-28 and ECS 2014-05-26 emulator: the network a DLC job needs, in one server.

One server answers both products so that a security group and its VPC live in one state; the VPC
and ECS SDK clients both point at ``server.endpoint``. Each action is checked against the
``x-acs-version`` of its own product, so an ECS client calling a VPC action is refused.

Codes (HTTP status, Code) from the VPC and ECS API references:

- DescribeVSwitchAttributes, unknown vSwitch: 404 ``InvalidVSwitchId.NotFound``;
- DescribeSnatTableEntries, unknown SNAT table: 404 ``InvalidSnatTableId.NotFound``;
- DescribeSecurityGroupAttribute, unknown group: 404 ``InvalidSecurityGroupId.NotFound``;
- no RegionId: 400 ``MissingParameter``;
- a denied ECS action: 403 ``Forbidden.RAM``; a denied VPC action: 403 ``Forbidden`` (each
  product's documented answer to a caller RAM does not authorize).

Paging, from the request models' docstrings (alibabacloud_vpc20160428 7.2.2): DescribeVpcs,
DescribeNatGateways and DescribeSnatTableEntries take PageNumber ("Default value: 1") and PageSize
("Maximum value: 50. Default value: 10"); each answer carries PageNumber, PageSize and TotalCount
(the response models). The emulator answers 10 items when PageSize is not given, so a caller that
reads one answer misses the rest as it would on the service. DescribeSnatTableEntries filters on
SourceVSwitchId ("the vSwitch whose ECS instances can access the Internet by using the SNAT rule")
and SourceCIDR (exact match; the docstring does not say how it compares). DescribeSecurityGroupAttribute
pages only its rules (NextToken/MaxResults, default 500): the group's VpcId is on every page, and the
emulator answers every rule at once.

Decisions where the service's behaviour is not documented:

- A PageSize outside 1..50 or a PageNumber below 1 is refused with 400
  ``InvalidParameter.PageSize`` / ``InvalidParameter.PageNumber`` (the maximum is documented, the
  error code is not).
- DescribeVpcs and DescribeNatGateways are filters: an unknown VpcId gives an empty list, as their
  references list no not-found error. ``strict_vpc_lookup = True`` makes them answer 404
  ``InvalidVpcId.NotFound`` instead (the code VPC's other actions use), to test callers against it.
- Every resource lives in one region (the emulator's unless given); asked about another region,
  the resource does not exist there.
- A NAT gateway's IpLists are its EIPs; an EIP used by one of its SNAT entries is
  ``UsedBySnatTable``, otherwise ``Idle``.
- An SNAT entry made for a vSwitch reports that vSwitch's CIDR as its SourceCIDR; one made for a
  CIDR reports an empty SourceVSwitchId.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_vpc20160428 import models as vpc_models

from fakes.base import ApiError, ApiRequest, iso_utc
from fakes.ram import RamAuthorizedEmulator

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fakes.base import _Exchange

VPC_VERSION = "2016-04-28"
ECS_VERSION = "2014-05-26"
DEFAULT_REGION = "cn-wulanchabu"
DEFAULT_ZONE = "cn-wulanchabu-a"
DEFAULT_EIP = "47.1.2.3"
#: PageSize of VPC's Describe* lists: "Maximum value: 50. Default value: 10" (SDK request docstrings).
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 50
VPC_DENIAL = ("Forbidden", "User not authorized to operate on the specified resource.")
ECS_DENIAL = (
    "Forbidden.RAM",
    "User not authorized to operate on the specified resource, or this API doesn't support RAM.",
)


@dataclass
class Vpc:
    vpc_id: str
    cidr: str
    status: str
    region: str
    name: str
    created_at: float
    #: Secondary IPv4 blocks added to the VPC, and user CIDRs (DescribeVpcs' response model).
    secondary_cidrs: tuple[str, ...] = ()
    user_cidrs: tuple[str, ...] = ()


@dataclass
class VSwitch:
    vswitch_id: str
    vpc_id: str
    zone_id: str
    cidr: str
    free_ips: int
    status: str
    region: str
    created_at: float


@dataclass
class SecurityGroup:
    sg_id: str
    vpc_id: str
    name: str
    region: str
    permissions: list[dict[str, str]] = field(default_factory=list)


@dataclass
class NatGateway:
    nat_id: str
    vpc_id: str
    network_type: str
    status: str
    region: str
    snat_table_id: str
    eips: tuple[str, ...]
    created_at: float


@dataclass
class SnatEntry:
    entry_id: str
    snat_table_id: str
    source_vswitch_id: str
    source_cidr: str
    snat_ip: str
    status: str


@dataclass(frozen=True)
class StandardNetwork:
    """The ids of a complete, valid network made by :meth:`NetworkEmulator.standard`."""

    region: str
    zone_id: str
    vpc_id: str
    vswitch_id: str
    security_group_id: str
    nat_gateway_id: str
    snat_table_id: str
    snat_entry_id: str


class NetworkEmulator(RamAuthorizedEmulator):
    """VPC (DescribeVpcs, DescribeVSwitchAttributes, DescribeNatGateways, DescribeSnatTableEntries)
    and ECS (DescribeSecurityGroupAttribute), RPC style."""

    def __init__(
        self, access_keys: Mapping[str, str | None] | None = None, region: str = DEFAULT_REGION
    ) -> None:
        super().__init__(access_keys)
        self.region = region
        self.strict_vpc_lookup = False
        self.vpcs: dict[str, Vpc] = {}
        self.vswitches: dict[str, VSwitch] = {}
        self.security_groups: dict[str, SecurityGroup] = {}
        self.nat_gateways: dict[str, NatGateway] = {}
        self.snat_entries: dict[str, SnatEntry] = {}
        self._versions: dict[str, str] = {}
        self._entry_numbers = itertools.count(1)
        self._register_actions()

    def _register_actions(self) -> None:
        vpc_actions = {
            "DescribeVpcs": (self._describe_vpcs, vpc_models.DescribeVpcsResponseBody),
            "DescribeVSwitchAttributes": (
                self._describe_vswitch_attributes,
                vpc_models.DescribeVSwitchAttributesResponseBody,
            ),
            "DescribeNatGateways": (self._describe_nat_gateways, vpc_models.DescribeNatGatewaysResponseBody),
            "DescribeSnatTableEntries": (
                self._describe_snat_table_entries,
                vpc_models.DescribeSnatTableEntriesResponseBody,
            ),
        }
        ecs_actions = {
            "DescribeSecurityGroupAttribute": (
                self._describe_security_group_attribute,
                ecs_models.DescribeSecurityGroupAttributeResponseBody,
            ),
        }
        for version, actions in ((VPC_VERSION, vpc_actions), (ECS_VERSION, ecs_actions)):
            for action, (handler, model) in actions.items():
                self._versions[action] = version
                self.add_rpc_action(action, handler, model)

    def _check_version(self, exchange: _Exchange) -> None:
        """Like the base check, with the version of the action's own product (VPC or ECS)."""
        version = exchange.headers.get("x-acs-version") or exchange.query.get("Version", "")
        if version != self._versions.get(exchange.action):
            raise ApiError(400, "InvalidVersion", "Specified parameter Version is not valid.")

    def denial_for(self, action: str) -> tuple[str, str]:
        """VPC and ECS spell a RAM denial differently; answer as the action's product does."""
        return ECS_DENIAL if self._versions.get(action) == ECS_VERSION else VPC_DENIAL

    # ----------------------------------------------------------------------------- setup

    def add_vpc(
        self,
        vpc_id: str,
        cidr: str,
        status: str = "Available",
        region: str | None = None,
        secondary_cidrs: tuple[str, ...] = (),
        user_cidrs: tuple[str, ...] = (),
    ) -> None:
        """A VPC (Status: Pending or Available) with its primary and any secondary and user CIDRs."""
        with self._lock:
            self.vpcs[vpc_id] = Vpc(
                vpc_id, cidr, status, region or self.region, vpc_id, self.clock(), secondary_cidrs, user_cidrs
            )

    def add_vswitch(
        self,
        vswitch_id: str,
        vpc_id: str,
        zone_id: str,
        cidr: str,
        free_ips: int,
        status: str = "Available",
        region: str | None = None,
    ) -> None:
        """A vSwitch with ``free_ips`` unused addresses (AvailableIpAddressCount)."""
        with self._lock:
            self.vswitches[vswitch_id] = VSwitch(
                vswitch_id,
                vpc_id,
                zone_id,
                cidr,
                free_ips,
                status,
                self._region_of(vpc_id, region),
                self.clock(),
            )

    def add_security_group(
        self,
        sg_id: str,
        vpc_id: str,
        name: str | None = None,
        permissions: list[dict[str, str]] | None = None,
        region: str | None = None,
    ) -> None:
        """A security group in ``vpc_id``; ``permissions`` are Permission dicts in wire names."""
        with self._lock:
            self.security_groups[sg_id] = SecurityGroup(
                sg_id, vpc_id, name or sg_id, self._region_of(vpc_id, region), list(permissions or [])
            )

    def add_nat_gateway(
        self,
        nat_id: str,
        vpc_id: str,
        network_type: str = "internet",
        status: str = "Available",
        eips: tuple[str, ...] | None = None,
        region: str | None = None,
    ) -> str:
        """A NAT gateway with one SNAT table; return the table's id.

        ``eips`` default to one EIP for an internet gateway and none for an intranet one.
        """
        if eips is None:
            eips = (DEFAULT_EIP,) if network_type == "internet" else ()
        table_id = f"stb-{nat_id.removeprefix('ngw-')}"
        with self._lock:
            self.nat_gateways[nat_id] = NatGateway(
                nat_id,
                vpc_id,
                network_type,
                status,
                self._region_of(vpc_id, region),
                table_id,
                eips,
                self.clock(),
            )
        return table_id

    def add_snat_entry(
        self,
        snat_table_id: str,
        source_vswitch_id: str | None = None,
        source_cidr: str | None = None,
        snat_ip: str = DEFAULT_EIP,
        status: str = "Available",
    ) -> str:
        """An SNAT entry for a vSwitch or a CIDR block; return its id."""
        if not source_vswitch_id and not source_cidr:
            raise ValueError("an SNAT entry needs source_vswitch_id or source_cidr")
        with self._lock:
            self._gateway_of_table(snat_table_id)  # the table must exist
            if source_vswitch_id and source_cidr is None and source_vswitch_id in self.vswitches:
                source_cidr = self.vswitches[source_vswitch_id].cidr
            entry_id = f"snat-{next(self._entry_numbers):08d}"
            self.snat_entries[entry_id] = SnatEntry(
                entry_id, snat_table_id, source_vswitch_id or "", source_cidr or "", snat_ip, status
            )
            return entry_id

    def standard(
        self,
        vpc_id: str = "vpc-test",
        vswitch_id: str = "vsw-test",
        security_group_id: str = "sg-test",
        nat_gateway_id: str = "ngw-test",
        zone_id: str = DEFAULT_ZONE,
    ) -> StandardNetwork:
        """A network every prerequisite check passes: VPC 172.16.0.0/12, vSwitch 172.16.0.0/24 with
        250 free IPs, a security group in the VPC, an internet NAT with an SNAT entry for the vSwitch."""
        self.add_vpc(vpc_id, "172.16.0.0/12")
        self.add_vswitch(vswitch_id, vpc_id, zone_id, "172.16.0.0/24", free_ips=250)
        self.add_security_group(security_group_id, vpc_id)
        table_id = self.add_nat_gateway(nat_gateway_id, vpc_id)
        entry_id = self.add_snat_entry(table_id, source_vswitch_id=vswitch_id)
        return StandardNetwork(
            self.region, zone_id, vpc_id, vswitch_id, security_group_id, nat_gateway_id, table_id, entry_id
        )

    def _region_of(self, vpc_id: str, region: str | None) -> str:
        """A resource's region: given, else its VPC's, else the emulator's."""
        vpc = self.vpcs.get(vpc_id)
        return region or (vpc.region if vpc else self.region)

    def _gateway_of_table(self, snat_table_id: str) -> NatGateway:
        gateway = next((g for g in self.nat_gateways.values() if g.snat_table_id == snat_table_id), None)
        if gateway is None:
            raise KeyError(f"no NAT gateway has SNAT table {snat_table_id}")
        return gateway

    # ----------------------------------------------------------------------------- VPC handlers

    def _describe_vpcs(self, request: ApiRequest) -> dict[str, Any]:
        region = _region(request)
        wanted = request.query.get("VpcId")
        vpcs = [v for v in self.vpcs.values() if v.region == region and (not wanted or v.vpc_id == wanted)]
        if wanted and not vpcs and self.strict_vpc_lookup:
            raise _vpc_not_found(wanted)
        page, paging = _page(vpcs, request.query)
        return {"Vpcs": {"Vpc": [self._vpc_view(v) for v in page]}, **paging}

    def _vpc_view(self, vpc: Vpc) -> dict[str, Any]:
        return {
            "VpcId": vpc.vpc_id,
            "VpcName": vpc.name,
            "Status": vpc.status,
            "CidrBlock": vpc.cidr,
            "SecondaryCidrBlocks": {"SecondaryCidrBlock": list(vpc.secondary_cidrs)},
            "UserCidrs": {"UserCidr": list(vpc.user_cidrs)},
            "RegionId": vpc.region,
            "CreationTime": iso_utc(vpc.created_at),
            "IsDefault": False,
            "Description": "",
            "VSwitchIds": {
                "VSwitchId": [s.vswitch_id for s in self.vswitches.values() if s.vpc_id == vpc.vpc_id]
            },
            "NatGatewayIds": {
                "NatGatewayIds": [g.nat_id for g in self.nat_gateways.values() if g.vpc_id == vpc.vpc_id]
            },
        }

    def _describe_vswitch_attributes(self, request: ApiRequest) -> dict[str, Any]:
        region = _region(request)
        wanted = request.query.get("VSwitchId", "")
        switch = self.vswitches.get(wanted)
        if switch is None or switch.region != region:
            raise ApiError(404, "InvalidVSwitchId.NotFound", "The specified vSwitch does not exist.")
        return {
            "VSwitchId": switch.vswitch_id,
            "VSwitchName": switch.vswitch_id,
            "VpcId": switch.vpc_id,
            "ZoneId": switch.zone_id,
            "Status": switch.status,
            "CidrBlock": switch.cidr,
            "AvailableIpAddressCount": switch.free_ips,
            "CreationTime": iso_utc(switch.created_at),
            "IsDefault": False,
            "Description": "",
        }

    def _describe_nat_gateways(self, request: ApiRequest) -> dict[str, Any]:
        region, query = _region(request), request.query
        vpc_id = query.get("VpcId")
        if vpc_id and self.strict_vpc_lookup and not self._vpc_in(vpc_id, region):
            raise _vpc_not_found(vpc_id)
        filters = {
            "vpc_id": vpc_id,
            "network_type": query.get("NetworkType"),
            "nat_id": query.get("NatGatewayId"),
        }
        gateways = [
            g
            for g in self.nat_gateways.values()
            if g.region == region
            and all(not want or getattr(g, name) == want for name, want in filters.items())
        ]
        page, paging = _page(gateways, query)
        return {"NatGateways": {"NatGateway": [self._nat_view(g) for g in page]}, **paging}

    def _vpc_in(self, vpc_id: str, region: str) -> bool:
        vpc = self.vpcs.get(vpc_id)
        return vpc is not None and vpc.region == region

    def _nat_view(self, gateway: NatGateway) -> dict[str, Any]:
        used = {e.snat_ip for e in self.snat_entries.values() if e.snat_table_id == gateway.snat_table_id}
        ip_list = [
            {
                "IpAddress": ip,
                "AllocationId": f"eip-{index:08d}",
                "UsingStatus": "UsedBySnatTable" if ip in used else "Idle",
                "SnatEntryEnabled": ip in used,
            }
            for index, ip in enumerate(gateway.eips, start=1)
        ]
        return {
            "NatGatewayId": gateway.nat_id,
            "Name": gateway.nat_id,
            "VpcId": gateway.vpc_id,
            "RegionId": gateway.region,
            "Status": gateway.status,
            "BusinessStatus": "Normal",
            "NetworkType": gateway.network_type,
            "NatType": "Enhanced",
            "InstanceChargeType": "PostPaid",
            "InternetChargeType": "PayByLcu",
            "CreationTime": iso_utc(gateway.created_at),
            "SnatTableIds": {"SnatTableId": [gateway.snat_table_id]},
            "ForwardTableIds": {"ForwardTableId": []},
            "IpLists": {"IpList": ip_list},
        }

    def _describe_snat_table_entries(self, request: ApiRequest) -> dict[str, Any]:
        region, query = _region(request), request.query
        table_id = query.get("SnatTableId", "")
        gateway = next((g for g in self.nat_gateways.values() if g.snat_table_id == table_id), None)
        if gateway is None or gateway.region != region:
            raise ApiError(404, "InvalidSnatTableId.NotFound", "Specified SNAT table does not exist.")
        filters = {
            "source_vswitch_id": query.get("SourceVSwitchId"),
            "source_cidr": query.get("SourceCIDR"),
            "entry_id": query.get("SnatEntryId"),
            "snat_ip": query.get("SnatIp"),
        }
        entries = [
            e
            for e in self.snat_entries.values()
            if e.snat_table_id == table_id
            and all(not want or getattr(e, name) == want for name, want in filters.items())
        ]
        page, paging = _page(entries, query)
        return {"SnatTableEntries": {"SnatTableEntry": [_snat_view(e, gateway) for e in page]}, **paging}

    # ----------------------------------------------------------------------------- ECS handlers

    def _describe_security_group_attribute(self, request: ApiRequest) -> dict[str, Any]:
        region = _region(request)
        group = self.security_groups.get(request.query.get("SecurityGroupId", ""))
        if group is None or group.region != region:
            raise ApiError(
                404, "InvalidSecurityGroupId.NotFound", "The specified SecurityGroupId does not exist."
            )
        return {
            "SecurityGroupId": group.sg_id,
            "SecurityGroupName": group.name,
            "VpcId": group.vpc_id,
            "RegionId": group.region,
            "Description": "",
            "InnerAccessPolicy": "Accept",
            "Permissions": {"Permission": [dict(p) for p in group.permissions]},
        }


def _snat_view(entry: SnatEntry, gateway: NatGateway) -> dict[str, Any]:
    return {
        "SnatEntryId": entry.entry_id,
        "SnatEntryName": "",
        "SnatTableId": entry.snat_table_id,
        "NatGatewayId": gateway.nat_id,
        "SourceVSwitchId": entry.source_vswitch_id,
        "SourceCIDR": entry.source_cidr,
        "SnatIp": entry.snat_ip,
        "Status": entry.status,
    }


def _region(request: ApiRequest) -> str:
    """The request's RegionId, which every action here requires."""
    region = request.query.get("RegionId")
    if not region:
        raise ApiError(
            400,
            "MissingParameter",
            'The input parameter "RegionId" that is mandatory for processing this request is not supplied.',
        )
    return region


def _vpc_not_found(vpc_id: str) -> ApiError:
    return ApiError(404, "InvalidVpcId.NotFound", f"Specified VPC does not exist: {vpc_id}.")


def _page(items: list[Any], query: dict[str, str]) -> tuple[list[Any], dict[str, int]]:
    """One page of ``items`` and the PageNumber/PageSize/TotalCount fields VPC answers with."""
    number = _int_param(query, "PageNumber", 1, 1, 10**6)
    size = _int_param(query, "PageSize", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
    paging = {"PageNumber": number, "PageSize": size, "TotalCount": len(items)}
    return items[(number - 1) * size : number * size], paging


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(query.get(name, default))
    except ValueError as exc:
        raise ApiError(400, f"InvalidParameter.{name}", f"The parameter {name} must be an integer.") from exc
    if not low <= value <= high:
        raise ApiError(400, f"InvalidParameter.{name}", f"The parameter {name} must be in [{low}, {high}].")
    return value
