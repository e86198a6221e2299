"""The evaluation job's plan and what its evaluation.json must hold: planned from the declaration,
refused where it cannot be read, each error naming the field and the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.plan import local
from aliyun_training.plan.evaluation import evaluation_plan
from aliyun_training.plan.models import EvaluationContract
from aliyun_training.settings import LocalPaths
from aliyun_training.validation import SpecError
from fakes.environment_files import cifar10
from tests.plan_requests import cifar10_request

if TYPE_CHECKING:
    from pathlib import Path

FIXED = "2026-01-04"


def _declaration(**evaluation: object) -> object:
    declared = cifar10()
    block = declared.evaluation.model_copy(update=evaluation)  # type: ignore[union-attr]
    return declared.model_copy(update={"evaluation": block})


def test_a_fixed_evaluation_version_is_read_from_the_local_object_store_in_one_cpu_node(
    tmp_path: Path,
) -> None:
    store = f"file://{LocalPaths(tmp_path).object_store}/{{dataset}}/{{version}}/"
    request = cifar10_request(
        tmp_path,
        tmp_path / "local.json",
        Backend.LOCAL,
        template=store,
        declaration=_declaration(dataset_version=FIXED),
    )

    plan = local.plan_run(request).evaluation

    assert plan is not None and not plan.own_version and plan.dataset_version == FIXED
    spec = plan.job.spec
    assert spec.env["EVAL_DATA_DIR"] == f"{LocalPaths(tmp_path).object_store}/cifar10/{FIXED}/"
    assert (spec.nodes, spec.gpus_per_node, spec.rdma, spec.command) == (
        1,
        0,
        False,
        "python evaluate_cifar10.py",
    )
    assert plan.job.max_gpu_hours is None, "the run's GPU-hour budget is the training job's"


def test_a_fixed_evaluation_version_without_a_source_to_read_it_from_is_refused_naming_the_fix(
    tmp_path: Path,
) -> None:
    request = cifar10_request(
        tmp_path, tmp_path / "dlc.json", Backend.DLC, declaration=_declaration(dataset_version=FIXED)
    )
    training = local.plan_run(
        cifar10_request(
            tmp_path, tmp_path / "local.json", Backend.LOCAL, template="file:///x/{dataset}/{version}/"
        )
    ).job

    with pytest.raises(
        SpecError, match=r"evaluation\.dataset_version: dlc runs .* read no versions' source .*fix:"
    ):
        evaluation_plan(request, training, None, "alibaba_cloud_default")


def test_the_pai_registry_on_a_backend_without_a_workspace_is_refused_naming_the_fix(tmp_path: Path) -> None:
    declared = cifar10()
    declared = declared.model_copy(update={"registry": declared.registry.model_copy(update={"kind": "pai"})})
    request = cifar10_request(tmp_path, tmp_path / "local.json", Backend.LOCAL, declaration=declared)

    with pytest.raises(
        SpecError,
        match=r"registry\.kind: PAI's model registry lives in a PAI workspace.*fix: use kind: mlflow",
    ):
        request.registry_settings()


@pytest.mark.parametrize(
    ("document", "champion", "message"),
    [
        (None, None, r"it wrote no /out/evaluation\.json \(fix: write \{\"candidate\""),
        ({"candidate": {"acc": "high"}}, None, r"\['acc'\] are not numbers"),
        ({"candidate": {}}, None, "a non-empty object of numbers"),
        (
            {"candidate": {"acc": 0.9}, "champion": None},
            "manual__1",
            "no champion scores although CHAMPION_DIR",
        ),
    ],
)
def test_an_evaluation_json_that_is_missing_or_malformed_fails_naming_what_to_write(
    document: object, champion: str | None, message: str
) -> None:
    contract = EvaluationContract(
        candidate_dir="/c", champion_dir="/p" if champion else "", champion_run_id=champion
    )

    with pytest.raises(SpecError, match=message):
        contract.comparison(document, "/out")


def test_champion_scores_the_job_was_not_asked_for_are_ignored() -> None:
    contract = EvaluationContract(candidate_dir="/c")

    comparison = contract.comparison({"candidate": {"acc": 1}, "champion": {"acc": 0.5}}, "/out")

    assert comparison.champion is None and comparison.candidate == {"acc": 1.0}
    assert comparison.basis == "evaluation"


def test_the_contract_tells_the_job_both_models_and_the_run_s_own_version_where_it_scores_on_it() -> None:
    contract = EvaluationContract(candidate_dir="/c", champion_dir="/p", champion_run_id="manual__1")

    assert contract.env() == {"CANDIDATE_DIR": "/c", "CHAMPION_DIR": "/p"}
    assert contract.env("/data/v1") == {
        "CANDIDATE_DIR": "/c",
        "CHAMPION_DIR": "/p",
        "EVAL_DATA_DIR": "/data/v1",
    }
    assert EvaluationContract(candidate_dir="/c").env()["CHAMPION_DIR"] == "", "no champion: empty"
