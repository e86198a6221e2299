"""The environment files' JSON Schema: generated from the models, shipped in docs, true of the files."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from aliyun_training.environments import environment_schema

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONFIG = PROJECT_DIR / "include" / "config"


@pytest.mark.parametrize("backend", ["local", "dlc", "arena"])
def test_the_documented_schema_is_the_one_the_models_generate(backend: str) -> None:
    shipped = json.loads((PROJECT_DIR / "docs" / "schema" / f"{backend}.schema.json").read_text())

    regenerate = f"python -m aliyun_training schema --backend {backend} > docs/schema/{backend}.schema.json"
    assert shipped == environment_schema(backend), f"regenerate it: {regenerate}"


@pytest.mark.parametrize(
    "path",
    [
        *(CONFIG / f"{backend}.json" for backend in ("local", "dlc", "arena")),
        *sorted((CONFIG / "examples").glob("*.json")),
    ],
    ids=lambda path: path.name,
)
def test_every_shipped_environment_file_is_valid_for_an_editor(path: Path) -> None:
    backend = "arena" if path.name.startswith("arena") else path.stem.split("-")[0]

    jsonschema.validate(json.loads(path.read_text()), environment_schema(backend))


@pytest.mark.parametrize(
    ("backend", "setting"),
    [("dlc", {"priority": 10}), ("dlc", {"quota": "q"}), ("arena", {"namespace": "Kube_System"})],
)
def test_an_editor_flags_what_the_run_would_refuse(backend: str, setting: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(setting, environment_schema(backend))
