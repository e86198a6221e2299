"""One hook per service over the alibaba_cloud connection (and one over a registry connection).

Each service hook serves its own SDK client, reads what it is asked for through the retry policy,
and answers None for a thing that does not exist, with the same rule sync and async. Requests go
through the real SDKs to the emulators.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk._shared.secrets_masker import redact
from alibabacloud_tea_openapi.exceptions import ClientException

from aliyun_training.hooks.aiworkspace import AIWorkspaceHook
from aliyun_training.hooks.alibaba_cloud import (
    AlibabaCloudConnectionError,
    AlibabaCloudHook,
    default_endpoint,
    shared_hook,
)
from aliyun_training.hooks.container_registry import ContainerRegistryHook
from aliyun_training.hooks.cr import CrHook
from aliyun_training.hooks.dlc import DlcHook
from aliyun_training.hooks.ecs import EcsHook
from aliyun_training.hooks.nas import NasHook
from aliyun_training.hooks.oss import OssHook
from aliyun_training.hooks.paistudio import Capacity, PaiStudioHook
from aliyun_training.hooks.ram import RamHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.hooks.vpc import VpcHook
from aliyun_training.staging.oss import OssClientConfig
from fakes.cloud import REGION, use_alibaba_connection
from fakes.network import NetworkEmulator
from fakes.paistudio import PaiStudioEmulator
from fakes.ram import RamEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "LTAI-service-hooks", "service-hooks-secret"
FAST = {"max_attempts": 3, "base_delay": 0.001, "max_delay": 0.002}


def connect(monkeypatch: pytest.MonkeyPatch, **extras: Any) -> None:
    extras = {"access_key_id": AK, "access_key_secret": SK, "region": REGION, "retry": FAST, **extras}
    connection = json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    monkeypatch.setenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", connection)


# -- the base and its service hooks ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hook_class", "service"),
    [
        (DlcHook, "dlc"),
        (PaiStudioHook, "paistudio"),
        (AIWorkspaceHook, "aiworkspace"),
        (VpcHook, "vpc"),
        (EcsHook, "ecs"),
        (NasHook, "nas"),
        (CrHook, "cr"),
        (RamHook, "ram"),
    ],
)
def test_each_service_hook_serves_its_own_client_of_the_one_connection(
    monkeypatch: pytest.MonkeyPatch, hook_class: type[AlibabaCloudHook], service: str
) -> None:
    connect(monkeypatch)
    hook = hook_class()

    assert hook.conn is hook.get_conn() is hook.client(service)
    assert hook.conn._endpoint == default_endpoint(service, REGION)
    assert (hook.conn_name_attr, hook.default_conn_name, hook.conn_type) == (
        "alibaba_cloud_conn_id",
        "alibaba_cloud_default",
        "alibaba_cloud",
    )
    assert shared_hook(hook_class, "alibaba_cloud_default") is shared_hook(
        hook_class, "alibaba_cloud_default"
    )
    assert shared_hook(hook_class, "alibaba_cloud_default") is not shared_hook(
        AlibabaCloudHook, "alibaba_cloud_default"
    )


def test_the_base_hook_serves_no_one_service(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch)

    with pytest.raises(AlibabaCloudConnectionError, match="serves no one service"):
        AlibabaCloudHook().get_conn()


def not_found() -> ClientException:
    return ClientException(status_code=404, code="QuotaNotFound", message="gone", request_id="RID-404")


@pytest.mark.slow
def test_call_or_none_answers_none_only_for_what_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch)
    hook = AlibabaCloudHook()

    def raise_(error: Exception) -> Any:
        raise error

    async def araise(error: Exception) -> Any:
        raise error

    missing = lambda code: "NotFound" in code  # noqa: E731
    unknown_key = ClientException(status_code=404, code="InvalidAccessKeyId.NotFound", message="who?")
    assert hook.call_or_none("GetQuota", lambda: raise_(not_found()), missing) is None
    assert asyncio.run(hook.acall_or_none("GetQuota", lambda: araise(not_found()), missing)) is None
    with pytest.raises(AlibabaCloudApiError) as sync_error:
        hook.call_or_none("GetQuota", lambda: raise_(unknown_key), missing)
    with pytest.raises(AlibabaCloudApiError) as async_error:
        asyncio.run(hook.acall_or_none("GetQuota", lambda: araise(unknown_key), missing))
    assert sync_error.value.code == async_error.value.code == "InvalidAccessKeyId.NotFound"


def test_call_once_adopts_what_a_lost_answer_made_instead_of_making_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect(monkeypatch)
    made: list[str] = []

    def create() -> str:
        made.append("thing-1")
        raise ConnectionResetError(104, "Connection reset by peer")  # made, but the answer is lost

    found = AlibabaCloudHook().call_once("CreateThing", create, lambda: made[0] if made else None)

    assert found == "thing-1" and made == ["thing-1"]


async def test_an_async_call_reads_the_connection_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch)
    hook = AlibabaCloudHook()

    def blocking_lookup(conn_id: str) -> Any:
        raise AssertionError("a sync connection lookup would block the triggerer's event loop")

    monkeypatch.setattr(hook, "get_connection", blocking_lookup)

    async def answer() -> str:
        return hook.region  # needs the extras: read by acall without blocking the loop

    assert await hook.acall("Anything", answer) == REGION


# -- PAI Studio: one look at a quota, sync and async alike -----------------------------------------


@pytest.fixture
def studio(monkeypatch: pytest.MonkeyPatch) -> Iterator[PaiStudioEmulator]:
    with PaiStudioEmulator({AK: SK}) as emulator:
        use_alibaba_connection(monkeypatch, {"paistudio": emulator.endpoint}, AK, SK, retry=FAST)
        yield emulator
        assert emulator.internal_errors == []


def test_quota_capacity_is_the_quota_its_free_gpus_and_its_queue_sync_and_async(
    studio: PaiStudioEmulator,
) -> None:
    studio.add_quota("quota1", allocatable_gpus=64, allocated_gpus=40)
    studio.add_workload("quota1", "dlc-ahead")
    studio.add_workload("quota1", "dlc-left", status="Dequeued")

    sync = PaiStudioHook().quota_capacity("quota1")
    asynchronous = asyncio.run(PaiStudioHook().aquota_capacity("quota1"))

    assert sync is not None and asynchronous is not None
    assert (
        (sync.capacity, sync.queued) == (asynchronous.capacity, asynchronous.queued) == (Capacity(64, 40), 1)
    )
    assert sync.capacity.free == 24 and sync.quota.quota_id == asynchronous.quota.quota_id == "quota1"


@pytest.mark.slow
def test_an_unknown_quota_is_none_sync_and_async_and_its_queue_is_not_asked(
    studio: PaiStudioEmulator,
) -> None:
    assert PaiStudioHook().quota_capacity("quota-nope") is None
    assert asyncio.run(PaiStudioHook().aquota_capacity("quota-nope")) is None
    assert studio.count("GetQuota") == 2 and studio.count("ListQuotaWorkloads") == 0


@pytest.mark.slow
def test_a_refused_key_is_an_error_not_a_missing_quota_sync_and_async(
    studio: PaiStudioEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    studio.add_quota("quota1")
    use_alibaba_connection(monkeypatch, {"paistudio": studio.endpoint}, "LTAI-unknown", SK, retry=FAST)

    with pytest.raises(AlibabaCloudApiError) as sync_error:
        PaiStudioHook().quota_capacity("quota1")
    with pytest.raises(AlibabaCloudApiError) as async_error:
        asyncio.run(PaiStudioHook().aquota_capacity("quota1"))

    assert sync_error.value.code == async_error.value.code == "InvalidAccessKeyId.NotFound"


# -- VPC, ECS and RAM: None for what does not exist ------------------------------------------------


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Iterator[NetworkEmulator]:
    with NetworkEmulator({AK: SK}) as emulator:
        emulator.standard()  # vpc-test 172.16.0.0/12, vsw-test, sg-test
        endpoints = {"vpc": emulator.endpoint, "ecs": emulator.endpoint}
        use_alibaba_connection(monkeypatch, endpoints, AK, SK, retry=FAST)
        yield emulator


def test_vpc_and_ecs_reads_answer_none_for_what_does_not_exist(network: NetworkEmulator) -> None:
    vpc, ecs = VpcHook(), EcsHook()

    assert vpc.describe_vpc("vpc-test").cidr_block == "172.16.0.0/12"
    assert vpc.cidr_blocks("vpc-test") == ["172.16.0.0/12"]
    assert vpc.describe_vpc("vpc-nope") is None and vpc.cidr_blocks("vpc-nope") == []
    network.strict_vpc_lookup = True  # InvalidVpcId.NotFound instead of an empty list: the same
    assert vpc.describe_vpc("vpc-nope") is None and vpc.nat_gateways("vpc-nope") == []
    assert [gateway.vpc_id for gateway in vpc.nat_gateways("vpc-test")] == ["vpc-test"]
    assert vpc.describe_vswitch("vsw-test").vpc_id == "vpc-test"
    assert vpc.describe_vswitch("vsw-nope") is None
    assert ecs.describe_security_group("sg-test").vpc_id == "vpc-test"
    assert ecs.describe_security_group("sg-nope") is None


@pytest.mark.slow
def test_ram_reads_a_role_and_its_policy_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    document = {"Version": "1", "Statement": [{"Effect": "Allow", "Action": "vpc:*", "Resource": "*"}]}
    with RamEmulator({AK: SK}) as ram:
        ram.add_role("runner")
        ram.attach_policy("runner", "OnlyVpc", document)
        use_alibaba_connection(monkeypatch, {"ram": ram.endpoint}, AK, SK, retry=FAST)
        hook = RamHook()

        assert hook.get_role("runner").role_name == "runner"
        assert hook.get_role("nobody") is None
        (policy,) = hook.role_policies("runner")
        assert hook.policy_document(policy.policy_name, policy.policy_type) == document


# -- OSS and the container registry ----------------------------------------------------------------


def test_the_oss_hook_gives_oss2_the_connections_endpoint_and_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect(monkeypatch, protocol="http", endpoints={"oss": "127.0.0.1:9000"})
    overridden = OssClientConfig.from_hook(OssHook(), pool_size=4)
    connect(monkeypatch)
    public = OssClientConfig.from_hook(OssHook(region="cn-beijing"))

    assert (overridden.endpoint, overridden.region, overridden.pool_size) == (
        "http://127.0.0.1:9000",
        REGION,
        4,
    )
    assert overridden.credentials.get_credential().access_key_id == AK
    assert (public.endpoint, public.region) == ("https://oss-cn-beijing.aliyuncs.com", "cn-beijing")


def test_the_registry_hook_reads_host_login_and_password_masking_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    password = "registry-hook-password-4711"
    connection = {
        "conn_type": "docker",
        "host": "https://registry.example.com/",
        "port": 5000,
        "login": "puller",
        "password": password,
        "extra": {"scheme": "https"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_TRAINING_REGISTRY", json.dumps(connection))

    login = ContainerRegistryHook("training_registry").login()

    assert login is not None
    assert (login.conn_id, login.host, login.login, login.password, login.scheme) == (
        "training_registry",
        "registry.example.com:5000",
        "puller",
        password,
        "https",
    )
    assert password not in repr(login) and password not in redact(f"pulling with {password}")
    assert ContainerRegistryHook(None).login() is None
