"""oss2 at DEBUG prints request headers and the V4 canonical request; our OSS clients keep the STS
token and the signature out of those lines, against the OSS emulator through the real oss2 client."""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING

import pytest

from aliyun_training.staging.oss import OssClientConfig, OssObjectSource, redact_oss_secrets
from fakes.cloud import use_alibaba_connection
from fakes.oss import OssEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

BUCKET = "training-data"
STS_AK = "STS.oss-logs"


@pytest.fixture
def token() -> str:
    """A token no other test masks (the Airflow masker would hide a known one anyway)."""
    return uuid.uuid4().hex + uuid.uuid4().hex


@pytest.fixture
def sts_secret() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch, token: str, sts_secret: str) -> Iterator[OssEmulator]:
    """An emulated bucket that accepts only the STS key with ``token``, and a connection holding both."""
    with OssEmulator({}, region="cn-wulanchabu") as emulator:
        emulator.create_bucket(BUCKET)
        emulator.accept_token(STS_AK, sts_secret, token)
        emulator.put(BUCKET, "cifar10/v1/labels.json", b"{}")
        endpoints = {"oss": emulator.endpoint.removeprefix("http://")}
        use_alibaba_connection(monkeypatch, endpoints, STS_AK, sts_secret, security_token=token)
        yield emulator
        assert emulator.internal_errors == []


@pytest.mark.slow
def test_debug_logs_of_an_sts_request_show_the_request_but_not_the_token(
    oss: OssEmulator, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="oss2")
    source = OssObjectSource(
        f"oss://{BUCKET}/cifar10/v1/", config=OssClientConfig.from_connection("alibaba_cloud_default")
    )

    [listed] = source.list()

    assert listed.key == "labels.json"
    [request] = oss.records("ListObjectsV2")
    assert request.status == 200, "the emulator accepted the token, so oss2 sent it"
    sent = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Send request")]
    assert sent and f"/{BUCKET}" in sent[0] and "'x-oss-security-token': '***'" in sent[0]
    assert re.search(r"'authorization': '\*\*\*'", sent[0], re.I)
    assert "x-oss-security-token:***" in caplog.text, "the V4 canonical request is logged, redacted"
    assert token not in caplog.text
    authorization = {k.lower(): v for k, v in request.headers.items()}["authorization"]
    signature = authorization.rsplit("Signature=", 1)[1]
    assert len(signature) == 64 and signature not in caplog.text


@pytest.mark.parametrize(
    ("line", "redacted"),
    [
        (
            "url: https://b.oss-cn-wulanchabu.aliyuncs.com/k?x-oss-security-token=CAIS%2Bq&x-oss-expires=60",
            "url: https://b.oss-cn-wulanchabu.aliyuncs.com/k?x-oss-security-token=***&x-oss-expires=60",
        ),
        ("params: {'security-token': 'CAIS+q/9'}", "params: {'security-token': '***'}"),
        ('headers: {"Authorization": "OSS ak:c2lnbmF0dXJl"}', 'headers: {"Authorization": "***"}'),
        (
            "x-oss-security-token:CAIS+q\nx-oss-date:20261201T190022Z",
            "x-oss-security-token:***\nx-oss-date:20261201T190022Z",
        ),
    ],
)
def test_every_form_oss2_prints_a_token_or_signature_in_is_redacted(line: str, redacted: str) -> None:
    """Signed URLs (V4 and V1 query parameters), header dicts and V4 canonical-request lines."""
    assert redact_oss_secrets(line) == redacted
