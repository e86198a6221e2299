"""Every client the connection builds, without endpoint overrides, talks to the official public endpoint.

The expected hosts are copied from each product's "Endpoints" page of its API reference for China
(Ulanqab), the project's default region, not computed from the table under test:

- PAI-DLC 2020-12-03, PAI (paistudio) 2022-01-12, AIWorkspace 2021-02-04: help pages
  ``api-pai-dlc-2020-12-03-endpoint``, ``api-paistudio-2022-01-12-endpoint``,
  ``api-aiworkspace-2021-02-04-endpoint``;
- VPC 2016-04-28, ECS 2014-05-26, NAS 2017-06-26, Container Registry 2018-12-01:
  ``api-vpc-2016-04-28-endpoint``, ``api-ecs-2014-05-26-endpoint``, ``api-nas-2017-06-26-endpoint``,
  ``api-cr-2018-12-01-endpoint``;
- STS 2015-04-01: ``api-sts-2015-04-01-endpoint`` (regional hosts, sts.cn-wulanchabu among them);
- CloudMonitor 2019-01-01: the CloudMonitor API's "Request method" page (regional
  ``metrics.<region>.aliyuncs.com``), and the SDK's own endpoint map (``metrics.cn-wulanchabu``);
- RAM 2015-05-01: one global endpoint, ``ram.aliyuncs.com`` in every region (``ram.vpc-proxy`` in
  a VPC); the RAM SDK's own rule would compute ``ram.cn-wulanchabu.aliyuncs.com``;
- OSS: "Regions and endpoints", public ``oss-cn-wulanchabu.aliyuncs.com``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aliyun_training.hooks.alibaba_cloud import SERVICES, AlibabaCloudHook
from aliyun_training.staging.oss import OssClientConfig

REGION = "cn-wulanchabu"
OFFICIAL_PUBLIC_ENDPOINTS = {
    "dlc": "pai-dlc.cn-wulanchabu.aliyuncs.com",
    "paistudio": "pai.cn-wulanchabu.aliyuncs.com",
    "aiworkspace": "aiworkspace.cn-wulanchabu.aliyuncs.com",
    "vpc": "vpc.cn-wulanchabu.aliyuncs.com",
    "ecs": "ecs.cn-wulanchabu.aliyuncs.com",
    "nas": "nas.cn-wulanchabu.aliyuncs.com",
    "cr": "cr.cn-wulanchabu.aliyuncs.com",
    "sts": "sts.cn-wulanchabu.aliyuncs.com",
    "cms": "metrics.cn-wulanchabu.aliyuncs.com",
    "ram": "ram.aliyuncs.com",
}


def connect(monkeypatch: pytest.MonkeyPatch, **extras: Any) -> AlibabaCloudHook:
    extras = {"access_key_id": "LTAI-endpoints", "access_key_secret": "endpoints-secret", **extras}
    connection = json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    monkeypatch.setenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", connection)
    return AlibabaCloudHook()


def test_the_table_covers_every_service_the_hook_wires() -> None:
    assert set(OFFICIAL_PUBLIC_ENDPOINTS) | {"oss"} == set(SERVICES)


@pytest.mark.slow
@pytest.mark.parametrize("service", sorted(OFFICIAL_PUBLIC_ENDPOINTS))
def test_each_client_resolves_the_official_public_endpoint_of_the_default_region(
    monkeypatch: pytest.MonkeyPatch, service: str
) -> None:
    client = connect(monkeypatch, region=REGION).client(service)

    assert client._endpoint == OFFICIAL_PUBLIC_ENDPOINTS[service]


@pytest.mark.slow
def test_ram_is_global_also_where_its_sdk_would_compose_a_regional_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert connect(monkeypatch, region="cn-guangzhou").client("ram")._endpoint == "ram.aliyuncs.com"


def test_an_endpoints_entry_replaces_the_public_endpoint_of_that_service_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook = connect(monkeypatch, region=REGION, endpoints={"ram": "ram.vpc-proxy.aliyuncs.com"})

    assert hook.client("ram")._endpoint == "ram.vpc-proxy.aliyuncs.com"
    assert hook.client("dlc")._endpoint == OFFICIAL_PUBLIC_ENDPOINTS["dlc"]


def test_oss_clients_use_the_public_oss_endpoint_of_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch, region=REGION)
    # A staging pod's keys come from its environment (never read here: no request is made).
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI-staging-pod")

    assert OssClientConfig.from_connection("alibaba_cloud_default").endpoint == (
        "https://oss-cn-wulanchabu.aliyuncs.com"
    )
    assert OssClientConfig.from_environment(None, REGION).endpoint == "https://oss-cn-wulanchabu.aliyuncs.com"
