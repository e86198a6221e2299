"""The decisions inside the cloud preflight checks, on the SDK's own response models."""

from __future__ import annotations

from pathlib import Path

from alibabacloud_paistudio20220112 import models as studio
from alibabacloud_vpc20160428 import models as vpc

from aliyun_training.findings import Verdict
from aliyun_training.hooks.paistudio import Capacity, free_gpus
from aliyun_training.preflight.network import _covers, check_region
from aliyun_training.preflight.permissions import _covered, required_actions, role_name
from aliyun_training.preflight.quota import _check_capacity
from aliyun_training.spec import TrainingJobSpec

POLICY = (
    Path(__file__).resolve().parents[2] / "plugins" / "aliyun_training" / "preflight" / "dlc_role_policy.json"
)


def lingjun_spec(nodes: int = 2, gpus: int = 8) -> TrainingJobSpec:
    return TrainingJobSpec(
        backend="dlc",
        nodes=nodes,
        gpus_per_node=gpus,
        image="registry/train:1",
        command="train",
    )


def test_free_gpus_are_allocatable_minus_allocated_from_the_quota_details() -> None:
    quota = studio.GetQuotaResponseBody(
        quota_details=studio.QuotaDetails(
            allocatable_quota=studio.ResourceAmount(gpu="64"), allocated_quota=studio.ResourceAmount(gpu="48")
        )
    )

    capacity = free_gpus(quota)

    assert (capacity.allocatable, capacity.allocated, capacity.free) == (64, 48, 16)
    assert capacity.describe() == "16 free GPUs (AllocatableQuota.GPU 64 - AllocatedQuota.GPU 48)"


def test_capacity_passes_when_it_fits_warns_when_busy_and_fails_when_it_never_can() -> None:
    assert _check_capacity(lingjun_spec(), "quota1", Capacity(64, 40)).verdict is Verdict.PASS
    busy = _check_capacity(lingjun_spec(), "quota1", Capacity(64, 56))
    assert busy.verdict is Verdict.WARN and "the job will wait for capacity" in busy.fix
    never = _check_capacity(lingjun_spec(nodes=16), "quota1", Capacity(64, 0))
    assert never.verdict is Verdict.FAIL
    assert never.found == "128 GPUs needed but quota quota1 holds at most 64"


def test_lingjun_is_only_offered_in_the_configured_regions() -> None:
    assert (
        check_region("cn-wulanchabu", lingjun=True, lingjun_regions=["cn-wulanchabu"]).verdict is Verdict.PASS
    )
    wrong = check_region("cn-hangzhou", lingjun=True, lingjun_regions=["cn-wulanchabu"])
    assert wrong.verdict is Verdict.FAIL
    assert wrong.found == "cn-hangzhou does not offer Lingjun resources (offered in: cn-wulanchabu)"
    assert (
        check_region("cn-hangzhou", lingjun=False, lingjun_regions=["cn-wulanchabu"]).verdict is Verdict.PASS
    )


def test_an_snat_entry_covers_a_vswitch_by_id_or_by_an_enclosing_cidr() -> None:
    switch = vpc.DescribeVSwitchAttributesResponseBody(cidr_block="172.16.3.0/24")
    by_id = vpc.DescribeSnatTableEntriesResponseBodySnatTableEntriesSnatTableEntry(source_vswitch_id="vsw-1")
    by_cidr = vpc.DescribeSnatTableEntriesResponseBodySnatTableEntriesSnatTableEntry(
        source_cidr="172.16.0.0/16"
    )
    elsewhere = vpc.DescribeSnatTableEntriesResponseBodySnatTableEntriesSnatTableEntry(
        source_cidr="10.0.0.0/8"
    )

    assert _covers(by_id, "vsw-1", switch)
    assert _covers(by_cidr, "vsw-1", switch)
    assert not _covers(elsewhere, "vsw-1", switch)
    assert not _covers(by_id, "vsw-2", switch)


def test_the_reference_policy_lists_every_action_of_the_lingjun_guide() -> None:
    actions = required_actions(POLICY)

    assert len(actions) == 71 and len(set(actions)) == 71
    assert {"vpc:DescribeSnatTableEntries", "ecs:CreateNetworkInterface", "nas:DescribeFileSystems"} <= set(
        actions
    )


def test_ram_action_patterns_are_case_insensitive_wildcards_and_deny_wins() -> None:
    assert _covered("vpc:DescribeVpcs", ["vpc:Describe*"], [])
    assert _covered("ECS:DescribeSecurityGroups", ["ecs:describesecuritygroups"], [])
    assert _covered("nas:CreateMountTarget", ["*"], [])
    assert not _covered("vpc:CreateVSwitch", ["vpc:Describe*"], [])
    assert not _covered("vpc:DescribeVpcs", ["vpc:*"], ["vpc:DescribeVpcs"])
    assert role_name("acs:ram::1234567890123456:role/pai-dlc-runner") == "pai-dlc-runner"
