"""The trigger form: what a person reads beside each field of a declared pipeline's form, and what the
UI and the API do with a value out of its bounds."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from airflow.exceptions import ParamValidationError
from airflow.serialization.serialized_objects import DagSerialization

from aliyun_training.declaration import PipelineDeclaration, declare
from aliyun_training.params import run_params
from aliyun_training.pipelines import training_pipeline
from fakes.environment_files import CIFAR10

#: What Airflow 3.3's trigger form reads of a number field's schema (FieldNumber.tsx: the input's
#: ``min`` and ``max``), and clamps a typed value to when the input loses focus.
UI_NUMBER_LIMITS = {"minimum", "maximum"}


def declared(**version: Any) -> PipelineDeclaration:
    """The CIFAR-10 declaration with its dataset's version block set to ``version``."""
    data = yaml.safe_load(CIFAR10.read_text())
    data["dataset"]["version"] = {**data["dataset"].get("version", {}), **version}
    return declare(data, base_dir=CIFAR10.parent)


@pytest.mark.parametrize(("version_format", "example"), [("%Y-%m-%d", "2026-11-22"), ("%Y%m%d", "20261122")])
def test_the_version_help_gives_an_example_in_the_pipelines_own_format(
    version_format: str, example: str
) -> None:
    description = run_params(declared(format=version_format))["dataset_version"].description or ""

    assert f"e.g. {example} " in description
    assert f"its logical date as {version_format}" in description


def test_a_pipeline_that_trains_on_the_newest_version_shows_no_date() -> None:
    description = run_params(declared(**{"from": "newest"}))["dataset_version"].description or ""

    assert "e.g." not in description and "the name of its folder in the source" in description


def test_no_section_of_the_form_is_named_like_airflows_own_advanced_options() -> None:
    sections = {param.schema.get("section") for param in run_params(declared()).values()}

    assert "Emergency switches" in sections
    assert not any(str(section).lower().startswith("advanced") for section in sections)


def test_no_field_gives_the_forms_number_inputs_limits_to_clamp_a_typed_value_to() -> None:
    params = run_params(declared())

    bounded = {name for name, param in params.items() if "allOf" in param.schema}
    assert {"nodes", "gpus_per_node", "epochs", "batch_size", "timeout_minutes", "max_gpu_hours"} <= bounded
    assert [name for name, param in params.items() if UI_NUMBER_LIMITS & set(param.schema)] == []


def test_the_help_under_a_bounded_field_says_its_bounds() -> None:
    params = run_params(declared())

    assert params["nodes"].description == (
        "Number of nodes; each runs the command once. Use a whole number from 1 up to 16."
    )
    assert (params["epochs"].description or "").endswith(" Use a whole number, at least 1 and at most 100.")
    assert (params["max_gpu_hours"].description or "").endswith(" a number above 0 up to 1000000.")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("conf", "refusal"),
    [
        ({"nodes": 1000}, "Invalid input for param nodes: 1000 is greater than the maximum of 16\n"),
        ({"epochs": -1}, "Invalid input for param epochs: -1 is less than the minimum of 1\n"),
        ({"nodes": 1.5}, "Invalid input for param nodes: 1.5 is not of type 'integer'\n"),
    ],
)
def test_the_api_refuses_a_value_out_of_bounds_naming_the_param_the_bound_and_the_fix(
    conf: dict[str, Any], refusal: str
) -> None:
    """As the API server creates a triggered run (SerializedDAG.create_dagrun), from the DAG as the
    scheduler stored it: its params with the conf merged in, validated."""
    dag = DagSerialization.from_dict(DagSerialization.to_dict(training_pipeline(declared())))

    with pytest.raises(ParamValidationError) as refused:
        dag.params.deep_merge(conf).validate()

    assert str(refused.value).startswith(refusal)
    assert "'description': 'use a whole number" in str(refused.value), "the fix, quoted with the schema"
