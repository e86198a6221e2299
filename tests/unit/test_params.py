"""The trigger form's texts: what a person reads beside each field of a declared pipeline's form."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aliyun_training.declaration import PipelineDeclaration, declare
from aliyun_training.params import run_params
from fakes.environment_files import CIFAR10


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
