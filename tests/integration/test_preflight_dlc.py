"""preflight.dlc: one ListJobs call proves the connection's endpoint, keys and permission, and each
way it fails says what to fix. PAI-DLC is the emulator, reached through ``alibaba_cloud_default``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.backends.dlc.backend import DlcBackend
from aliyun_training.findings import Verdict
from aliyun_training.preflight.dlc import check_dlc_access
from fakes.cloud import use_alibaba_connection
from fakes.dlc import DlcEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "LTAI-preflight-dlc", "preflight-dlc-secret"
WHERE = "workspace ws-9 via connection alibaba_cloud_default"


@pytest.fixture
def dlc() -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        yield emulator
        assert emulator.internal_errors == []


def test_listing_jobs_in_the_workspace_passes(dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    use_alibaba_connection(monkeypatch, {"dlc": dlc.endpoint}, AK, SK)

    finding = check_dlc_access(DlcBackend(workspace_id="ws-9"))

    assert (finding.check, finding.verdict, finding.found) == (
        "dlc_access",
        Verdict.PASS,
        f"ListJobs allowed in {WHERE}",
    )
    assert [request.action for request in dlc.requests] == ["ListJobs"]


@pytest.mark.parametrize(
    ("access_key_id", "secret", "code", "fix"),
    [
        (
            "LTAI-unknown",
            SK,
            "InvalidAccessKeyId.NotFound",
            "fix access_key_id in the alibaba_cloud connection",
        ),
        (
            AK,
            "a-wrong-secret",
            "SignatureDoesNotMatch",
            "fix access_key_secret in the alibaba_cloud connection",
        ),
    ],
)
def test_keys_the_service_refuses_fail_naming_the_connection_field_to_fix(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch, access_key_id: str, secret: str, code: str, fix: str
) -> None:
    use_alibaba_connection(monkeypatch, {"dlc": dlc.endpoint}, access_key_id, secret)

    finding = check_dlc_access(DlcBackend(workspace_id="ws-9"))

    assert (finding.verdict, finding.fix) == (Verdict.FAIL, fix)
    assert finding.found.startswith(f"{WHERE}: ") and code in finding.found, finding.found


def test_a_connection_that_is_not_defined_fails_with_how_to_define_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_B_CLOUD", raising=False)

    finding = check_dlc_access(DlcBackend(alibaba_cloud_conn_id="team_b_cloud"))

    assert (finding.check, finding.verdict) == ("dlc_access", Verdict.FAIL)
    assert "team_b_cloud" in finding.found
    assert "AIRFLOW_CONN_TEAM_B_CLOUD" in finding.fix, finding
