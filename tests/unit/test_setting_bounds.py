"""Each size and timeout has one definition of its bounds, which the spec, the declaration, the
trigger form's model and its Params' schema all read: what one refuses, every one refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aliyun_training.declaration import PipelineDeclaration, load_declaration
from aliyun_training.form import form_schema, parse_form
from aliyun_training.spec import MAX_NODES, MAX_TIMEOUT_MINUTES, TrainingJobSpec
from aliyun_training.validation import SpecError

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "cifar10.yaml"


@pytest.fixture(scope="module")
def declaration() -> PipelineDeclaration:
    return load_declaration(PIPELINE)


def _refused_by_spec(**fields: Any) -> bool:
    try:
        TrainingJobSpec.parse({"command": "python train.py", **fields})
    except SpecError:
        return True
    return False


def _refused_by_form(declaration: PipelineDeclaration, **values: Any) -> bool:
    try:
        parse_form(values, declaration)
    except SpecError:
        return True
    return False


def _refused_by_declaration(declaration: PipelineDeclaration, block: str, **values: Any) -> bool:
    data = declaration.model_dump(mode="json", exclude={"source", "base_dir"}, exclude_none=True)
    data[block] = {**data.get(block, {}), **values}
    try:
        type(declaration).model_validate(data)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize(
    ("minutes", "refused"),
    [(0, True), (1, False), (MAX_TIMEOUT_MINUTES, False), (MAX_TIMEOUT_MINUTES + 1, True)],
)
def test_every_place_a_timeout_is_set_takes_the_same_bounds(
    declaration: PipelineDeclaration, minutes: int, refused: bool
) -> None:
    assert form_schema(declaration)["timeout_minutes"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_TIMEOUT_MINUTES,
    }
    assert _refused_by_form(declaration, timeout_minutes=minutes) is refused
    assert _refused_by_spec(timeout_minutes=minutes) is refused
    assert _refused_by_declaration(declaration, "resources", timeout_minutes=minutes) is refused


@pytest.mark.parametrize(
    ("nodes", "refused"), [(0, True), (1, False), (MAX_NODES, False), (MAX_NODES + 1, True)]
)
def test_every_place_a_node_count_is_set_takes_the_same_bounds(
    declaration: PipelineDeclaration, nodes: int, refused: bool
) -> None:
    assert _refused_by_spec(nodes=nodes) is refused
    assert _refused_by_declaration(declaration, "resources", nodes=nodes, max_nodes=max(nodes, 1)) is refused
    # The form's bound is the pipeline's max_nodes, itself a node count.
    schema = form_schema(declaration)["nodes"]
    assert schema["minimum"] == 1 and schema["maximum"] == declaration.resources.max_nodes <= MAX_NODES
    assert _refused_by_form(declaration, nodes=schema["maximum"] + 1)
    assert not _refused_by_form(declaration, nodes=schema["maximum"])
