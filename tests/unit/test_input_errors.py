"""Each kind of input has its own error, so a caller can tell whom a message is for; all are
SpecError, so every task fails at once on them (retrying cannot fix an input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.declaration import DeclarationError, declare, load_declaration
from aliyun_training.environments import EnvironmentFileError, load_environment
from aliyun_training.form import TriggerFormError, parse_form
from aliyun_training.validation import SpecError

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "cifar10.yaml"


def test_a_bad_trigger_form_raises_the_forms_error() -> None:
    declaration = load_declaration(PIPELINE)
    with pytest.raises(TriggerFormError) as bad_value:
        parse_form({"nodes": 0}, declaration)
    with pytest.raises(TriggerFormError) as refused_override:
        parse_form({"backend": "local", "backend_overrides": {"priority": 3}}, declaration).overrides()

    assert "nodes: 0 is less than the minimum of 1" in str(bad_value.value)
    assert "backend_overrides: ['priority'] cannot be overridden on the local backend" in str(
        refused_override.value
    )
    assert not isinstance(bad_value.value, (EnvironmentFileError, DeclarationError))


def test_a_fraction_for_a_whole_number_raises_the_forms_error_naming_each_field() -> None:
    with pytest.raises(TriggerFormError) as fraction:
        parse_form({"nodes": 1.5, "epochs": 2.5}, load_declaration(PIPELINE))

    assert "nodes: 1.5 is not a whole number (fix: use a whole number from 1 up to 16)" in str(fraction.value)
    assert "epochs: 2.5 is not a whole number (fix: use a whole number, at least 1" in str(fraction.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"\xff", "is not UTF-8 text"),
        (b"[1]", "holds a JSON list, not an object of settings"),
        (b'{"namespace": "Not A Label"}', "namespace: Value error, 'Not A Label' is not a DNS-1123 label"),
    ],
)
def test_a_bad_environment_file_raises_the_files_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "arena.json"
    if content is not None:
        path.write_bytes(content)

    with pytest.raises(EnvironmentFileError) as refused:
        load_environment(path, Backend.ACK.value)

    assert str(path) in str(refused.value)
    assert message.removeprefix("namespace: Value error, ") in str(refused.value)
    assert isinstance(refused.value, SpecError) and not isinstance(refused.value, TriggerFormError)


def test_a_bad_declaration_raises_the_declarations_error(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError) as refused:
        declare({"pipeline": {"dag_id": "x"}}, tmp_path, source="bad.yaml")

    assert "pipeline declaration bad.yaml" in str(refused.value)
    assert not isinstance(refused.value, (EnvironmentFileError, TriggerFormError))
