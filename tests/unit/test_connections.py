"""connections: the default connection ids, and the fix an error gives for a connection that is missing.

The fix names an ``AIRFLOW_CONN_`` variable; these tests check that Airflow really finds a
connection under the variable the fix names, so the advice works as written.
"""

from __future__ import annotations

import json

import pytest
from airflow.sdk import BaseHook

from aliyun_training.connections import (
    ALIBABA_CLOUD_DEFAULT_CONN_ID,
    KUBERNETES_DEFAULT_CONN_ID,
    REGISTRY_DEFAULT_CONN_ID,
    define_connection_fix,
)


def test_the_fix_names_the_ui_type_the_environment_variable_and_the_setting() -> None:
    fix = define_connection_fix("team_a_cloud", "'Alibaba Cloud'", "alibaba_cloud_conn_id")

    assert fix == (
        "add it in Admin > Connections with the type 'Alibaba Cloud', or as the environment variable "
        "AIRFLOW_CONN_TEAM_A_CLOUD, or name another connection in the environment file's "
        "alibaba_cloud_conn_id"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("conn_id", "conn_type"),
    [
        (ALIBABA_CLOUD_DEFAULT_CONN_ID, "alibaba_cloud"),
        (KUBERNETES_DEFAULT_CONN_ID, "kubernetes"),
        (REGISTRY_DEFAULT_CONN_ID, "docker"),
        ("team_a_cloud", "alibaba_cloud"),
    ],
)
def test_airflow_finds_a_connection_under_the_variable_the_fix_names(
    monkeypatch: pytest.MonkeyPatch, conn_id: str, conn_type: str
) -> None:
    variable = define_connection_fix(conn_id, conn_type, "a_setting").split("environment variable ")[1]
    variable = variable.split(",")[0]
    monkeypatch.setenv(variable, json.dumps({"conn_type": conn_type, "extra": {"region": "cn-wulanchabu"}}))

    found = BaseHook.get_connection(conn_id)

    assert (found.conn_type, found.extra_dejson) == (conn_type, {"region": "cn-wulanchabu"})
