"""Cloud preflight through the real VPC, ECS, PAI Studio, RAM and DLC SDKs against their emulators.

Each scenario asserts the finding and the fix a user reads in the report.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from aliyun_training.operators.preflight import (
    SKIP_REASON_KEY,
    PreflightCheckOperator,
    PreflightReportOperator,
)
from aliyun_training.preflight.permissions import required_actions
from aliyun_training.seals import SEAL_KEY, seals
from aliyun_training.sensors.quota import QuotaCapacitySensor
from aliyun_training.triggers.quota import QuotaCapacityTrigger
from fakes.cloud import POLICY_FILE, Cloud, emulated_cloud, preflight_job, run_check

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    with emulated_cloud(monkeypatch) as account:
        yield account


#: A run on the local backend, which only the machine checks apply to.
LOCAL_SPEC = {"backend": "local", "nodes": 2, "command": "torchrun train.py"}


def finding(findings: list[dict], check: str) -> dict:
    (found,) = [f for f in findings if f["check"] == check]
    return found


class TaskInstance:
    """What the preflight tasks ask of their task instance: XComs, and the states of the tasks before."""

    dag_id = "preflight_report"
    run_id = "manual__2026-11-15"

    def __init__(self, states: dict[str, str] | None = None, xcoms: dict[tuple[str, str], Any] | None = None):
        self.states = states or {}
        self.xcoms = dict(xcoms or {})
        # Each check task sealed what it returned (its post_execute), as a run's tasks do.
        for (task, key), value in list(self.xcoms.items()):
            if key == "return_value":
                self.xcoms[(task, SEAL_KEY)] = seals(value, self.dag_id, self.run_id, task, -1, False)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[("self", key)] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value", default: Any = None) -> Any:
        return self.xcoms.get((task_ids, key), default)

    def get_task_states(
        self, dag_id: str, task_ids: list[str], run_ids: list[str]
    ) -> dict[str, dict[str, str]]:
        assert (dag_id, run_ids) == (self.dag_id, [self.run_id])
        return {self.run_id: {task: state for task, state in self.states.items() if task in task_ids}}


def report_task(groups: tuple[str, ...] = ("network", "quota", "permissions")) -> PreflightReportOperator:
    """The report wired as the DAG wires it: configure and the version's wait, then a check task per
    group, then the report."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, TaskGroup

    with DAG(dag_id=TaskInstance.dag_id, schedule=None):
        before = [EmptyOperator(task_id="configure"), EmptyOperator(task_id="wait_for_version")]
        with TaskGroup("preflight"):
            checks = [EmptyOperator(task_id=f"check_{group}") for group in groups]
            report = PreflightReportOperator(
                task_id="report", check_task_ids=[f"preflight.check_{group}" for group in groups]
            )
        for task in before:
            task >> checks
        checks >> report
    return report


@pytest.mark.slow
def test_a_complete_network_quota_and_role_pass_every_check(cloud: Cloud) -> None:
    findings = run_check(cloud, "network") + run_check(cloud, "quota") + run_check(cloud, "permissions")

    assert {f["check"] for f in findings} == {
        "region",
        "vpc",
        "vswitch",
        "security_group",
        "nat_gateway",
        "snat_entry",
        "quota_capacity",
        "dlc_access",
        "ram_role",
    }
    assert all(f["verdict"] == "PASS" for f in findings), findings


@pytest.mark.slow
def test_a_missing_vpc_is_named_with_where_to_create_it(cloud: Cloud) -> None:
    vpc = {
        "vpc_id": "vpc-missing",
        "switch_id": cloud.ids.vswitch_id,
        "security_group_id": cloud.ids.security_group_id,
    }

    found = finding(run_check(cloud, "network", vpc=vpc), "vpc")

    assert found["verdict"] == "FAIL"
    assert found["found"] == "VPC vpc-missing does not exist in cn-wulanchabu"
    assert found["fix"] == "create it in the VPC console (https://vpc.console.aliyun.com)"


def test_a_vswitch_of_another_vpc_in_another_zone_without_free_ips_lists_every_problem(cloud: Cloud) -> None:
    cloud.network.add_vpc("vpc-other", "10.0.0.0/8")
    cloud.network.add_vswitch("vsw-small", "vpc-other", "cn-wulanchabu-b", "10.0.0.0/29", free_ips=1)
    vpc = {
        "vpc_id": cloud.ids.vpc_id,
        "switch_id": "vsw-small",
        "security_group_id": cloud.ids.security_group_id,
    }

    found = finding(run_check(cloud, "network", vpc=vpc), "vswitch")

    assert found["verdict"] == "FAIL"
    assert found["found"] == (
        f"vSwitch vsw-small belongs to VPC vpc-other, not {cloud.ids.vpc_id}; is in zone cn-wulanchabu-b, "
        f"not {cloud.ids.zone_id}; has 1 free IPs for 2 pods"
    )
    assert found["fix"] == (
        f"use a vSwitch of VPC {cloud.ids.vpc_id}; "
        f"use a vSwitch in {cloud.ids.zone_id}, where the resources are; "
        "free IPs in the vSwitch or use a larger one (each pod takes one IP)"
    )


def test_a_security_group_of_another_vpc_is_rejected(cloud: Cloud) -> None:
    cloud.network.add_vpc("vpc-other", "10.0.0.0/8")
    cloud.network.add_security_group("sg-other", "vpc-other")
    vpc = {"vpc_id": cloud.ids.vpc_id, "switch_id": cloud.ids.vswitch_id, "security_group_id": "sg-other"}

    found = finding(run_check(cloud, "network", vpc=vpc), "security_group")

    assert found["found"] == f"security group sg-other belongs to VPC vpc-other, not {cloud.ids.vpc_id}"
    assert found["fix"] == f"use a security group of VPC {cloud.ids.vpc_id}"


def test_a_vpc_without_a_public_nat_gateway_says_to_create_one(cloud: Cloud) -> None:
    cloud.network.add_vpc("vpc-bare", "192.168.0.0/16")
    cloud.network.add_vswitch("vsw-bare", "vpc-bare", cloud.ids.zone_id, "192.168.1.0/24", free_ips=100)
    cloud.network.add_security_group("sg-bare", "vpc-bare")
    vpc = {"vpc_id": "vpc-bare", "switch_id": "vsw-bare", "security_group_id": "sg-bare"}

    found = finding(run_check(cloud, "network", vpc=vpc), "nat_gateway")

    assert found["verdict"] == "FAIL"
    assert found["found"] == "no public NAT gateway in VPC vpc-bare"
    assert found["fix"].startswith("create an internet NAT gateway in VPC vpc-bare")


def test_a_nat_gateway_without_an_snat_entry_for_the_vswitch_names_the_entry_to_add(cloud: Cloud) -> None:
    cloud.network.add_vswitch("vsw-2", cloud.ids.vpc_id, cloud.ids.zone_id, "172.17.0.0/24", free_ips=100)
    vpc = {"vpc_id": cloud.ids.vpc_id, "switch_id": "vsw-2", "security_group_id": cloud.ids.security_group_id}

    found = finding(run_check(cloud, "network", vpc=vpc), "snat_entry")

    assert found["verdict"] == "FAIL"
    assert found["found"] == "no SNAT entry covers vSwitch vsw-2"
    assert found["fix"] == (
        f"add an SNAT entry for vSwitch vsw-2 on NAT gateway {cloud.ids.nat_gateway_id} "
        "(NAT Gateway > SNAT Management, vSwitch granularity)"
    )


def test_an_snat_entry_for_an_enclosing_cidr_covers_the_vswitch(cloud: Cloud) -> None:
    cloud.network.add_vswitch("vsw-3", cloud.ids.vpc_id, cloud.ids.zone_id, "172.18.4.0/24", free_ips=100)
    cloud.network.add_snat_entry(cloud.ids.snat_table_id, source_cidr="172.18.0.0/16")
    vpc = {"vpc_id": cloud.ids.vpc_id, "switch_id": "vsw-3", "security_group_id": cloud.ids.security_group_id}

    found = finding(run_check(cloud, "network", vpc=vpc), "snat_entry")

    assert found["verdict"] == "PASS" and "172.18.0.0/16" in found["found"]


def _queries(cloud: Cloud, action: str, *names: str) -> list[tuple[str | None, ...]]:
    """The named query parameters of every ``action`` request the VPC emulator received."""
    return [tuple(r.query.get(n) for n in names) for r in cloud.network.requests_for(action)]


def _network_with_gateways(cloud: Cloud, count: int, available: set[int]) -> tuple[dict[str, str], list[str]]:
    """A VPC with ``count`` internet NAT gateways (``available`` by index, the rest Creating)."""
    net = cloud.network
    net.add_vpc("vpc-many", "10.0.0.0/8")
    net.add_vswitch("vsw-many", "vpc-many", cloud.ids.zone_id, "10.1.0.0/24", free_ips=100)
    net.add_security_group("sg-many", "vpc-many")
    tables = [
        net.add_nat_gateway(f"ngw-{n:02d}", "vpc-many", status="Available" if n in available else "Creating")
        for n in range(count)
    ]
    return {"vpc_id": "vpc-many", "switch_id": "vsw-many", "security_group_id": "sg-many"}, tables


def test_the_nat_gateway_with_the_snat_entry_is_found_past_the_first_page(cloud: Cloud) -> None:
    """12 gateways: the default page (10) ends before the one whose SNAT table covers the vSwitch."""
    vpc, tables = _network_with_gateways(cloud, 12, available=set(range(12)))
    entry = cloud.network.add_snat_entry(tables[11], source_vswitch_id="vsw-many")

    findings = run_check(cloud, "network", vpc=vpc)

    assert finding(findings, "nat_gateway")["verdict"] == "PASS"
    snat = finding(findings, "snat_entry")
    assert snat["verdict"] == "PASS" and entry in snat["found"], snat
    assert _queries(cloud, "DescribeNatGateways", "PageNumber", "PageSize") == [("1", "50")]


def test_an_available_nat_gateway_on_the_second_page_of_fifty_is_seen(cloud: Cloud) -> None:
    vpc, tables = _network_with_gateways(cloud, 55, available={54})
    cloud.network.add_snat_entry(tables[54], source_vswitch_id="vsw-many")

    findings = run_check(cloud, "network", vpc=vpc)

    assert finding(findings, "nat_gateway") == {
        "check": "nat_gateway",
        "verdict": "PASS",
        "found": "public NAT gateway ngw-54 is Available",
        "fix": "",
    }
    assert finding(findings, "snat_entry")["verdict"] == "PASS"
    assert _queries(cloud, "DescribeNatGateways", "PageNumber") == [("1",), ("2",)]


def test_the_vswitch_entry_of_a_long_snat_table_is_asked_for_by_vswitch(cloud: Cloud) -> None:
    """15 entries: the vSwitch's is on page 2 at the default page size; the filter finds it at once."""
    ids = cloud.ids
    cloud.network.add_vswitch("vsw-late", ids.vpc_id, ids.zone_id, "172.19.0.0/24", free_ips=100)
    for n in range(14):
        cloud.network.add_snat_entry(ids.snat_table_id, source_cidr=f"192.168.{n}.0/24")
    entry = cloud.network.add_snat_entry(ids.snat_table_id, source_vswitch_id="vsw-late")
    vpc = {"vpc_id": ids.vpc_id, "switch_id": "vsw-late", "security_group_id": ids.security_group_id}

    found = finding(run_check(cloud, "network", vpc=vpc), "snat_entry")

    assert found["verdict"] == "PASS"
    assert found["found"] == f"SNAT entry {entry} (vSwitch vsw-late) via 47.1.2.3"
    assert _queries(cloud, "DescribeSnatTableEntries", "SnatTableId", "SourceVSwitchId") == [
        (ids.snat_table_id, "vsw-late")
    ]


def test_a_covering_cidr_entry_is_looked_for_on_every_page_when_no_entry_names_the_vswitch(
    cloud: Cloud,
) -> None:
    ids = cloud.ids
    cloud.network.add_vswitch("vsw-cidr", ids.vpc_id, ids.zone_id, "172.20.4.0/24", free_ips=100)
    for n in range(59):
        cloud.network.add_snat_entry(ids.snat_table_id, source_cidr=f"192.168.{n}.0/24")
    entry = cloud.network.add_snat_entry(ids.snat_table_id, source_cidr="172.20.0.0/16")
    vpc = {"vpc_id": ids.vpc_id, "switch_id": "vsw-cidr", "security_group_id": ids.security_group_id}

    found = finding(run_check(cloud, "network", vpc=vpc), "snat_entry")

    assert found["verdict"] == "PASS"
    assert found["found"] == f"SNAT entry {entry} (172.20.0.0/16) via 47.1.2.3"
    assert _queries(cloud, "DescribeSnatTableEntries", "SourceVSwitchId", "PageNumber", "PageSize") == [
        ("vsw-cidr", "1", "50"),
        (None, "1", "50"),
        (None, "2", "50"),
    ]


def test_lingjun_outside_its_regions_fails_naming_where_it_is_offered(cloud: Cloud) -> None:
    operator = PreflightCheckOperator(
        task_id="check_network",
        group="network",
        job=preflight_job({"region": "cn-hangzhou", "vpc": None}),
        preflight={"lingjun_regions": ["cn-wulanchabu"]},
    )

    found = finding(operator.execute({}), "region")

    assert found["found"] == "cn-hangzhou does not offer Lingjun resources (offered in: cn-wulanchabu)"
    assert found["fix"] == "set the connection's region to one of cn-wulanchabu and use a VPC there"


@pytest.mark.parametrize(
    ("overrides", "check", "found_text", "fix_text"),
    [
        (
            {"job_settings": {"quota_id": "quota-nope"}},
            "quota",
            "quota quota-nope does not exist in cn-wulanchabu",
            "use a quota id from the PAI console (Resource Quota) of this region",
        ),
        (
            {"job_settings": {"gpu_type": "A100"}},
            "gpu_type",
            "quota quota1 has GU8TF GPUs, the job asks for A100",
            "set gpu_type to GU8TF or use a quota with A100",
        ),
        (
            {"nodes": 9},
            "quota_capacity",
            "72 GPUs needed but quota quota1 holds at most 64",
            "lower nodes or gpus_per_node, or enlarge the quota",
        ),
    ],
)
def test_quota_findings_name_the_mismatch_and_the_fix(
    cloud: Cloud, overrides: dict[str, Any], check: str, found_text: str, fix_text: str
) -> None:
    found = finding(run_check(cloud, "quota", **overrides), check)

    assert found["verdict"] == "FAIL" and found["found"] == found_text and found["fix"] == fix_text


@pytest.mark.slow
def test_a_quota_of_the_wrong_resource_type_is_rejected(cloud: Cloud) -> None:
    cloud.studio.add_quota("quota-ecs", resource_type="ECS", gpu_type="GU8TF", allocatable_gpus=64)

    found = finding(run_check(cloud, "quota", job_settings={"quota_id": "quota-ecs"}), "quota_type")

    assert found["found"] == "quota quota-ecs holds ECS resources, the job asks for lingjun"
    assert found["fix"] == "set resource_type to ecs or use a lingjun quota"


def test_a_busy_quota_warns_that_the_job_will_wait(cloud: Cloud) -> None:
    cloud.studio.set_allocated("quota1", 56)

    found = finding(run_check(cloud, "quota"), "quota_capacity")

    assert found["verdict"] == "WARN"
    assert (
        found["found"]
        == "16 GPUs needed, 8 free GPUs (AllocatableQuota.GPU 64 - AllocatedQuota.GPU 56) right now"
    )


@pytest.mark.slow
def test_a_role_missing_actions_lists_each_missing_action(cloud: Cloud) -> None:
    cloud.ram.add_role("thin-role")
    cloud.ram.attach_policy(
        "thin-role",
        "OnlyVpc",
        {"Version": "1", "Statement": [{"Effect": "Allow", "Action": "vpc:*", "Resource": "*"}]},
    )
    operator = PreflightCheckOperator(
        task_id="check_permissions",
        group="permissions",
        job=preflight_job({"workspace_id": "ws-1"}),
        preflight={"role_name": "thin-role", "policy_file": str(POLICY_FILE)},
    )

    found = finding(operator.execute({}), "ram_role")

    assert found["verdict"] == "FAIL"
    not_vpc = [action for action in required_actions(POLICY_FILE) if not action.startswith("vpc:")]
    assert found["found"] == f"RAM role thin-role lacks {len(not_vpc)} of 71 actions: {', '.join(not_vpc)}"
    assert "vpc:" not in found["found"]
    assert found["fix"].startswith(
        "attach a policy with these actions (see aliyun_training/preflight/dlc_role_policy.json"
    )


@pytest.mark.slow
def test_a_missing_role_says_to_create_it(cloud: Cloud) -> None:
    operator = PreflightCheckOperator(
        task_id="check_permissions",
        group="permissions",
        job=preflight_job({"workspace_id": "ws-1"}),
        preflight={"role_name": "no-such-role", "policy_file": str(POLICY_FILE)},
    )

    found = finding(operator.execute({}), "ram_role")

    assert found == {
        "check": "ram_role",
        "verdict": "FAIL",
        "found": "RAM role no-such-role does not exist",
        "fix": "create it in the RAM console (trusted service: PAI) or fix role_arn",
    }


@pytest.mark.slow
def test_the_report_lists_every_finding_and_fails_once_with_all_of_them(
    cloud: Cloud, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    vpc = {
        "vpc_id": "vpc-missing",
        "switch_id": cloud.ids.vswitch_id,
        "security_group_id": cloud.ids.security_group_id,
    }
    xcoms = {
        ("preflight.check_network", "return_value"): run_check(cloud, "network", vpc=vpc),
        ("preflight.check_quota", "return_value"): run_check(
            cloud, "quota", job_settings={"gpu_type": "A100"}
        ),
    }
    states = {
        "configure": "success",
        "preflight.check_network": "success",
        "preflight.check_quota": "success",
        "preflight.check_permissions": "failed",
    }
    capsys.readouterr()
    caplog.clear()  # what the checks logged in their own tasks

    with pytest.raises(AirflowFailException) as failure:
        report_task().execute({"ti": TaskInstance(states, xcoms)})

    message = str(failure.value)
    assert "FAIL  vpc" in message and "VPC vpc-missing does not exist" in message
    assert "FAIL  gpu_type" in message and "fix: set gpu_type to GU8TF" in message
    assert "the preflight.check_permissions checks did not finish" in message
    # The task's log shows the failure's message; the table is not logged a second time before it.
    logged = capsys.readouterr().out + caplog.text
    assert "VPC vpc-missing does not exist" not in logged


def test_findings_rewritten_through_the_rest_api_fail_the_report_naming_them(cloud: Cloud) -> None:
    """A user who may write XComs turns a failed check's findings into a PASS: the report refuses them."""
    failing = run_check(cloud, "quota", job_settings={"gpu_type": "A100"})
    states = {"configure": "success", **{f"preflight.check_{g}": "success" for g in ("network", "quota")}}
    ti = TaskInstance(
        states,
        {("preflight.check_network", "return_value"): [], ("preflight.check_quota", "return_value"): failing},
    )
    ti.xcoms[("preflight.check_quota", "return_value")] = [{**f, "verdict": "PASS"} for f in failing]

    with pytest.raises(
        AirflowFailException, match=r"preflight\.check_quota's XCom 'return_value' .* does not match"
    ):
        report_task(("network", "quota")).execute({"ti": ti})


def test_a_failed_configure_fails_the_report_naming_it_instead_of_the_checks() -> None:
    checks = ("machine", "network", "quota", "permissions", "cluster")
    states = {"configure": "failed", **{f"preflight.check_{group}": "upstream_failed" for group in checks}}

    with pytest.raises(AirflowFailException) as failure:
        report_task(checks).execute({"ti": TaskInstance(states)})

    assert str(failure.value) == (
        "No preflight check ran because configure failed: read the log of configure for the error, "
        "fix what it names and trigger the run again"
    )


def test_checks_skipped_by_a_skipped_task_before_them_skip_the_report_so_nothing_runs_unchecked() -> None:
    """A check the scheduler skipped (its upstream was skipped) left no reason: it is not "not applicable"."""
    states = {
        "configure": "success",
        "wait_for_version": "skipped",
        **{f"preflight.check_{group}": "skipped" for group in ("network", "quota", "permissions")},
    }

    with pytest.raises(AirflowSkipException) as skipped:
        report_task().execute({"ti": TaskInstance(states)})

    assert str(skipped.value) == (
        "No preflight check ran because wait_for_version was skipped (its log says why): "
        "nothing after preflight runs"
    )


def test_skipped_checks_are_listed_as_not_applicable_with_their_reasons_and_fail_nothing(
    cloud: Cloud, capfd: pytest.CaptureFixture[str]
) -> None:
    skipped = ("network", "quota", "permissions", "cluster")
    xcoms: dict[tuple[str, str], Any] = {
        ("preflight.check_machine", "return_value"): [{"check": "cpus", "verdict": "PASS", "found": "4 CPUs"}]
    }
    for group in skipped:
        ti = TaskInstance()
        with pytest.raises(AirflowSkipException):
            PreflightCheckOperator(task_id=f"check_{group}", group=group, job={"spec": LOCAL_SPEC}).execute(
                {"ti": ti}
            )
        xcoms[(f"preflight.check_{group}", SKIP_REASON_KEY)] = ti.xcoms[("self", SKIP_REASON_KEY)]
    states = {
        "configure": "success",
        "preflight.check_machine": "success",
        **{f"preflight.check_{group}": "skipped" for group in skipped},
    }

    report = report_task(("machine", *skipped)).execute({"ti": TaskInstance(states, xcoms)})

    assert report["findings"] == [{"check": "cpus", "verdict": "PASS", "found": "4 CPUs", "fix": ""}]
    assert report["not_applicable"] == [
        {
            "check": f"preflight.check_{group}",
            "reason": f"{group} checks apply to the {backend} backend; this run uses local",
        }
        for group, backend in zip(skipped, ("dlc", "dlc", "dlc", "arena"), strict=True)
    ]
    assert re.search(
        r"SKIP +preflight\.check_quota +quota checks apply to the dlc backend", capfd.readouterr().out
    )
    assert cloud.network.requests == [] and cloud.studio.requests == []


@pytest.mark.slow
def test_the_capacity_sensor_defers_while_the_quota_is_full_and_resumes_when_room_appears(
    cloud: Cloud,
) -> None:
    cloud.studio.set_allocated("quota1", 60)
    cloud.studio.add_workload("quota1", "dlc-ahead")
    sensor = QuotaCapacitySensor(task_id="wait", job=preflight_job(), poke_interval=0.05, timeout=30)

    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, QuotaCapacityTrigger) and trigger.gpus == 16

    async def free_capacity_later() -> dict[str, Any]:
        task = asyncio.create_task(_first_event(trigger))
        await asyncio.sleep(0.3)
        assert not task.done(), "no room yet: the trigger keeps waiting"
        cloud.studio.set_allocated("quota1", 40)
        return await asyncio.wait_for(task, 10)

    event = asyncio.run(free_capacity_later())

    assert event == {"status": "success", "free": 24, "allocatable": 64}
    assert sensor.execute_complete({}, event) == event
    assert cloud.studio.count("ListQuotaWorkloads") >= 1


def test_skip_preflight_skips_the_check_warns_and_leaves_the_reason(
    cloud: Cloud, capfd: pytest.CaptureFixture[str]
) -> None:
    operator = PreflightCheckOperator(
        task_id="check_network", group="network", job=preflight_job(), skip="True"
    )
    ti = TaskInstance()

    with pytest.raises(AirflowSkipException) as skipped:
        operator.execute({"ti": ti})

    reason = "skipped on request: the run sets skip_preflight, so no network check ran"
    assert str(skipped.value) == reason
    assert ti.xcoms == {("self", SKIP_REASON_KEY): reason}
    assert "PREFLIGHT SKIPPED" in capfd.readouterr().out
    assert cloud.network.requests == []


def test_a_check_of_another_backend_skips_naming_the_backends_it_applies_to(
    cloud: Cloud, capfd: pytest.CaptureFixture[str]
) -> None:
    operator = PreflightCheckOperator(task_id="check_quota", group="quota", job={"spec": LOCAL_SPEC})
    ti = TaskInstance()

    with pytest.raises(AirflowSkipException) as skipped:
        operator.execute({"ti": ti})

    reason = "quota checks apply to the dlc backend; this run uses local"
    assert str(skipped.value) == reason and ti.xcoms == {("self", SKIP_REASON_KEY): reason}
    assert reason in capfd.readouterr().out
    assert cloud.studio.requests == []


async def _first_event(trigger: QuotaCapacityTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


@pytest.mark.parametrize(
    ("soft_fail", "expected"), [(True, AirflowSkipException), (False, AirflowSensorTimeout)]
)
def test_the_capacity_sensor_times_out_by_failing_or_skipping_as_configured(
    soft_fail: bool, expected: type[Exception]
) -> None:
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

    sensor = QuotaCapacitySensor(task_id="wait", job=preflight_job(), timeout=60, soft_fail=soft_fail)

    with pytest.raises(expected):
        sensor.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, {})


def test_an_unknown_quota_fails_the_sensor_and_ends_its_trigger_alike(cloud: Cloud) -> None:
    """The sensor's poke and the trigger read the quota through one hook call (sync and async
    twins): an unknown quota is the same answer to both, never an endless wait."""
    sensor = QuotaCapacitySensor(
        task_id="wait", job=preflight_job(job_settings={"quota_id": "quota-nope"}), timeout=30
    )
    trigger = QuotaCapacityTrigger(quota_id="quota-nope", gpus=16, poll_interval=0.05)

    with pytest.raises(AirflowException, match="quota quota-nope does not exist"):
        sensor.poke({})
    event = asyncio.run(asyncio.wait_for(_first_event(trigger), 10))

    assert event == {"status": "error", "message": "quota quota-nope does not exist"}
    with pytest.raises(AirflowException, match="quota quota-nope does not exist"):
        sensor.execute_complete({}, event)
    assert cloud.studio.count("ListQuotaWorkloads") == 0


def test_a_vpc_lookup_answered_not_found_is_a_missing_vpc(cloud: Cloud) -> None:
    cloud.network.strict_vpc_lookup = True  # InvalidVpcId.NotFound rather than an empty list
    vpc = {
        "vpc_id": "vpc-missing",
        "switch_id": cloud.ids.vswitch_id,
        "security_group_id": cloud.ids.security_group_id,
    }

    found = finding(run_check(cloud, "network", vpc=vpc), "vpc")

    assert found["verdict"] == "FAIL"
    assert found["found"] == "VPC vpc-missing does not exist in cn-wulanchabu"
