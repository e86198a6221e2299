"""The VPC/ECS, PAI Studio and RAM emulators, driven through the real SDK clients.

Preflight checks are tested against these emulators; these tests make sure what the emulators
answer is what the SDKs parse (every answer also passes the SDK response model's round trip, or
the emulator records an internal error), that test setup shows up in the answers, and that
missing resources, RAM denials and slow answers look as they do from the cloud.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from alibabacloud_cr20181201 import models as cr_models
from alibabacloud_cr20181201.client import Client as CrClient
from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_nas20170626 import models as nas_models
from alibabacloud_nas20170626.client import Client as NasClient
from alibabacloud_paistudio20220112 import models as studio_models
from alibabacloud_paistudio20220112.client import Client as StudioClient
from alibabacloud_ram20150501 import models as ram_models
from alibabacloud_ram20150501.client import Client as RamClient
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_openapi.utils_models import Config
from alibabacloud_vpc20160428 import models as vpc_models
from alibabacloud_vpc20160428.client import Client as VpcClient

from fakes.acr import AcrEmulator
from fakes.base import EmulatorServer, FaultPlan
from fakes.nas import NasDataFlowEmulator
from fakes.network import NetworkEmulator, StandardNetwork
from fakes.paistudio import PaiStudioEmulator
from fakes.ram import RamEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

Emulator = TypeVar("Emulator", bound=EmulatorServer)

AK, SK = "test-ak", "test-sk"
OTHER_AK, OTHER_SK = "other-ak", "other-sk"
REGION = "cn-wulanchabu"
DLC_POLICY = {
    "Version": "1",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["vpc:DescribeVSwitchAttributes", "ecs:CreateNetworkInterface"],
            "Resource": "*",
        }
    ],
}


def _config(endpoint: str, access_key: tuple[str, str] = (AK, SK)) -> Config:
    return Config(
        access_key_id=access_key[0],
        access_key_secret=access_key[1],
        endpoint=endpoint,
        protocol="http",
        region_id=REGION,
    )


def _serve(emulator: Emulator) -> Iterator[Emulator]:
    """Run an emulator for one test and fail the test if it answered anything off-model."""
    with emulator:
        yield emulator
        assert emulator.internal_errors == []


def _client_error(call: Callable[[], Any]) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


@pytest.fixture
def network() -> Iterator[NetworkEmulator]:
    yield from _serve(NetworkEmulator({AK: SK, OTHER_AK: OTHER_SK}))


@pytest.fixture
def standard(network: NetworkEmulator) -> StandardNetwork:
    return network.standard()


@pytest.fixture
def vpc(network: NetworkEmulator) -> VpcClient:
    return VpcClient(_config(network.endpoint))


@pytest.fixture
def ecs(network: NetworkEmulator) -> EcsClient:
    return EcsClient(_config(network.endpoint))


@pytest.fixture
def studio_emulator() -> Iterator[PaiStudioEmulator]:
    yield from _serve(PaiStudioEmulator({AK: SK}))


@pytest.fixture
def studio(studio_emulator: PaiStudioEmulator) -> StudioClient:
    return StudioClient(_config(studio_emulator.endpoint))


@pytest.fixture
def ram_emulator() -> Iterator[RamEmulator]:
    yield from _serve(RamEmulator({AK: SK}))


@pytest.fixture
def ram(ram_emulator: RamEmulator) -> RamClient:
    return RamClient(_config(ram_emulator.endpoint))


def _vpcs(vpc: VpcClient, vpc_id: str | None = None, region: str = REGION) -> list[Any]:
    request = vpc_models.DescribeVpcsRequest(region_id=region, vpc_id=vpc_id)
    return vpc.describe_vpcs(request).body.vpcs.vpc


def _vswitch(vpc: VpcClient, vswitch_id: str) -> Any:
    request = vpc_models.DescribeVSwitchAttributesRequest(region_id=REGION, v_switch_id=vswitch_id)
    return vpc.describe_vswitch_attributes(request).body


def _nat_gateways(vpc: VpcClient, vpc_id: str, network_type: str | None = "internet") -> list[Any]:
    request = vpc_models.DescribeNatGatewaysRequest(
        region_id=REGION, vpc_id=vpc_id, network_type=network_type
    )
    return vpc.describe_nat_gateways(request).body.nat_gateways.nat_gateway


def _snat_entries(vpc: VpcClient, table_id: str, **filters: Any) -> Any:
    request = vpc_models.DescribeSnatTableEntriesRequest(region_id=REGION, snat_table_id=table_id, **filters)
    return vpc.describe_snat_table_entries(request).body


def _security_group(ecs: EcsClient, sg_id: str) -> Any:
    request = ecs_models.DescribeSecurityGroupAttributeRequest(region_id=REGION, security_group_id=sg_id)
    return ecs.describe_security_group_attribute(request).body


def _workloads(studio: StudioClient, quota_id: str, **filters: Any) -> Any:
    return studio.list_quota_workloads(quota_id, studio_models.ListQuotaWorkloadsRequest(**filters)).body


# --------------------------------------------------------------------------------- VPC and ECS


def test_standard_network_answers_every_action(
    vpc: VpcClient, ecs: EcsClient, standard: StandardNetwork
) -> None:
    (found,) = _vpcs(vpc, standard.vpc_id)
    assert (found.vpc_id, found.status, found.cidr_block, found.region_id) == (
        standard.vpc_id,
        "Available",
        "172.16.0.0/12",
        REGION,
    )
    assert found.v_switch_ids.v_switch_id == [standard.vswitch_id]
    assert found.nat_gateway_ids.nat_gateway_ids == [standard.nat_gateway_id]

    switch = _vswitch(vpc, standard.vswitch_id)
    assert (switch.vpc_id, switch.zone_id, switch.status, switch.cidr_block) == (
        standard.vpc_id,
        "cn-wulanchabu-a",
        "Available",
        "172.16.0.0/24",
    )
    assert switch.available_ip_address_count == 250  # an int on the wire, unlike PAI's amounts

    assert _security_group(ecs, standard.security_group_id).vpc_id == standard.vpc_id

    (gateway,) = _nat_gateways(vpc, standard.vpc_id)
    assert (gateway.nat_gateway_id, gateway.status, gateway.network_type) == (
        standard.nat_gateway_id,
        "Available",
        "internet",
    )
    assert gateway.snat_table_ids.snat_table_id == [standard.snat_table_id]
    assert [(ip.ip_address, ip.using_status) for ip in gateway.ip_lists.ip_list] == [
        ("47.1.2.3", "UsedBySnatTable")
    ]

    entries = _snat_entries(vpc, standard.snat_table_id, source_vswitch_id=standard.vswitch_id)
    (entry,) = entries.snat_table_entries.snat_table_entry
    assert (entry.snat_entry_id, entry.source_vswitch_id, entry.source_cidr, entry.snat_ip, entry.status) == (
        standard.snat_entry_id,
        standard.vswitch_id,
        "172.16.0.0/24",
        "47.1.2.3",
        "Available",
    )


def test_setup_methods_are_reflected(network: NetworkEmulator, vpc: VpcClient, ecs: EcsClient) -> None:
    network.add_vpc("vpc-new", "10.0.0.0/8", status="Pending")
    network.add_vswitch("vsw-full", "vpc-new", "cn-wulanchabu-b", "10.0.1.0/24", free_ips=0)
    network.add_security_group("sg-elsewhere", "vpc-other")
    intranet_table = network.add_nat_gateway("ngw-private", "vpc-new", network_type="intranet")
    table = network.add_nat_gateway("ngw-public", "vpc-new", eips=("47.9.9.9", "47.9.9.10"))
    network.add_snat_entry(table, source_cidr="10.0.0.0/16", snat_ip="47.9.9.9")
    network.add_snat_entry(intranet_table, source_vswitch_id="vsw-full", snat_ip="10.0.9.9")

    assert [(v.vpc_id, v.status) for v in _vpcs(vpc)] == [("vpc-new", "Pending")]
    switch = _vswitch(vpc, "vsw-full")
    assert (switch.zone_id, switch.available_ip_address_count) == ("cn-wulanchabu-b", 0)
    assert _security_group(ecs, "sg-elsewhere").vpc_id == "vpc-other"

    assert [g.nat_gateway_id for g in _nat_gateways(vpc, "vpc-new")] == ["ngw-public"]
    assert {g.nat_gateway_id for g in _nat_gateways(vpc, "vpc-new", network_type=None)} == {
        "ngw-private",
        "ngw-public",
    }
    (public,) = _nat_gateways(vpc, "vpc-new")
    assert [(ip.ip_address, ip.using_status) for ip in public.ip_lists.ip_list] == [
        ("47.9.9.9", "UsedBySnatTable"),
        ("47.9.9.10", "Idle"),
    ]
    (cidr_entry,) = _snat_entries(vpc, table).snat_table_entries.snat_table_entry
    assert (cidr_entry.source_vswitch_id, cidr_entry.source_cidr) == ("", "10.0.0.0/16")
    assert _snat_entries(vpc, table, source_vswitch_id="vsw-full").snat_table_entries.snat_table_entry == []
    (switch_entry,) = _snat_entries(vpc, intranet_table).snat_table_entries.snat_table_entry
    assert (switch_entry.source_vswitch_id, switch_entry.source_cidr) == ("vsw-full", "10.0.1.0/24")


def test_snat_entries_are_paged(network: NetworkEmulator, vpc: VpcClient, standard: StandardNetwork) -> None:
    network.add_snat_entry(standard.snat_table_id, source_cidr="172.16.1.0/24")
    first = _snat_entries(vpc, standard.snat_table_id, page_size=1)
    second = _snat_entries(vpc, standard.snat_table_id, page_size=1, page_number=2)
    assert (first.total_count, first.page_size, second.page_number) == (2, 1, 2)
    entries = first.snat_table_entries.snat_table_entry + second.snat_table_entries.snat_table_entry
    assert [e.source_cidr for e in entries] == ["172.16.0.0/24", "172.16.1.0/24"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda vpc, ecs: _vswitch(vpc, "vsw-missing"), "InvalidVSwitchId.NotFound"),
        (lambda vpc, ecs: _snat_entries(vpc, "stb-missing"), "InvalidSnatTableId.NotFound"),
        (lambda vpc, ecs: _security_group(ecs, "sg-missing"), "InvalidSecurityGroupId.NotFound"),
    ],
    ids=["vswitch", "snat-table", "security-group"],
)
def test_unknown_network_ids_answer_not_found(
    network: NetworkEmulator,
    vpc: VpcClient,
    ecs: EcsClient,
    standard: StandardNetwork,
    call: Callable[[VpcClient, EcsClient], Any],
    code: str,
) -> None:
    error = _client_error(lambda: call(vpc, ecs))
    assert (error.status_code, error.code) == (404, code)
    assert error.request_id == network.requests[-1].request_id


def test_unknown_vpc_is_an_empty_list_unless_lookups_are_strict(
    network: NetworkEmulator, vpc: VpcClient, standard: StandardNetwork
) -> None:
    assert _vpcs(vpc, "vpc-missing") == []
    assert _nat_gateways(vpc, "vpc-missing") == []
    network.strict_vpc_lookup = True
    for call in (lambda: _vpcs(vpc, "vpc-missing"), lambda: _nat_gateways(vpc, "vpc-missing")):
        error = _client_error(call)
        assert (error.status_code, error.code) == (404, "InvalidVpcId.NotFound")
    assert len(_vpcs(vpc, standard.vpc_id)) == 1


def test_resources_exist_only_in_their_region(
    network: NetworkEmulator, vpc: VpcClient, ecs: EcsClient, standard: StandardNetwork
) -> None:
    assert _vpcs(vpc, standard.vpc_id, region="cn-hangzhou") == []
    request = vpc_models.DescribeVSwitchAttributesRequest(
        region_id="cn-hangzhou", v_switch_id=standard.vswitch_id
    )
    assert _client_error(lambda: vpc.describe_vswitch_attributes(request)).code == "InvalidVSwitchId.NotFound"
    missing_region = vpc_models.DescribeVpcsRequest(vpc_id=standard.vpc_id)
    assert _client_error(lambda: vpc.describe_vpcs(missing_region)).code == "MissingParameter"


def test_each_product_checks_its_own_version(ecs: EcsClient, standard: StandardNetwork) -> None:
    """The ECS SDK also has a (deprecated) DescribeVpcs; sent with ECS's version, it is refused."""
    request = ecs_models.DescribeVpcsRequest(region_id=REGION, vpc_id=standard.vpc_id)
    error = _client_error(lambda: ecs.describe_vpcs(request))
    assert (error.status_code, error.code) == (400, "InvalidVersion")


def test_denied_network_actions_answer_each_products_code(
    network: NetworkEmulator, vpc: VpcClient, ecs: EcsClient, standard: StandardNetwork
) -> None:
    network.deny("DescribeVpcs")
    network.deny("DescribeSecurityGroupAttribute", access_key_id=AK)
    vpc_error = _client_error(lambda: _vpcs(vpc, standard.vpc_id))
    ecs_error = _client_error(lambda: _security_group(ecs, standard.security_group_id))
    assert (vpc_error.status_code, vpc_error.code) == (403, "Forbidden")
    assert (ecs_error.status_code, ecs_error.code) == (403, "Forbidden.RAM")

    other = EcsClient(_config(network.endpoint, (OTHER_AK, OTHER_SK)))
    assert _security_group(other, standard.security_group_id).vpc_id == standard.vpc_id
    network.allow("DescribeVpcs")
    assert len(_vpcs(vpc, standard.vpc_id)) == 1
    assert _vswitch(vpc, standard.vswitch_id).vpc_id == standard.vpc_id  # never denied


# --------------------------------------------------------------------------------- PAI Studio


def test_quota_amounts_are_strings_and_follow_set_allocated(
    studio_emulator: PaiStudioEmulator, studio: StudioClient
) -> None:
    studio_emulator.add_quota("quota-lj", allocatable_gpus=64, allocated_gpus=56, name="lingjun-a")
    body = studio.get_quota("quota-lj", studio_models.GetQuotaRequest()).body
    assert (body.quota_id, body.quota_name, body.resource_type, body.status, body.gputype) == (
        "quota-lj",
        "lingjun-a",
        "Lingjun",
        "Ready",
        "GU8TF",
    )
    details = body.quota_details
    assert (details.allocatable_quota.gpu, details.allocated_quota.gpu) == ("64", "56")
    assert (details.allocatable_quota.gputype, details.used_quota.gpu) == ("GU8TF", "56")

    studio_emulator.set_allocated("quota-lj", 8)  # capacity frees up while a sensor waits
    details = studio.get_quota("quota-lj", studio_models.GetQuotaRequest()).body.quota_details
    assert (details.allocated_quota.gpu, details.requested_quota.gpu) == ("8", "8")


def test_quota_workloads_have_positions_filters_and_can_be_cleared(
    studio_emulator: PaiStudioEmulator, studio: StudioClient
) -> None:
    studio_emulator.add_quota("quota-lj", resource_type="Lingjun")
    studio_emulator.add_workload("quota-lj", "dlc-running", status="Dequeued", workload_status="Running")
    studio_emulator.add_workload("quota-lj", "dlc-first", gpus=16)
    studio_emulator.add_workload("quota-lj", "dlc-second", priority=5)

    listed = _workloads(studio, "quota-lj")
    assert listed.total_count == 3
    assert [(w.workload_id, w.position, w.status, w.workload_status) for w in listed.workloads] == [
        ("dlc-running", None, "Dequeued", "Running"),
        ("dlc-first", 1, "Enqueued", "Queuing"),
        ("dlc-second", 2, "Enqueued", "Queuing"),
    ]
    assert (listed.workloads[1].resource.gpu, listed.workloads[2].priority) == ("16", 5)

    queued = _workloads(studio, "quota-lj", status="Enqueued", page_size=1)
    assert (queued.total_count, [w.workload_id for w in queued.workloads]) == (2, ["dlc-first"])
    assert _workloads(studio, "quota-lj", workload_statuses="Running").total_count == 1
    ahead = _workloads(studio, "quota-lj", before_workload_id="dlc-second").workloads
    assert [w.workload_id for w in ahead] == ["dlc-first"]
    quota = studio.get_quota("quota-lj", studio_models.GetQuotaRequest()).body
    assert quota.quota_details.self_submitted_quota.gpu == "24"

    studio_emulator.clear_workloads("quota-lj")
    assert _workloads(studio, "quota-lj").total_count == 0


def test_unknown_quota_and_unemulated_filters_are_refused(
    studio_emulator: PaiStudioEmulator, studio: StudioClient
) -> None:
    for call in (
        lambda: studio.get_quota("quota-missing", studio_models.GetQuotaRequest()),
        lambda: _workloads(studio, "quota-missing"),
    ):
        error = _client_error(call)
        assert (error.status_code, error.code) == (404, "QuotaNotFound")
    studio_emulator.add_quota("quota-lj")
    error = _client_error(lambda: _workloads(studio, "quota-lj", sort_by="GmtCreatedTime"))
    assert (error.status_code, error.code) == (400, "InvalidParameter")


def test_denied_quota_action_answers_forbidden_ram(
    studio_emulator: PaiStudioEmulator, studio: StudioClient
) -> None:
    studio_emulator.add_quota("quota-lj")
    studio_emulator.deny("GetQuota")
    error = _client_error(lambda: studio.get_quota("quota-lj", studio_models.GetQuotaRequest()))
    assert (error.status_code, error.code) == (403, "Forbidden.RAM")
    assert _workloads(studio, "quota-lj").total_count == 0


# --------------------------------------------------------------------------------- RAM


def test_role_policies_and_documents(ram_emulator: RamEmulator, ram: RamClient) -> None:
    arn = ram_emulator.add_role("AliyunPAIDLCDefaultRole")
    ram_emulator.attach_policy("AliyunPAIDLCDefaultRole", "dlc-network", DLC_POLICY)
    ram_emulator.attach_policy(
        "AliyunPAIDLCDefaultRole", "AliyunPAIDLCDefaultRolePolicy", {"Statement": []}, policy_type="System"
    )

    role = ram.get_role(ram_models.GetRoleRequest(role_name="AliyunPAIDLCDefaultRole")).body.role
    assert (role.role_name, role.arn) == ("AliyunPAIDLCDefaultRole", arn)
    assert arn == "acs:ram::1234567890123456:role/aliyunpaidlcdefaultrole" and role.role_id.isdigit()

    listed = ram.list_policies_for_role(
        ram_models.ListPoliciesForRoleRequest(role_name="AliyunPAIDLCDefaultRole")
    )
    assert [(p.policy_name, p.policy_type, p.default_version) for p in listed.body.policies.policy] == [
        ("dlc-network", "Custom", "v1"),
        ("AliyunPAIDLCDefaultRolePolicy", "System", "v1"),
    ]
    body = ram.get_policy(ram_models.GetPolicyRequest(policy_name="dlc-network", policy_type="Custom")).body
    assert json.loads(body.default_policy_version.policy_document) == DLC_POLICY  # a JSON string
    assert (body.default_policy_version.is_default_version, body.policy.attachment_count) == (True, 1)


def test_unknown_role_and_policy_answer_entity_not_exist(ram_emulator: RamEmulator, ram: RamClient) -> None:
    ram_emulator.add_role("runner")
    ram_emulator.attach_policy("runner", "dlc-network", DLC_POLICY)
    cases = [
        (lambda: ram.get_role(ram_models.GetRoleRequest(role_name="ghost")), 404, "EntityNotExist.Role"),
        (
            lambda: ram.list_policies_for_role(ram_models.ListPoliciesForRoleRequest(role_name="ghost")),
            404,
            "EntityNotExist.Role",
        ),
        (
            lambda: ram.get_policy(
                ram_models.GetPolicyRequest(policy_name="dlc-network", policy_type="System")
            ),
            404,
            "EntityNotExist.Policy",
        ),
        (
            lambda: ram.get_policy(
                ram_models.GetPolicyRequest(policy_name="dlc-network", policy_type="Managed")
            ),
            400,
            "InvalidParameter.PolicyType",
        ),
    ]
    for call, status, code in cases:
        error = _client_error(call)
        assert (error.status_code, error.code) == (status, code)


def test_denied_ram_action_answers_no_permission(ram_emulator: RamEmulator, ram: RamClient) -> None:
    ram_emulator.add_role("runner")
    ram_emulator.deny("ListPoliciesForRole")
    request = ram_models.ListPoliciesForRoleRequest(role_name="runner")
    error = _client_error(lambda: ram.list_policies_for_role(request))
    assert (error.status_code, error.code) == (403, "NoPermission")
    assert ram.get_role(ram_models.GetRoleRequest(role_name="runner")).body.role.role_name == "runner"


# --------------------------------------------------------------------------------- faults


@pytest.mark.slow
def test_slow_fault_delays_every_emulator(
    network: NetworkEmulator,
    vpc: VpcClient,
    studio_emulator: PaiStudioEmulator,
    studio: StudioClient,
    ram_emulator: RamEmulator,
    ram: RamClient,
) -> None:
    network.standard()
    studio_emulator.add_quota("quota-lj")
    ram_emulator.add_role("runner")
    calls: list[tuple[EmulatorServer, Callable[[], Any]]] = [
        (network, lambda: _vpcs(vpc, "vpc-test")),
        (studio_emulator, lambda: studio.get_quota("quota-lj", studio_models.GetQuotaRequest())),
        (ram_emulator, lambda: ram.get_role(ram_models.GetRoleRequest(role_name="runner"))),
    ]
    for emulator, call in calls:
        emulator.faults = FaultPlan(slow_rate=1.0, slow_seconds=0.05)
        started = time.monotonic()
        call()
        assert time.monotonic() - started >= 0.05
        assert emulator.requests[-1].fault == "slow"


# -- paging: each emulator answers its API's documented default page size and refuses sizes out of
# range, so a list read only once comes back short in a test as it would from the cloud ------------

PAGED_FS = "bmcpfs-290w65p03ok64ya"


@pytest.fixture
def crowded_network() -> Iterator[NetworkEmulator]:
    with NetworkEmulator({AK: SK}) as emulator:
        emulator.add_vpc("vpc-many", "10.0.0.0/8")
        for n in range(12):
            table = emulator.add_nat_gateway(f"ngw-{n:02d}", "vpc-many")
            if n == 0:
                for m in range(15):
                    emulator.add_snat_entry(table, source_cidr=f"10.{m}.0.0/16")
        yield emulator
        assert emulator.internal_errors == []


def _gateways(network: NetworkEmulator, **paging: Any) -> Any:
    request = vpc_models.DescribeNatGatewaysRequest(region_id=REGION, vpc_id="vpc-many", **paging)
    return VpcClient(_config(network.endpoint)).describe_nat_gateways(request).body


def _entries(network: NetworkEmulator, **paging: Any) -> Any:
    request = vpc_models.DescribeSnatTableEntriesRequest(region_id=REGION, snat_table_id="stb-00", **paging)
    return VpcClient(_config(network.endpoint)).describe_snat_table_entries(request).body


def test_vpc_lists_answer_ten_by_default_with_the_total(crowded_network: NetworkEmulator) -> None:
    gateways = _gateways(crowded_network)
    entries = _entries(crowded_network)

    assert (len(gateways.nat_gateways.nat_gateway), gateways.page_size, gateways.total_count) == (10, 10, 12)
    assert (len(entries.snat_table_entries.snat_table_entry), entries.total_count) == (10, 15)
    second = _gateways(crowded_network, page_number=2)
    assert [g.nat_gateway_id for g in second.nat_gateways.nat_gateway] == ["ngw-10", "ngw-11"]


def test_vpc_lists_answer_up_to_fifty_and_refuse_more(crowded_network: NetworkEmulator) -> None:
    assert len(_entries(crowded_network, page_size=50).snat_table_entries.snat_table_entry) == 15

    for call in (
        lambda: _gateways(crowded_network, page_size=51),
        lambda: _entries(crowded_network, page_size=0),
    ):
        error = _client_error(call)
        assert (error.status_code, error.code) == (400, "InvalidParameter.PageSize")


def test_nas_lists_answer_twenty_by_default_and_refuse_more_than_a_hundred(tmp_path: Path) -> None:
    with NasDataFlowEmulator(tmp_path, lambda bucket, prefix: {}, {AK: SK}) as nas:
        for n in range(25):
            nas.add_data_flow(PAGED_FS, f"df-{n:016d}")
        client = NasClient(_config(nas.endpoint))

        first = client.describe_data_flows(nas_models.DescribeDataFlowsRequest(file_system_id=PAGED_FS)).body
        rest = client.describe_data_flows(
            nas_models.DescribeDataFlowsRequest(file_system_id=PAGED_FS, next_token=first.next_token)
        ).body
        error = _client_error(
            lambda: client.describe_data_flows(
                nas_models.DescribeDataFlowsRequest(file_system_id=PAGED_FS, max_results=101)
            )
        )

        assert (len(first.data_flow_info.data_flow), bool(first.next_token)) == (20, True)
        assert (len(rest.data_flow_info.data_flow), rest.next_token) == (5, None)
        assert (error.status_code, error.code) == (400, "InvalidParameter.MaxResults")
        assert nas.internal_errors == []


def test_acr_lists_answer_thirty_by_default_with_a_string_total() -> None:
    with AcrEmulator({AK: SK}) as acr:
        repo = acr.add_repository("ml", "train")
        rule = acr.add_build_rule(repo.repo_id)
        for n in range(35):
            acr.add_finished_build(repo.repo_id, rule.rule_id, f"tag-{n}", created_at=1_800_000_000.0 + n)
        client = CrClient(_config(acr.endpoint))

        def records(**paging: Any) -> Any:
            request = cr_models.ListRepoBuildRecordRequest(
                instance_id=acr.instance_id, repo_id=repo.repo_id, **paging
            )
            return client.list_repo_build_record(request).body

        first = records()
        error = _client_error(lambda: records(page_size=101))

        assert (len(first.build_records), first.page_size, first.total_count) == (30, 30, "35")
        assert first.build_records[0].image.image_tag == "tag-34", "newest first"
        assert [r.image.image_tag for r in records(page_no=2).build_records] == [
            f"tag-{n}" for n in range(4, -1, -1)
        ]
        assert (error.status_code, error.code) == (400, "InvalidParameter")
        assert acr.internal_errors == []


def test_pai_quota_workloads_count_every_match_whatever_the_page_size() -> None:
    with PaiStudioEmulator({AK: SK}) as studio:
        studio.add_quota("quota-lj", resource_type="Lingjun")
        for n in range(12):
            studio.add_workload("quota-lj", f"dlc-{n:02d}")
        client = StudioClient(_config(studio.endpoint))

        def workloads(**query: Any) -> Any:
            request = studio_models.ListQuotaWorkloadsRequest(**query)
            return client.list_quota_workloads("quota-lj", request).body

        assert (len(workloads().workloads), workloads().total_count) == (10, 12)
        assert (
            len(workloads(status="Enqueued", page_size=1).workloads),
            workloads(page_size=1).total_count,
        ) == (
            1,
            12,
        )
        assert studio.internal_errors == []
