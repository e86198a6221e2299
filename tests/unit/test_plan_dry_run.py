"""plan.dry_run: the document of a dry run, with its read-only checks, and no platform asked without them.

Local runs read a version of the test's own object store, so the staging check's listing is real;
the DLC runs (the ``dlc_plan`` fixture) mount a fixed dataset and name their image, or build it.
"""

from __future__ import annotations

import shutil
import socket
from typing import TYPE_CHECKING

import pytest

from aliyun_training.plan.cost import cost_ceiling
from aliyun_training.plan.dry_run import dry_run_document, image_check, staging_check
from aliyun_training.plan.models import RunPlan
from aliyun_training.staging.engine import stage_dataset
from aliyun_training.staging.opening import open_source
from fakes.environment_files import resolve_configured

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

VERSION = "2026-11-22"
NOT_CHECKED = {"skipped": "not checked: the dry run ran without preflight"}
REPOSITORY = "ml-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train"
ACR_BUILD = {
    "mode": "acr",
    "repository": REPOSITORY,
    "acr": {"instance_id": "cri-abc123", "repo_id": "crr-def456", "build_rule_id": "crbr-789"},
}


def job_name(task_id: str) -> str:
    return f"dry-run-{task_id}"


def local_run(tmp_path: Path) -> RunPlan:
    """A local run of VERSION, which has landed in the object store with one 100-byte file."""
    plan = resolve_configured(tmp_path, dataset_version=VERSION)
    (tmp_path / "object-store" / "cifar10" / VERSION / "train.npz").write_bytes(b"x" * 100)
    return plan


def test_without_preflight_the_document_is_the_plan_its_requests_and_cost_and_nothing_is_checked(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    plan = dlc_plan()

    document = dry_run_document(plan, job_name, preflight=None, check_platform=False)

    assert (document["backend"], document["dataset_version"]) == ("dlc", VERSION)
    assert RunPlan.model_validate(document["plan"]) == plan, "the plan round-trips, as XCom carries it"
    assert document["cost"] == cost_ceiling(plan)
    assert document["gpu_hour_ceiling"] == document["cost"]["gpu_hours"]
    assert document["checks"] == {"preflight": NOT_CHECKED, "staging": NOT_CHECKED, "image": NOT_CHECKED}
    tasks = [request["task"] for request in document["requests"]]
    assert tasks.index("verify_image") < tasks.index("train"), "in the order the stages send them"
    train = next(r for r in document["requests"] if r["task"] == "train")
    assert (train["service"], train["action"]) == ("dlc", "CreateJob")
    assert train["body"]["DisplayName"] == "dry-run-train", "the job is named as the run would name it"


def test_the_preflight_report_given_is_the_documents_preflight_check(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    report = {"findings": [{"check": "quota", "verdict": "FAIL", "found": "no room", "fix": "wait"}]}

    document = dry_run_document(dlc_plan(), job_name, preflight=report, check_platform=False)

    assert document["checks"]["preflight"] == report


def test_the_staging_check_lists_what_staging_would_copy_and_nothing_once_it_is_staged(
    tmp_path: Path,
) -> None:
    plan = local_run(tmp_path)
    assert plan.staging is not None
    target = str(tmp_path / "cpfs" / "datasets" / "cifar10" / VERSION)
    source = plan.staging.source_uri

    before = staging_check(plan)
    stage_dataset(open_source(source), plan.staging.target_root, VERSION)
    after = staging_check(plan)

    listed = {"source_uri": source, "target": target, "files": 2, "bytes": 100}
    assert before == {**listed, "files_to_copy": 2, "bytes_to_copy": 100}, "train.npz and _SUCCESS"
    assert after == {**listed, "files_to_copy": 0, "bytes_to_copy": 0}


def test_a_source_that_cannot_be_listed_is_the_staging_checks_error_not_the_dry_runs(tmp_path: Path) -> None:
    plan = local_run(tmp_path)
    shutil.rmtree(tmp_path / "object-store" / "cifar10" / VERSION)

    document = dry_run_document(plan, job_name, preflight=None, check_platform=True)

    assert set(document["checks"]["staging"]) == {"error"}
    assert VERSION in document["checks"]["staging"]["error"]


def test_a_run_that_stages_nothing_or_builds_nothing_asks_no_platform(
    dlc_plan: Callable[..., RunPlan], tmp_path: Path
) -> None:
    plan = dlc_plan()

    assert staging_check(plan) == {
        "skipped": "the run stages nothing: the job mounts the environment's dataset"
    }
    assert image_check(plan) == {"image": "registry.example.com/train:1", "build": False}
    assert image_check(local_run(tmp_path)) == {"image": None, "build": False}


def test_a_forced_rebuild_is_planned_without_asking_the_registry(dlc_plan: Callable[..., RunPlan]) -> None:
    plan = dlc_plan({"image_build": ACR_BUILD}, force_rebuild=True)

    check = image_check(plan)

    assert check["image"].startswith(f"{REPOSITORY}:")
    assert {key: check[key] for key in ("build", "exists", "why")} == {
        "build": True,
        "exists": None,
        "why": "force_rebuild is set",
    }


@pytest.mark.slow
def test_a_registry_that_cannot_be_reached_is_the_image_checks_error_not_the_dry_runs(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    with socket.socket() as free:  # a port nothing listens on once this socket is closed
        free.bind(("127.0.0.1", 0))
        registry = f"127.0.0.1:{free.getsockname()[1]}"
    plan = dlc_plan({"image_build": {**ACR_BUILD, "repository": f"{registry}/ml/train"}})

    document = dry_run_document(plan, job_name, preflight=None, check_platform=True)

    assert f"registry {registry} is unavailable" in document["checks"]["image"]["error"]
