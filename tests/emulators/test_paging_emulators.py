"""The emulators page as the SDK docstrings say the services do, through the real SDK clients.

A list that is read once must come back short in a test, as it would from the cloud: each emulator
answers its API's default page size when none is asked for and refuses sizes out of range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alibabacloud_cr20181201 import models as cr_models
from alibabacloud_cr20181201.client import Client as CrClient
from alibabacloud_nas20170626 import models as nas_models
from alibabacloud_nas20170626.client import Client as NasClient
from alibabacloud_paistudio20220112 import models as studio_models
from alibabacloud_paistudio20220112.client import Client as StudioClient
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_openapi.utils_models import Config
from alibabacloud_vpc20160428 import models as vpc_models
from alibabacloud_vpc20160428.client import Client as VpcClient

from tests.emulators.acr import AcrEmulator
from tests.emulators.base import EmulatorServer
from tests.emulators.nas import NasDataFlowEmulator
from tests.emulators.network import NetworkEmulator
from tests.emulators.paistudio import PaiStudioEmulator

AK, SK = "paging-ak", "paging-sk"
REGION = "cn-wulanchabu"
FS = "bmcpfs-290w65p03ok64ya"


def _config(emulator: EmulatorServer) -> Config:
    return Config(
        access_key_id=AK, access_key_secret=SK, endpoint=emulator.endpoint, protocol="http", region_id=REGION
    )


def _refusal(call: Callable[[], Any]) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


@pytest.fixture
def network() -> Iterator[NetworkEmulator]:
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
    return VpcClient(_config(network)).describe_nat_gateways(request).body


def _entries(network: NetworkEmulator, **paging: Any) -> Any:
    request = vpc_models.DescribeSnatTableEntriesRequest(region_id=REGION, snat_table_id="stb-00", **paging)
    return VpcClient(_config(network)).describe_snat_table_entries(request).body


def test_vpc_lists_answer_ten_by_default_with_the_total(network: NetworkEmulator) -> None:
    gateways = _gateways(network)
    entries = _entries(network)

    assert (len(gateways.nat_gateways.nat_gateway), gateways.page_size, gateways.total_count) == (10, 10, 12)
    assert (len(entries.snat_table_entries.snat_table_entry), entries.total_count) == (10, 15)
    second = _gateways(network, page_number=2)
    assert [g.nat_gateway_id for g in second.nat_gateways.nat_gateway] == ["ngw-10", "ngw-11"]


def test_vpc_lists_answer_up_to_fifty_and_refuse_more(network: NetworkEmulator) -> None:
    assert len(_entries(network, page_size=50).snat_table_entries.snat_table_entry) == 15

    for call in (lambda: _gateways(network, page_size=51), lambda: _entries(network, page_size=0)):
        error = _refusal(call)
        assert (error.status_code, error.code) == (400, "InvalidParameter.PageSize")


def test_nas_lists_answer_twenty_by_default_and_refuse_more_than_a_hundred(tmp_path: Path) -> None:
    with NasDataFlowEmulator(tmp_path, lambda bucket, prefix: {}, {AK: SK}) as nas:
        for n in range(25):
            nas.add_data_flow(FS, f"df-{n:016d}")
        client = NasClient(_config(nas))

        first = client.describe_data_flows(nas_models.DescribeDataFlowsRequest(file_system_id=FS)).body
        rest = client.describe_data_flows(
            nas_models.DescribeDataFlowsRequest(file_system_id=FS, next_token=first.next_token)
        ).body
        error = _refusal(
            lambda: client.describe_data_flows(
                nas_models.DescribeDataFlowsRequest(file_system_id=FS, max_results=101)
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
        client = CrClient(_config(acr))

        def records(**paging: Any) -> Any:
            request = cr_models.ListRepoBuildRecordRequest(
                instance_id=acr.instance_id, repo_id=repo.repo_id, **paging
            )
            return client.list_repo_build_record(request).body

        first = records()
        error = _refusal(lambda: records(page_size=101))

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
        client = StudioClient(_config(studio))

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
