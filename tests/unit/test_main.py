"""``python -m aliyun_training``: the package runs its command line and exits with its status.

Run in this process as ``-m`` runs it (``runpy``), with the command line in ``sys.argv``.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]


def run_package(monkeypatch: pytest.MonkeyPatch, *arguments: str) -> int:
    """``python -m aliyun_training *arguments``: its exit status."""
    monkeypatch.setattr(sys, "argv", ["python -m aliyun_training", *arguments])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("aliyun_training", run_name="__main__")
    assert isinstance(exited.value.code, int)
    return exited.value.code


def test_the_schema_command_prints_the_environment_files_json_schema(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_package(monkeypatch, "schema", "--backend", "dlc")

    schema = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {"quota_id", "workspace_id", "staging"} <= set(schema["properties"])


def test_a_dry_run_prints_exactly_one_json_document_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], local_root: Path
) -> None:
    code = run_package(
        monkeypatch,
        "plan",
        "--pipeline",
        str(PROJECT_DIR / "pipelines" / "cifar10.yaml"),
        "--backend",
        "local",
        "--dataset-version",
        "2026-11-22",
        "--no-preflight",
        "--format",
        "json",
        "--environment-dir",
        str(PROJECT_DIR / "include" / "config"),
    )

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (document["backend"], document["dataset_version"]) == ("local", "2026-11-22")
    assert (
        document["plan"]["staging"]["source_uri"] == f"file://{local_root}/object-store/cifar10/2026-11-22/"
    )


def test_a_bad_value_exits_2_with_the_error_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_package(monkeypatch, "plan", "--backend", "local", "--no-preflight")

    printed = capsys.readouterr()
    assert (code, printed.out) == (2, "")
    assert printed.err.startswith("error: --dataset-version: the newest landed version is found by listing")
