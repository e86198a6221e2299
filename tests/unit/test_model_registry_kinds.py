"""The model registry kinds: every record's parts resolve to what their places expect, the settings,
clients and dry-run requests come from the record, and nothing outside ``model_registry/`` switches
on a kind's name."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

from aliyun_training.model_registry import open_registry, planned_registry_calls, resolve_registry_settings
from aliyun_training.model_registry.base import LINEAGE, RegistryInputs, RegistrySettings
from aliyun_training.model_registry.kinds import (
    DEFAULT_MODEL_REGISTRY,
    MODEL_REGISTRIES,
    ModelRegistryKind,
    check_declared_settings,
    model_registry_record,
)
from aliyun_training.model_registry.mlflow import MlflowRegistry
from aliyun_training.validation import SpecError

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "aliyun_training"
#: A kind's name as a string literal: a switch on the kind (or a second declaration of its type).
KIND_NAME = re.compile(r"[\"'](mlflow|pai)[\"']")
#: The local root's folder of the embedded MLflow store is named after MLflow, not switched on.
FOLDER_NAME = {"settings.py": ['return self.root / "mlflow"']}


def _inputs(tmp_path: Path, environment: object = None, tracking_uri: str | None = None) -> RegistryInputs:
    return RegistryInputs(
        model="digits",
        tracking_uri=tracking_uri,
        embedded_store=tmp_path / "mlflow",
        environment=environment,
        backend="local",
        environment_file="local.json",
    )


@pytest.mark.parametrize("record", MODEL_REGISTRIES, ids=lambda record: record.name)
def test_every_part_of_a_record_resolves_to_what_its_place_expects(record: object) -> None:
    assert isinstance(record, type(MODEL_REGISTRIES[0]))
    assert list(inspect.signature(record.part("settings")).parameters) == ["inputs"]
    assert list(inspect.signature(record.part("planned_requests")).parameters) == ["settings", "installation"]
    client = record.part("client")
    assert inspect.isclass(client)
    for call in ("register", "champion", "promote"):
        assert callable(getattr(client, call, None)), (client, call)
    assert record.declared_settings <= {"tracking_uri"}, "the settings the declaration's block has"


def test_the_records_name_every_kind_of_the_one_type_once() -> None:
    assert tuple(record.name for record in MODEL_REGISTRIES) == get_args(ModelRegistryKind)
    assert DEFAULT_MODEL_REGISTRY in get_args(ModelRegistryKind)
    for record in MODEL_REGISTRIES:
        assert model_registry_record(record.name) is record


def test_no_module_outside_the_model_registry_switches_on_a_registry_kind() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("model_registry/"):
            continue
        allowed = FOLDER_NAME.get(relative, [])
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if KIND_NAME.search(line) and not any(text in line for text in allowed):
                found.append(f"{relative}:{number}: {line.strip()}")

    assert not found, "switch on the kind's record instead:\n" + "\n".join(found)


def test_a_setting_of_another_kind_is_refused_naming_the_kind_that_takes_it() -> None:
    check_declared_settings("mlflow", {"tracking_uri": "http://mlflow.internal"})
    check_declared_settings("pai", {"tracking_uri": None})

    with pytest.raises(ValueError, match=r"^tracking_uri is an MLflow setting") as refused:
        check_declared_settings("pai", {"tracking_uri": "http://mlflow.internal"})

    assert str(refused.value) == "tracking_uri is an MLflow setting (fix: remove it, or use kind: mlflow)"


def test_each_kind_resolves_its_settings_and_names_where_it_is(tmp_path: Path) -> None:
    environment = SimpleNamespace(workspace_id="ws-1", region="cn-shanghai", alibaba_cloud_conn_id="ali")

    embedded = resolve_registry_settings("mlflow", _inputs(tmp_path))
    served = resolve_registry_settings("mlflow", _inputs(tmp_path, tracking_uri="http://mlflow.internal"))
    pai = resolve_registry_settings("pai", _inputs(tmp_path, environment))

    assert embedded.tracking_uri == f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"
    assert served.where == "MLflow model registry at http://mlflow.internal"
    assert (pai.workspace_id, pai.region, pai.alibaba_cloud_conn_id) == ("ws-1", "cn-shanghai", "ali")
    assert pai.where == "PAI model registry of workspace ws-1 (cn-shanghai)"
    with pytest.raises(SpecError, match=r"^registry\.kind: .* local runs of local\.json do not name"):
        resolve_registry_settings("pai", _inputs(tmp_path))


def test_the_record_opens_its_own_client(tmp_path: Path) -> None:
    settings = resolve_registry_settings("mlflow", _inputs(tmp_path))

    registry = open_registry(settings, "team-a")

    assert isinstance(registry, MlflowRegistry) and registry.champion_aliases == ("champion-team-a",)


def test_the_planned_requests_name_what_each_client_sends() -> None:
    mlflow = planned_registry_calls(
        RegistrySettings(kind="mlflow", model="digits", tracking_uri="http://mlflow.internal"), "team-a"
    )
    pai = planned_registry_calls(
        RegistrySettings(kind="pai", model="digits", workspace_id="ws-1", region="cn-shanghai"), "team-a"
    )

    assert [(c.action, c.body.get("alias")) for c in mlflow.register] == [
        ("create_run", None),
        ("create_logged_model", None),
        ("create_model_version", None),
        ("set_registered_model_alias", "challenger-team-a"),
    ]
    assert [(c.action, c.body["alias"]) for c in mlflow.promote] == [
        ("set_registered_model_alias", "champion-team-a")
    ]
    assert ", ".join(LINEAGE) in mlflow.register[0].body["tags"] and mlflow.register[2].body["tags"]
    (version,) = pai.register
    assert version.body["Labels"] == ", ".join(LINEAGE) and version.body["ApprovalStatus"] == "Pending"
    assert version.body["WorkspaceId"] == "ws-1"
    (moved,) = pai.promote
    assert moved.body["Labels"] == "champion=true" and moved.body["ApprovalStatus"] == "Approved"
    assert "installation team-a" in moved.note
