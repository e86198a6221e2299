"""The alibaba_cloud connection: validation, secret masking, credentials and clients.

Requests go through the real SDK to the DLC and STS emulators, so what the tests see in the
recorded headers is what the cloud would receive.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk._shared.secrets_masker import redact
from alibabacloud_credentials.utils import auth_util
from alibabacloud_pai_dlc20201203 import models as dlc_models

from aliyun_training.hooks.alibaba_cloud import SERVICES, AlibabaCloudConnectionError, AlibabaCloudHook
from fakes.base import FaultPlan, IssuedToken, RecordedRequest
from fakes.dlc import DlcEmulator
from fakes.sts import StsEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

AK, SK = "LTAI-hook-unit-access-key", "hook-unit-secret-access-key"
REGION = "cn-wulanchabu"
ROLE_ARN = "acs:ram::1234567890123456:role/pai-dlc-runner"
FAST_RETRY = {"max_attempts": 10, "base_delay": 0.001, "max_delay": 0.005}


def connect(monkeypatch: pytest.MonkeyPatch, **extras: Any) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    )


def unique_secret(label: str) -> str:
    """A value no other test masks: plain hex, so a word like "secret" masked elsewhere cannot match it."""
    return uuid.uuid5(uuid.uuid4(), label).hex


def access_key_of(request: RecordedRequest) -> str:
    """The AccessKeyId in an ACS3 ``Authorization: ACS3-HMAC-SHA256 Credential=<AK>,...`` header."""
    return request.headers["authorization"].split("Credential=", 1)[1].split(",", 1)[0]


def list_jobs(hook: AlibabaCloudHook) -> Any:
    return hook.call("ListJobs", lambda: hook.client("dlc").list_jobs(dlc_models.ListJobsRequest()))


@pytest.fixture
def dlc() -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def sts(dlc: DlcEmulator) -> Iterator[StsEmulator]:
    with StsEmulator({AK: SK}) as emulator:
        emulator.link(dlc)
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def env_credentials(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set the default chain's environment variables (the STS token only when one is given).

    alibabacloud-credentials reads its environment once, when first imported, into
    ``auth_util``; the snapshot is updated with the variables. The ECS metadata provider is
    switched off so the chain never probes the metadata address from a test machine.
    """

    def set_env(access_key_id: str, access_key_secret: str, security_token: str | None = None) -> None:
        for variable, attribute, value in (
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "environment_access_key_id", access_key_id),
            ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "environment_access_key_secret", access_key_secret),
            ("ALIBABA_CLOUD_SECURITY_TOKEN", "environment_security_token", security_token),
            ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "environment_ecs_metadata_disabled", "true"),
        ):
            if value is None:
                monkeypatch.delenv(variable, raising=False)
            else:
                monkeypatch.setenv(variable, value)
            monkeypatch.setattr(auth_util, attribute, value)

    return set_env


def dlc_connection(monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, **extras: Any) -> AlibabaCloudHook:
    """A connection to the DLC emulator over http with fast retries; ``extras`` add or override."""
    defaults = {"region": REGION, "protocol": "http", "endpoints": {"dlc": dlc.endpoint}, "retry": FAST_RETRY}
    connect(monkeypatch, **{**defaults, **extras})
    return AlibabaCloudHook()


# --------------------------------------------------------------------------------- validation


async def test_an_undefined_connection_is_named_with_the_ways_to_define_it() -> None:
    name = f"alibaba_cloud_{uuid.uuid4().hex[:8]}"

    with pytest.raises(AlibabaCloudConnectionError) as sync_caught:
        _ = AlibabaCloudHook(name).extras
    with pytest.raises(AlibabaCloudConnectionError) as async_caught:
        await AlibabaCloudHook(name).aload()

    for caught in (sync_caught, async_caught):
        message = str(caught.value)
        assert f"connection '{name}' is not defined" in message
        assert "type 'Alibaba Cloud'" in message and f"AIRFLOW_CONN_{name.upper()}" in message


def test_access_key_id_without_secret_is_rejected_with_the_fix() -> None:
    with pytest.raises(AlibabaCloudConnectionError) as caught:
        AlibabaCloudHook().load_extras({"access_key_id": AK, "region": REGION})
    message = str(caught.value)
    assert "alibaba_cloud_default" in message
    assert "access_key_id and access_key_secret" in message and "fix: set both" in message


def test_access_key_secret_without_id_is_rejected() -> None:
    with pytest.raises(AlibabaCloudConnectionError, match="access_key_id and access_key_secret go together"):
        AlibabaCloudHook().load_extras({"access_key_secret": unique_secret("lonely")})


def test_security_token_without_key_pair_is_rejected_with_the_fix() -> None:
    with pytest.raises(AlibabaCloudConnectionError) as caught:
        AlibabaCloudHook().load_extras({"security_token": unique_secret("token")})
    message = str(caught.value)
    assert "security_token needs access_key_id and access_key_secret" in message
    assert "fix:" in message


def test_unknown_endpoint_service_is_named_with_the_valid_ones() -> None:
    with pytest.raises(AlibabaCloudConnectionError) as caught:
        AlibabaCloudHook().load_extras({"endpoints": {"dlc": "127.0.0.1:1", "pai-dlc": "x", "s3": "y"}})
    message = str(caught.value)
    assert "endpoints" in message and "['pai-dlc', 's3']" in message
    assert all(service in message for service in SERVICES)


def test_bad_protocol_is_rejected() -> None:
    with pytest.raises(AlibabaCloudConnectionError) as caught:
        AlibabaCloudHook().load_extras({"protocol": "ftp"})
    assert "protocol must be http or https" in str(caught.value)


def test_missing_region_is_reported_when_a_client_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch, access_key_id=AK, access_key_secret=SK)
    hook = AlibabaCloudHook()
    assert hook.extras["access_key_id"] == AK  # the connection itself loads fine
    with pytest.raises(AlibabaCloudConnectionError) as caught:
        hook.client("dlc")
    assert "no region" in str(caught.value) and "set the extra region" in str(caught.value)


def test_region_argument_overrides_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    connect(monkeypatch, region=REGION)
    assert AlibabaCloudHook(region="cn-hangzhou").region == "cn-hangzhou"
    assert AlibabaCloudHook().region == REGION


def test_valid_extras_are_kept() -> None:
    hook = AlibabaCloudHook()
    extras = {"access_key_id": AK, "access_key_secret": SK, "region": REGION, "protocol": "http"}
    hook.load_extras(extras)
    assert hook.extras == extras and hook.region == REGION


# --------------------------------------------------------------------------------- masking


def test_access_key_secret_and_security_token_are_masked_once_loaded() -> None:
    secret, token = unique_secret("secret"), unique_secret("token")
    line = f"signing with {secret} and {token} now"
    assert redact(line) == line  # nothing masks them yet
    AlibabaCloudHook().load_extras(
        {"access_key_id": AK, "access_key_secret": secret, "security_token": token}
    )
    redacted = redact(line)
    assert secret not in redacted and token not in redacted
    assert redacted.startswith("signing with ")


def test_secret_is_masked_even_when_the_extras_are_rejected() -> None:
    secret = unique_secret("rejected")
    with pytest.raises(AlibabaCloudConnectionError):
        AlibabaCloudHook().load_extras({"access_key_secret": secret})
    assert secret not in redact(f"error near {secret}")


@pytest.mark.slow
def test_sts_issued_secret_and_token_are_masked_after_assume_role(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, sts: StsEmulator
) -> None:
    hook = dlc_connection(
        monkeypatch,
        dlc,
        access_key_id=AK,
        access_key_secret=SK,
        role_arn=ROLE_ARN,
        endpoints={"dlc": dlc.endpoint, "sts": sts.endpoint},
    )
    list_jobs(hook)
    assert sts.assumed == 1
    issued = sts.issued["token-1"]
    redacted = redact(f"key {issued.access_key_secret} token token-1")
    assert issued.access_key_secret not in redacted and "token-1" not in redacted


def test_a_default_chain_sts_token_is_masked_before_it_signs_a_request(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, env_credentials: Callable[..., None]
) -> None:
    """No key pair in the connection: the environment's STS credentials (as ACK's RRSA or an ECS
    instance role would hand out) are masked too, not only the extras and AssumeRole results."""
    env_ak, env_sk = "STS.from-environment", unique_secret("env-sts-secret")
    token = unique_secret("env-token")
    dlc.issue_security_token(token, IssuedToken(env_ak, env_sk, time.time() + 3600))
    env_credentials(env_ak, env_sk, token)
    line = f"signed with {env_sk} and {token}"
    assert redact(line) == line  # nothing knows them before the hook hands them out

    list_jobs(dlc_connection(monkeypatch, dlc))

    [request] = dlc.requests_for("ListJobs")
    assert request.status == 200 and request.headers["x-acs-security-token"] == token
    redacted = redact(line)
    assert env_sk not in redacted and token not in redacted and redacted.startswith("signed with ")


# --------------------------------------------------------------------------------- credentials


def test_static_key_pair_signs_requests_the_service_accepts(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator
) -> None:
    hook = dlc_connection(monkeypatch, dlc, access_key_id=AK, access_key_secret=SK)
    assert list_jobs(hook).body.total_count == 0
    [request] = dlc.requests_for("ListJobs")
    assert request.status == 200 and access_key_of(request) == AK
    assert "x-acs-security-token" not in request.headers


def test_fixed_security_token_is_sent_with_each_request(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator
) -> None:
    sts_ak, sts_sk, token = "STS.fixed-key", unique_secret("sts-secret"), unique_secret("fixed-token")
    dlc.issue_security_token(token, IssuedToken(sts_ak, sts_sk, time.time() + 3600))
    hook = dlc_connection(
        monkeypatch, dlc, access_key_id=sts_ak, access_key_secret=sts_sk, security_token=token
    )
    list_jobs(hook)
    [request] = dlc.requests_for("ListJobs")
    assert request.status == 200
    assert request.headers["x-acs-security-token"] == token and access_key_of(request) == sts_ak


def test_role_arn_assumes_the_role_and_signs_with_the_issued_credentials(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, sts: StsEmulator
) -> None:
    hook = dlc_connection(
        monkeypatch,
        dlc,
        access_key_id=AK,
        access_key_secret=SK,
        role_arn=ROLE_ARN,
        role_session_name="unit-test",
        endpoints={"dlc": dlc.endpoint, "sts": sts.endpoint},
    )
    list_jobs(hook)
    [assume] = sts.requests_for("AssumeRole")
    assert access_key_of(assume) == AK
    params = {**assume.query, **(assume.body if isinstance(assume.body, dict) else {})}
    assert (params["RoleArn"], params["RoleSessionName"]) == (ROLE_ARN, "unit-test")
    [request] = dlc.requests_for("ListJobs")
    assert request.status == 200
    assert access_key_of(request) == sts.issued["token-1"].access_key_id
    assert access_key_of(request).startswith("STS.")
    assert request.headers["x-acs-security-token"] == "token-1"


def test_assumed_token_is_cached_until_refresh_is_forced(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, sts: StsEmulator
) -> None:
    hook = dlc_connection(
        monkeypatch,
        dlc,
        access_key_id=AK,
        access_key_secret=SK,
        role_arn=ROLE_ARN,
        endpoints={"dlc": dlc.endpoint, "sts": sts.endpoint},
    )
    list_jobs(hook)
    list_jobs(hook)
    assert sts.assumed == 1
    hook.refresh_credentials()
    assert sts.assumed == 1  # refreshing only drops the token; the next call fetches one
    list_jobs(hook)
    assert sts.assumed == 2
    tokens = [r.headers["x-acs-security-token"] for r in dlc.requests_for("ListJobs")]
    assert tokens == ["token-1", "token-1", "token-2"]


def test_expired_assumed_token_is_renewed_by_call(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, sts: StsEmulator
) -> None:
    hook = dlc_connection(
        monkeypatch,
        dlc,
        access_key_id=AK,
        access_key_secret=SK,
        role_arn=ROLE_ARN,
        endpoints={"dlc": dlc.endpoint, "sts": sts.endpoint},
    )
    list_jobs(hook)
    dlc.expire_security_token("token-1")
    assert list_jobs(hook).body.total_count == 0
    assert sts.assumed == 2
    answers = [(r.headers["x-acs-security-token"], r.status) for r in dlc.requests_for("ListJobs")]
    assert answers == [("token-1", 200), ("token-1", 400), ("token-2", 200)]


def test_without_keys_or_role_the_default_chain_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator, env_credentials: Callable[..., None]
) -> None:
    env_ak, env_sk = "LTAI-from-environment", unique_secret("env-secret")
    dlc.accept_access_key(env_ak, env_sk)
    env_credentials(env_ak, env_sk)
    hook = dlc_connection(monkeypatch, dlc)
    list_jobs(hook)
    [request] = dlc.requests_for("ListJobs")
    assert request.status == 200 and access_key_of(request) == env_ak


# --------------------------------------------------------------------------------- clients


def test_client_is_created_once_per_hook(monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator) -> None:
    hook = dlc_connection(monkeypatch, dlc, access_key_id=AK, access_key_secret=SK)
    assert hook.client("dlc") is hook.client("dlc")
    assert AlibabaCloudHook().client("dlc") is not hook.client("dlc")


def test_endpoint_and_protocol_extras_reach_the_emulator_over_http(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator
) -> None:
    hook = dlc_connection(monkeypatch, dlc, access_key_id=AK, access_key_secret=SK)
    list_jobs(hook)
    [request] = dlc.requests_for("ListJobs")
    assert request.headers["host"] == dlc.endpoint
    assert (request.method, request.path, request.status) == ("GET", "/api/v1/jobs", 200)


def test_unwired_service_has_no_client(monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator) -> None:
    hook = dlc_connection(monkeypatch, dlc, access_key_id=AK, access_key_secret=SK)
    with pytest.raises(AlibabaCloudConnectionError, match="no SDK client is wired for service 'oss'"):
        hook.client("oss")


def test_call_retries_throttled_get_job_through_the_sdk(
    monkeypatch: pytest.MonkeyPatch, dlc: DlcEmulator
) -> None:
    hook = dlc_connection(monkeypatch, dlc, access_key_id=AK, access_key_secret=SK)
    job = dlc_models.CreateJobRequest(
        display_name="retry-probe",
        job_type="PyTorchJob",
        job_specs=[
            dlc_models.JobSpec(
                type="Master",
                image="registry.example.com/train/pytorch:2.3",
                pod_count=1,
                resource_config=dlc_models.ResourceConfig(cpu="8", gpu="1", memory="32Gi"),
            )
        ],
        user_command="python train.py",
    )
    job_id = hook.client("dlc").create_job(job).body.job_id
    dlc.faults = FaultPlan(throttle_rate=0.5, seed=3, actions=frozenset({"GetJob"}))
    body = hook.call("GetJob", lambda: hook.client("dlc").get_job(job_id, dlc_models.GetJobRequest())).body
    assert body.job_id == job_id
    assert dlc.faults_injected > 0
    faults = [r.fault for r in dlc.requests_for("GetJob")]
    assert faults[-1] == "" and set(faults[:-1]) == {"throttle"}
