"""The backend catalog: every record's parts resolve to what their places expect, and nothing
outside the catalog and the backends' own modules switches on a backend's name."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from aliyun_training.backend_catalog import BACKENDS, Backend, backend_record, preflight_groups
from aliyun_training.environments import overridable_settings
from aliyun_training.form import OVERRIDABLE
from aliyun_training.image.jobs import BANDWIDTH_TEST_TOOLS
from aliyun_training.operators.preflight import CHECK_GROUPS
from aliyun_training.runtime_probe import BANDWIDTH_TOOLS
from aliyun_training.spec import Framework
from aliyun_training.validation import SpecError

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "aliyun_training"
#: A backend's own modules: its package, its planner, its preflight checks, and the catalog.
OWN_MODULES = re.compile(
    r"^(backend_catalog\.py|backends/.*|plan/(local|dlc|ack)\.py|preflight/(local|dlc|ack)\.py)$"
)
#: Switching on a backend's name: an enum member, or the name as a string literal.
BACKEND_NAME = re.compile(r"Backend\.(LOCAL|DLC|ACK)\b|[\"'](local|dlc|arena)[\"']")
#: The DLC service's name in the Alibaba Cloud hooks, their rate limits and the provider's connection
#: form (an API product, not the backend).
SERVICE_NAME_MODULES = {"hooks/alibaba_cloud.py", "hooks/dlc.py", "hooks/rate_limit.py", "provider_info.py"}


@pytest.mark.parametrize("record", BACKENDS, ids=lambda record: record.name.value)
def test_every_part_of_a_record_resolves_to_what_its_place_expects(record: object) -> None:
    assert isinstance(record, type(BACKENDS[0]))
    model = record.part("environment_model")
    assert issubclass(model, BaseModel) and "allowed_pipelines" in model.model_fields
    for part in ("planner", "dataset_sources", "backend_config"):
        assert callable(record.part(part)), part
    assert list(inspect.signature(record.part("planner")).parameters) == ["request"]
    backend_class = record.part("backend_class")
    assert inspect.isclass(backend_class)
    for call in ("check", "submit", "planned_requests", "status", "logs", "stop", "classify", "launched"):
        assert callable(getattr(backend_class, call, None)), (backend_class, call)
    assert record.frameworks <= {framework.value for framework in Framework}
    assert bool(record.frameworks) == bool(record.frameworks_note)
    assert set(record.preflight_groups) <= set(CHECK_GROUPS)


def test_the_records_name_every_backend_once_and_the_form_derives_their_overrides() -> None:
    assert [record.name for record in BACKENDS] == list(Backend)
    assert preflight_groups() == CHECK_GROUPS == ("machine", "network", "quota", "permissions", "cluster")
    for record in BACKENDS:
        assert backend_record(record.name.value) is record
        assert OVERRIDABLE[record.name] == frozenset(overridable_settings(record.part("environment_model")))
    assert OVERRIDABLE[Backend.LOCAL] == frozenset(), "the local backend runs on the worker: no overrides"
    assert "priority" in OVERRIDABLE[Backend.DLC] and "priority" not in OVERRIDABLE[Backend.ACK]


def test_the_image_probe_looks_for_every_program_a_backends_bandwidth_test_runs() -> None:
    tests = {record.bandwidth_test for record in BACKENDS} - {None}

    assert tests == set(BANDWIDTH_TEST_TOOLS)
    assert {tool for tools in BANDWIDTH_TEST_TOOLS.values() for tool in tools} == set(BANDWIDTH_TOOLS)


def test_an_unknown_backend_is_refused_naming_the_ones_there_are() -> None:
    with pytest.raises(SpecError) as refused:
        backend_record("sagemaker")

    assert str(refused.value) == (
        "backend: 'sagemaker' is not available in this installation (fix: use one of: local, dlc, arena)"
    )


def test_no_module_outside_the_catalog_and_the_backends_own_switches_on_a_backend_name() -> None:
    switching = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not OWN_MODULES.match(str(path.relative_to(PACKAGE)))
        and str(path.relative_to(PACKAGE)) not in SERVICE_NAME_MODULES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BACKEND_NAME.search(line)
    ]

    assert switching == []


@pytest.mark.slow
def test_checking_any_backends_spec_imports_no_airflow_and_no_cloud_sdk() -> None:
    """The spec's rules of each backend (frameworks, an image) come from its record, below the
    layers that import Airflow: validating a spec loads no hook, SDK or Airflow module (the staging
    pod has none)."""
    script = (
        "import sys\n"
        "from aliyun_training.spec import TrainingJobSpec\n"
        "for backend in ('local', 'dlc', 'arena'):\n"
        "    TrainingJobSpec.parse({'backend': backend, 'command': 'x', 'image': 'r/i:1'})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'alibabacloud_pai_dlc20201203', "
        "'kubernetes', 'oss2'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
    )

    assert result.stdout.strip() == "[]", result.stdout
