"""The alibaba_cloud connection form: what Airflow's UI shows and writes, and what the hook reads from it.

Airflow 3.3 builds the form from the provider's metadata (``provider_info``) without importing the
hook. Here Airflow's own ProvidersManager discovers the provider the way it finds an installed
distribution (pyproject's entry point, in a dist-info directory on ``sys.path``), and the form is
read through the API server's HookMetaService: the field names and the values a saved form holds
are therefore Airflow's, not a copy of ours. The UI writes every field under that name, ``null``
where the field was left empty; the hook must read such a connection as it reads hand-written extras.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from airflow._shared.module_loading import _get_grouped_entry_points
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
from airflow.providers_manager import ProvidersManager

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from fakes.sts import StsEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionHookMetaData

    from fakes.base import RecordedRequest

PROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
AK, SK = "LTAI-connection-form", "connection-form-secret"
ROLE_ARN = "acs:ram::1234567890123456:role/pai-dlc-runner"
REGION = "cn-wulanchabu"
FORM_FIELDS = {
    "access_key_id",
    "access_key_secret",
    "security_token",
    "role_arn",
    "role_session_name",
    "region",
    "protocol",
}


@pytest.fixture(scope="module")
def providers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProvidersManager]:
    """A fresh ProvidersManager that finds this provider as if its wheel were installed."""
    site = tmp_path_factory.mktemp("site")
    dist_info = site / f"aliyun_training_pipelines-{PROJECT['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PROJECT['name']}\nVersion: {PROJECT['version']}\n"
    )
    entry_points = PROJECT["entry-points"]["apache_airflow_provider"]
    (dist_info / "entry_points.txt").write_text(
        "[apache_airflow_provider]\n" + "".join(f"{name} = {ref}\n" for name, ref in entry_points.items())
    )
    sys.path.insert(0, str(site))
    _get_grouped_entry_points.cache_clear()
    try:
        # As HookMetaService does: a manager of its own, leaving the process's singleton alone.
        with (
            mock.patch.object(ProvidersManager, "_instance", None),
            mock.patch.object(ProvidersManager, "_initialized", False),
        ):
            yield ProvidersManager()
    finally:
        sys.path.remove(str(site))
        _get_grouped_entry_points.cache_clear()


@pytest.fixture(scope="module")
def form(providers: ProvidersManager) -> ConnectionHookMetaData:
    """The alibaba_cloud entry of the UI's ``/ui/connections/hook_meta`` (uncached, from ``providers``)."""
    (meta,) = (
        m for m in HookMetaService.hook_meta_data.__wrapped__() if m.connection_type == "alibaba_cloud"
    )
    return meta


def saved_form(form: ConnectionHookMetaData, **filled: str) -> dict[str, Any]:
    """The extras of a connection saved from the form: every field, its default unless ``filled``."""
    return {name: field["value"] for name, field in (form.extra_fields or {}).items()} | filled


def connect(monkeypatch: pytest.MonkeyPatch, extras: dict[str, Any]) -> AlibabaCloudHook:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    )
    return AlibabaCloudHook()


def assumed_roles(sts: StsEmulator) -> list[tuple[str, str]]:
    def params(request: RecordedRequest) -> dict[str, Any]:
        return {**request.query, **(request.body if isinstance(request.body, dict) else {})}

    return [(params(r)["RoleArn"], params(r)["RoleSessionName"]) for r in sts.requests_for("AssumeRole")]


def test_the_form_lists_the_connection_fields_and_hides_the_secrets(
    providers: ProvidersManager, form: ConnectionHookMetaData
) -> None:
    fields = form.extra_fields or {}
    assert set(fields) == FORM_FIELDS
    assert form.hook_class_name == "aliyun_training.hooks.alibaba_cloud.AlibabaCloudHook"
    assert all(field["schema"].get("title") for field in fields.values())
    widgets = {
        info.field_name: info
        for key, info in providers.connection_form_widgets.items()
        if key.startswith("extra__alibaba_cloud__")
    }
    assert {name for name, info in widgets.items() if info.is_sensitive} == {
        "access_key_secret",
        "security_token",
    }
    assert fields["protocol"]["schema"]["enum"] == ["https", "http"]


def test_the_form_hides_the_standard_fields_the_connection_does_not_use(
    providers: ProvidersManager, form: ConnectionHookMetaData
) -> None:
    standard = form.standard_fields
    assert standard is not None
    for name in ("host", "port", "login", "password", "url_schema"):
        field = getattr(standard, name)
        assert field is not None and field.hidden, name
    behaviour = providers.field_behaviours["alibaba_cloud"]
    assert "extra" not in behaviour["hidden_fields"]  # endpoints and retry are JSON
    assert AlibabaCloudHook.get_ui_field_behaviour() == behaviour


@pytest.mark.slow
def test_a_role_from_the_form_is_assumed_as_from_plain_extras(
    monkeypatch: pytest.MonkeyPatch, form: ConnectionHookMetaData
) -> None:
    with StsEmulator({AK: SK}) as sts:
        json_only = {"endpoints": {"sts": sts.endpoint}, "retry": {"max_attempts": 2, "base_delay": 0.01}}
        typed = {
            "access_key_id": AK,
            "access_key_secret": SK,
            "role_arn": ROLE_ARN,
            "role_session_name": "form-session",
            "region": REGION,
            "protocol": "http",
        }
        from_form = connect(monkeypatch, saved_form(form, **typed) | json_only)
        assert from_form.region == REGION
        form_credential = from_form.credential_client().get_credential()
        plain = connect(monkeypatch, typed | json_only)
        plain_credential = plain.credential_client().get_credential()
        assert assumed_roles(sts) == [(ROLE_ARN, "form-session")] * 2
    assert form_credential.access_key_id.startswith("STS.")
    assert form_credential.security_token and plain_credential.security_token


@pytest.mark.slow
def test_fields_left_empty_in_the_form_read_as_unset(
    monkeypatch: pytest.MonkeyPatch, form: ConnectionHookMetaData
) -> None:
    """The form writes ``null`` for an empty field: no STS token, no role, default protocol."""
    extras = saved_form(form, access_key_id=AK, access_key_secret=SK, region=REGION)
    assert extras["security_token"] is None and extras["role_arn"] is None
    credential = connect(monkeypatch, extras | {"protocol": None}).credential_client().get_credential()
    assert (credential.access_key_id, credential.access_key_secret, credential.security_token) == (
        AK,
        SK,
        None,
    )
