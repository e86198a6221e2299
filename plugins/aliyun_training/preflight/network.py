"""Network prerequisites of a DLC job, checked through the VPC and ECS hooks.

The Lingjun guide asks for a VPC with a vSwitch and a security group, and a public NAT gateway
whose SNAT table covers that vSwitch (otherwise pods cannot pull images or reach the internet);
Lingjun itself is offered only in some regions. A mistake here shows up as a job stuck in Queuing
or failing after minutes, so every part is checked before anything is submitted.

NAT gateways and SNAT entries are read over every page (``VpcHook``), so a VPC with many gateways
or a long SNAT table never looks like one without the entry.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aliyun_training.findings import Finding, Verdict

if TYPE_CHECKING:
    from aliyun_training.hooks.ecs import EcsHook
    from aliyun_training.hooks.vpc import VpcHook

VPC_CONSOLE = "the VPC console (https://vpc.console.aliyun.com)"


@dataclass(frozen=True)
class NetworkSettings:
    vpc_id: str
    switch_id: str
    security_group_id: str
    #: The zone the vSwitch must be in (the zone of the Lingjun resources), if known.
    zone_id: str | None = None


def _pass(check: str, found: str) -> Finding:
    return Finding(check=check, verdict=Verdict.PASS, found=found)


def _fail(check: str, found: str, fix: str) -> Finding:
    return Finding(check=check, verdict=Verdict.FAIL, found=found, fix=fix)


def check_region(region: str, lingjun: bool, lingjun_regions: list[str]) -> Finding:
    """Lingjun resources exist only in some regions (the guide: cn-wulanchabu)."""
    if not lingjun:
        return _pass("region", f"{region}: ECS resources, no Lingjun region restriction")
    if region in lingjun_regions:
        return _pass("region", f"{region} offers Lingjun resources")
    return _fail(
        "region",
        f"{region} does not offer Lingjun resources (offered in: {', '.join(lingjun_regions)})",
        f"set the connection's region to one of {', '.join(lingjun_regions)} and use a VPC there",
    )


def check_network(vpc: VpcHook, ecs: EcsHook, network: NetworkSettings, pods: int) -> list[Finding]:
    """VPC, vSwitch (VPC, zone, free IPs), security group, public NAT and its SNAT entry."""
    region = vpc.region
    findings: list[Finding] = []
    found_vpc = vpc.describe_vpc(network.vpc_id)
    if found_vpc is None:
        findings.append(
            _fail("vpc", f"VPC {network.vpc_id} does not exist in {region}", f"create it in {VPC_CONSOLE}")
        )
    elif found_vpc.status != "Available":
        findings.append(
            _fail(
                "vpc",
                f"VPC {network.vpc_id} is {found_vpc.status}",
                "wait until it is Available, or use another",
            )
        )
    else:
        findings.append(_pass("vpc", f"VPC {network.vpc_id} ({found_vpc.cidr_block}) is Available"))

    switch = vpc.describe_vswitch(network.switch_id)
    findings.append(_check_vswitch(switch, network, pods))
    findings.append(_check_security_group(ecs, network))
    findings.extend(_check_nat(vpc, network, switch))
    return findings


def _check_vswitch(switch: Any, network: NetworkSettings, pods: int) -> Finding:
    if switch is None:
        return _fail("vswitch", f"vSwitch {network.switch_id} does not exist", f"create it in {VPC_CONSOLE}")
    problems, fixes = [], []
    if switch.vpc_id != network.vpc_id:
        problems.append(f"belongs to VPC {switch.vpc_id}, not {network.vpc_id}")
        fixes.append(f"use a vSwitch of VPC {network.vpc_id}")
    if network.zone_id and switch.zone_id != network.zone_id:
        problems.append(f"is in zone {switch.zone_id}, not {network.zone_id}")
        fixes.append(f"use a vSwitch in {network.zone_id}, where the resources are")
    free = int(switch.available_ip_address_count or 0)
    if free < pods:
        problems.append(f"has {free} free IPs for {pods} pods")
        fixes.append("free IPs in the vSwitch or use a larger one (each pod takes one IP)")
    if problems:
        return _fail("vswitch", f"vSwitch {network.switch_id} " + "; ".join(problems), "; ".join(fixes))
    return _pass(
        "vswitch",
        f"vSwitch {network.switch_id} in {switch.zone_id}, {switch.cidr_block}, "
        f"{free} free IPs for {pods} pods",
    )


def _check_security_group(ecs: EcsHook, network: NetworkSettings) -> Finding:
    group = ecs.describe_security_group(network.security_group_id)
    if group is None:
        return _fail(
            "security_group",
            f"security group {network.security_group_id} does not exist",
            f"create one in VPC {network.vpc_id} (ECS console, Security Groups)",
        )
    if group.vpc_id != network.vpc_id:
        return _fail(
            "security_group",
            f"security group {network.security_group_id} belongs to VPC {group.vpc_id}, not {network.vpc_id}",
            f"use a security group of VPC {network.vpc_id}",
        )
    return _pass("security_group", f"security group {network.security_group_id} is in VPC {network.vpc_id}")


def _check_nat(vpc: VpcHook, network: NetworkSettings, switch: Any) -> list[Finding]:
    """A public (internet) NAT gateway in the VPC, Available, with an SNAT entry for the vSwitch."""
    gateways = vpc.nat_gateways(network.vpc_id)
    available = [g for g in gateways if g.status == "Available"]
    if not available:
        found = "no public NAT gateway" if not gateways else "no Available public NAT gateway"
        return [
            _fail(
                "nat_gateway",
                f"{found} in VPC {network.vpc_id}",
                f"create an internet NAT gateway in VPC {network.vpc_id} ({VPC_CONSOLE}, NAT Gateway) "
                "and bind an EIP",
            )
        ]
    findings = [_pass("nat_gateway", f"public NAT gateway {available[0].nat_gateway_id} is Available")]
    tables = [table for g in available for table in (g.snat_table_ids.snat_table_id or [])]
    covering = _covering_entry(vpc, tables, network.switch_id, switch)
    if covering is None:
        findings.append(
            _fail(
                "snat_entry",
                f"no SNAT entry covers vSwitch {network.switch_id}",
                f"add an SNAT entry for vSwitch {network.switch_id} "
                f"on NAT gateway {available[0].nat_gateway_id} "
                "(NAT Gateway > SNAT Management, vSwitch granularity)",
            )
        )
    else:
        how = f"vSwitch {covering.source_vswitch_id}" if covering.source_vswitch_id else covering.source_cidr
        findings.append(
            _pass("snat_entry", f"SNAT entry {covering.snat_entry_id} ({how}) via {covering.snat_ip}")
        )
    return findings


def _covering_entry(vpc: VpcHook, tables: list[str], switch_id: str, switch: Any) -> Any | None:
    """The SNAT entry that gives the vSwitch internet access, or None.

    Asked first with the SourceVSwitchId filter, so the usual entry (made for the vSwitch) costs one
    call per table however long the tables are. Only when no table has one is every entry read,
    for an entry whose SourceCIDR contains the vSwitch's CIDR.
    """
    for source_vswitch_id in (switch_id, None):
        if source_vswitch_id is None and (switch is None or not switch.cidr_block):
            return None  # without the vSwitch's CIDR no other entry can be shown to cover it
        for table_id in tables:
            entries = vpc.snat_entries(table_id, source_vswitch_id)
            found = next((e for e in entries if _covers(e, switch_id, switch)), None)
            if found is not None:
                return found
    return None


def _covers(entry: Any, switch_id: str, switch: Any) -> bool:
    """An SNAT entry covers the vSwitch by id, or by a source CIDR that contains the vSwitch's CIDR."""
    if entry.source_vswitch_id == switch_id:
        return True
    if not (entry.source_cidr and switch is not None and switch.cidr_block):
        return False
    inner = ipaddress.ip_network(switch.cidr_block, strict=False)
    outer = ipaddress.ip_network(entry.source_cidr, strict=False)
    # typeshed types subnet_of per address family; the version check above is what makes them one.
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]
