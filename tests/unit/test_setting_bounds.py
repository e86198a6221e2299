"""Each size and timeout has one definition of its bounds, which the spec, the declaration, the
environment files, the trigger form's model and its Params' schema all read: what one refuses,
every one refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aliyun_training.declaration import PipelineDeclaration, load_declaration
from aliyun_training.environments import AckEnvironment, CloudEnvironment, DlcEnvironment
from aliyun_training.form import form_schema, overrides_schema, parse_form
from aliyun_training.spec import (
    MAX_CPUS_PER_NODE,
    MAX_MEMORY_GIB_PER_NODE,
    MAX_NODES,
    MAX_TIMEOUT_MINUTES,
    TrainingJobSpec,
)
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


#: A node's resources as the spec names them, and as the environment files and the form's
#: backend_overrides do.
NODE_RESOURCES = [
    ("cpu", "cpu_per_node", 1, MAX_CPUS_PER_NODE),
    ("memory_gib", "memory_gib_per_node", 1, MAX_MEMORY_GIB_PER_NODE),
    ("shared_memory_gib", "shared_memory_gib_per_node", 0, MAX_MEMORY_GIB_PER_NODE),
]


@pytest.mark.parametrize(("spec_field", "setting", "least", "most"), NODE_RESOURCES)
@pytest.mark.parametrize("environment", [DlcEnvironment, AckEnvironment])
def test_every_place_a_nodes_cpus_and_memory_are_set_takes_the_same_bounds(
    declaration: PipelineDeclaration,
    environment: type[CloudEnvironment],
    spec_field: str,
    setting: str,
    least: int,
    most: int,
) -> None:
    for value, refused in [(least - 1, True), (least, False), (most, False), (most + 1, True)]:
        assert _refused_by_spec(**{spec_field: value}) is refused, (spec_field, value)
        assert _refused_by_environment(environment, **{setting: value}) is refused, (setting, value)
        assert _refused_by_form(declaration, backend="dlc", backend_overrides={setting: value}) is refused, (
            setting,
            value,
        )
    schema = overrides_schema()["properties"][setting]
    assert (schema["minimum"], schema["maximum"]) == (least, most)


def _refused_by_environment(environment: type[CloudEnvironment], **settings: Any) -> bool:
    try:
        environment.model_validate(settings)
    except ValueError:
        return True
    return False
