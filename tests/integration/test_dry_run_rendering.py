"""The dry run read by a person: the README's dry runs as text and as the HTML page, against their JSON."""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aliyun_training import runtime_probe
from aliyun_training.cli import main
from aliyun_training.plan.render import WIDTH
from aliyun_training.plan.render_html import render_html
from tests.integration.test_dry_run import (
    COMMAND_PREFIX,
    PROJECT_DIR,
    dlc_example_with,
    dry_run,
    printed,
    readme_dry_runs,
)

#: The image check's probe as its job's command carries it, and a line of it as a person reads it.
PROBE = base64.b64encode(Path(runtime_probe.__file__).read_bytes()).decode()
PROBE_LINE = 'RDMA_LIBRARIES = ("ibverbs", "rdmacm", "mlx5")'


def text_and_document(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, Any]]:
    return printed(command, capsys, monkeypatch, "text"), dry_run(command, capsys, monkeypatch)


def cost_table(text: str) -> list[list[str]]:
    """The rows of the text's cost table, between its header and its total, cells split on runs of
    at least two spaces (a cell such as ``2 x 8`` holds single spaces)."""
    lines = text.splitlines()
    header = re.compile(r"^  job +nodes x GPUs +timeout +tries +GPU-hours a try +GPU-hours$")
    start = next(i for i, line in enumerate(lines) if header.match(line))
    end = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("total "))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start + 1 : end + 1]]


def overlong(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("command", readme_dry_runs(), ids=lambda c: c.split("--backend ")[1][:60])
def test_the_text_of_each_readme_dry_run_gives_the_ceiling_as_the_sum_of_its_jobs_within_the_width(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text, document = text_and_document(command, capsys, monkeypatch)

    *jobs, total = cost_table(text)
    cost = document["cost"]
    assert [row[0] for row in jobs] == [job["task"] for job in cost["jobs"]]
    for row, job in zip(jobs, cost["jobs"], strict=True):
        size = f"{job['nodes']} x {job['gpus_per_node']}"
        assert row[1:4] == [size, f"{job['timeout_minutes']} min", str(job["tries"])], row
        assert (float(row[4]), float(row[5])) == (job["gpu_hours_per_try"], job["gpu_hours"]), row
    assert total == ["total", str(cost["gpu_hours"])]
    assert round(sum(float(row[5]) for row in jobs), 3) == float(total[1]) == document["gpu_hour_ceiling"]
    assert f"COST CEILING: at most {document['gpu_hour_ceiling']} GPU-hours" in text
    assert f"cost ceiling   at most {document['gpu_hour_ceiling']} GPU-hours" in text, "in the summary too"
    (train,) = [job for job in cost["jobs"] if job["task"] == "train"]
    alone, fleet = (
        train["monitoring"]["requests_per_minute_alone"],
        train["monitoring"]["requests_per_minute_in_fleet"],
    )
    said = " ".join(text.split())
    assert (
        f"monitoring {alone:g} API requests a minute while it runs, {fleet:g} when the triggerer lists it"
        in said
        if alone
        else "monitoring no API requests: the job's files are read" in said
    )
    headings = [line.strip() for line in text.splitlines() if line.startswith("  request: ")]
    assert [h.removeprefix("request: ").split(":")[0] for h in headings] == [
        f"{r['service']} {r['action']}" for r in document["requests"]
    ]
    # What is left over the width is a token no wrap can split without changing what a reader
    # copies: a checkpoint directory, a CPFS URI, an image reference, after its key or its "- ".
    for line in overlong(text):
        *before, token = line.split()
        assert len(before) <= 1 and len(token) > WIDTH // 2, line


@pytest.mark.parametrize("environment", ["examples/dlc.json", "examples/arena.json"])
def test_the_image_checks_inline_script_is_shown_decoded_and_never_as_its_base64(
    environment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if f"{environment} " in c]

    text, document = text_and_document(command, capsys, monkeypatch)

    assert PROBE in json.dumps(document["requests"]), "the job carries the probe as base64"
    assert PROBE[:40] not in text and not re.search(r"[A-Za-z0-9+/]{120,}", text)
    assert 'python3 -c "$(echo <base64 of script 1> | base64 -d)"' in text
    assert text.count("script 1, decoded from the base64 in the body:") == 1
    assert re.search(rf"^ +\d+ \| {re.escape(PROBE_LINE)}$", text, re.MULTILINE)
    if environment == "examples/arena.json":  # arena's ConfigMap repeats the job's command
        assert "script 1: as decoded above" in text


def test_the_text_lists_each_preflight_finding_with_its_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json " in c]
    monkeypatch.delenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))

    text = printed(command.removesuffix(" --no-preflight"), capsys, monkeypatch, "text")

    assert "  preflight   1 PASS, 0 WARN, 4 FAIL: a FAIL stops the run before it starts a job" in text
    for check in ("network", "quota", "dlc_access", "ram_role"):
        finding = (
            rf"^  FAIL +{check} +connection 'alibaba_cloud_default' is not defined\n +fix: add it in Admin"
        )
        assert re.search(finding, text, re.MULTILINE), check
    assert re.search(r"^  PASS +region +cn-wulanchabu offers Lingjun resources$", text, re.MULTILINE)
    assert "image       example-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train:1.0: used as it is" in text


def test_the_text_says_what_staging_would_copy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]
    version = tmp_path / "object-store" / "cifar10" / "2026-11-22"
    generator = PROJECT_DIR / "include" / "training" / "make_synthetic_cifar10.py"
    subprocess.run(
        [sys.executable, str(generator), "--out", str(version), "--train", "8", "--test", "4"], check=True
    )
    monkeypatch.setenv("ALIYUN_TRAINING_LOCAL_ROOT", str(tmp_path))
    files = [path for path in version.rglob("*") if path.is_file()]

    text = printed(command.removesuffix(" --no-preflight"), capsys, monkeypatch, "text")

    size = sum(path.stat().st_size for path in files)
    checks = text.split("\nCHECKS\n")[1]
    staging = " ".join(checks[checks.index("  staging ") : checks.index("\n  image ")].split())
    assert (
        staging.startswith(f"staging {len(files)} files (")
        and f"{size} bytes) at file://{version}/;" in staging
    )
    assert f"; {len(files)} files (" in staging and f"to copy to {tmp_path}/cpfs/" in staging


def test_the_default_is_the_text_and_json_is_asked_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]
    monkeypatch.chdir(PROJECT_DIR)

    assert main(shlex.split(command.removeprefix(COMMAND_PREFIX.removesuffix("plan ")))) == 0

    out = capsys.readouterr().out
    assert out.startswith("Dry run on local: cifar10 version 2026-11-22\nNothing was created")
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_the_page_shows_the_text_escapes_what_users_typed_and_keeps_each_body_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An environment file refuses markup in an image name now; the page still escapes whatever a
    # body carries, so the hostile value is put into the plan the page renders.
    typed = "registry.example.com/ml/train:1<script>alert(1)</script>"
    command = dlc_example_with(tmp_path, image="registry.example.com/ml/train:1")
    document = json.loads(printed(command, capsys, monkeypatch, "json"))
    hostile = json.loads(json.dumps(document).replace("registry.example.com/ml/train:1", typed))

    escaped = render_html(hostile)
    page = printed(command, capsys, monkeypatch, "html")

    assert "<script" not in escaped.lower() and typed not in escaped
    assert "registry.example.com/ml/train:1&lt;script&gt;alert(1)&lt;/script&gt;" in escaped
    assert "<td>check_rdma</td>" in page and "at most 65.5 GPU-hours" in page
    assert PROBE_LINE.replace('"', "&quot;") in page, "the probe, decoded"
    # One body each: the three jobs up to training, the evaluation job, and the five registry calls
    # (the candidate's run, its logged model, the version, the challenger and champion aliases).
    assert page.count("<details><summary>JSON body, as sent</summary>") == 9
    assert PROBE in page, "the body as sent, folded away"


def test_the_dry_run_shows_the_evaluation_job_the_registry_calls_and_the_gate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]

    text, document = text_and_document(command, capsys, monkeypatch)

    assert document["plan"]["artifacts"]["promotion"]["metric"] == "test_accuracy"
    summary = " ".join(text.split("\nSUMMARY\n")[1].split("\n\n")[0].split())
    assert (
        "promotion becomes the champion if test_accuracy is higher than the champion's by at least "
        "0.005, with test_loss <= 3; with no champion yet, the first model is promoted; a backfill "
        "never promotes"
    ) in summary
    assert "evaluation one job (2 CPU, 4 GiB) scores the new model and the champion on the version" in summary
    assert "registry MLflow model registry at sqlite:///" in summary
    # The evaluation job's request as its task sends it, then what publishing and promoting ask
    # of the registry, in order.
    tail = [(r["task"], r["action"]) for r in document["requests"]][-6:]
    assert tail == [
        ("evaluate", "start processes"),
        ("publish_artifacts", "create_run"),
        ("publish_artifacts", "create_logged_model"),
        ("publish_artifacts", "create_model_version"),
        ("publish_artifacts", "set_registered_model_alias"),
        ("promote", "set_registered_model_alias"),
    ]
    (evaluate,) = [r for r in document["requests"] if r["task"] == "evaluate"]
    assert "python evaluate_cifar10.py" in json.dumps(evaluate["body"])
    assert "CANDIDATE_DIR" in evaluate["note"]


def test_a_deployment_keeping_the_plain_aliases_plans_to_move_them_with_its_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[aliyun_training] plain_registry_aliases`` reaches the plan: the run's registry settings
    and the alias requests publishing and promoting send."""
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__PLAIN_REGISTRY_ALIASES", "True")
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", "ml-prod")
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]

    _, document = text_and_document(command, capsys, monkeypatch)

    assert document["plan"]["artifacts"]["registry"]["plain_aliases"] is True
    aliases = [(r["task"], r["body"]["alias"]) for r in document["requests"] if "alias" in r["body"]]
    assert aliases == [
        ("publish_artifacts", "challenger-ml-prod"),
        ("publish_artifacts", "challenger"),
        ("promote", "champion-ml-prod"),
        ("promote", "champion"),
    ]
