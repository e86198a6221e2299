"""Every DAG file imports cleanly and carries what operators of a shared deployment rely on."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training import task_ids
from aliyun_training.backend_catalog import BACKENDS
from aliyun_training.operators.preflight import CHECK_GROUPS
from aliyun_training.upstream import Returned

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAGS_DIR))


def test_every_dag_file_imports_without_errors(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}
    assert {"cifar10_retrain", "imagenet_resnet_retrain"} <= set(dagbag.dag_ids), "both shipped declarations"


def test_a_declared_prepare_stage_runs_after_the_image_and_before_staging(dagbag: DagBag) -> None:
    dag = dagbag.dags["imagenet_resnet_retrain"]
    prepare = dag.get_task("prepare_dataset")

    assert prepare.upstream_task_ids == {"route", "verify_image"}
    assert prepare.trigger_rule == "none_failed_min_one_success", "locally verify_image is skipped"
    assert "prepare_dataset" in dag.get_task("stage_dataset").upstream_task_ids
    assert "prepare_dataset" not in dagbag.dags["cifar10_retrain"].task_ids
    framework = dag.params.get_param("framework").schema
    assert framework["enum"] == ["pytorch", "mpi"] and framework["section"] == "Cloud backends (DLC, ACK)"


def test_every_dag_has_tags_an_owner_and_retries(dagbag: DagBag) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        for task in dag.tasks:
            assert task.owner not in ("", "airflow"), f"{dag_id}.{task.task_id} has no owner"
            assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"


def test_the_trigger_form_documents_every_param_and_offers_only_implemented_backends(dagbag: DagBag) -> None:
    params = dagbag.dags["cifar10_retrain"].params
    for name in params:
        param = params.get_param(name)
        assert param.schema.get("title") and param.description, f"param {name} needs a title and description"
    assert params.get_param("backend").schema["enum"] == [record.name.value for record in BACKENDS]
    params.validate()


def test_the_pipeline_runs_configure_then_parallel_preflight_checks_then_routes_by_backend(
    dagbag: DagBag,
) -> None:
    dag = dagbag.dags["cifar10_retrain"]
    checks = {
        f"preflight.check_{group}" for group in ("machine", "network", "quota", "permissions", "cluster")
    }
    assert dag.catchup is False
    for check in checks:
        assert dag.get_task(check).upstream_task_ids == {"wait_for_version"}, (
            "checks run in parallel after configure and the version's wait"
        )
    assert dag.get_task("wait_for_version").upstream_task_ids == {"configure"}
    report = dag.get_task("preflight.report")
    assert report.upstream_task_ids == checks and report.trigger_rule == "all_done"
    assert dag.get_task("route").upstream_task_ids == {"preflight.report"}
    assert dag.get_task("route").downstream_task_ids == {
        "show_plan",
        "train",
        "publish_artifacts",
        "stage_dataset",
        "training_runtime",
        "build_image",
        "wait_for_capacity",
    }
    # The image is built and verified side by side with staging, and both finish before training.
    assert dag.get_task("verify_image").upstream_task_ids == {"build_image"}
    assert dag.get_task("check_rdma").upstream_task_ids == {"verify_image"}
    # The image reaches train through check_rdma, which waits for verify_image: its record is named
    # (Returned) rather than an XComArg, which would also make verify_image a direct upstream.
    assert dag.get_task("train").upstream_task_ids == {
        "route",
        "stage_dataset",
        "training_runtime",
        "wait_for_capacity",
        "check_rdma",
    }
    assert dag.get_task("train").trigger_rule == "none_failed_min_one_success"
    # The evaluation scores the trained model; publishing takes its records from whichever branches
    # ran (all before train) and the evaluation's scores, once both succeeded; promoting follows.
    assert dag.get_task("evaluate").upstream_task_ids == {"train"}
    publish = dag.get_task("publish_artifacts")
    assert publish.upstream_task_ids == {"route", "train", "evaluate"}
    assert dag.get_task("promote").upstream_task_ids == {"publish_artifacts"}
    assert dag.get_task("promote").max_active_tis_per_dag == 1, "one run moves the pointer at a time"
    assert publish.trigger_rule == "none_failed_min_one_success"
    assert {publish.dataset, publish.bandwidth, *publish.runtime} == {
        Returned("stage_dataset"),
        Returned("check_rdma"),
        Returned("verify_image"),
        Returned("training_runtime"),
    }
    # A named record's task must have finished: each is upstream of train, so of publishing too.
    for record in ("stage_dataset", "check_rdma", "verify_image", "training_runtime"):
        assert record in dag.get_task("train").get_flat_relative_ids(upstream=True), record


def test_every_task_a_backend_routes_to_is_a_task_of_every_declared_pipeline(dagbag: DagBag) -> None:
    for dag_id in ("cifar10_retrain", "imagenet_resnet_retrain"):
        tasks = set(dagbag.dags[dag_id].task_ids)
        for record in BACKENDS:
            assert set(record.route) <= tasks, (dag_id, record.name, set(record.route) - tasks)
            assert {f"preflight.check_{group}" for group in record.preflight_groups} <= tasks


def test_every_task_of_every_dag_is_named_by_the_task_ids_module(dagbag: DagBag) -> None:
    """The planner, the dry run and the pages find a task's records by the ids in ``task_ids``: a task
    named anywhere else would be a task none of them knows."""
    named = {value for name, value in vars(task_ids).items() if name.isupper()}
    preflight = {task_ids.preflight_check(group) for group in CHECK_GROUPS} | {task_ids.PREFLIGHT_REPORT}
    named |= {task_ids.in_preflight(task) for task in preflight}
    for dag_id, dag in dagbag.dags.items():
        assert set(dag.task_ids) <= named, (dag_id, set(dag.task_ids) - named)


def test_the_plans_tries_per_job_task_are_the_dags_retries_plus_one(dagbag: DagBag) -> None:
    """The dry run's cost ceiling counts each job task's tries from the plan; the DAG sets them."""
    from aliyun_training.declaration import load_declaration
    from aliyun_training.image.jobs import BANDWIDTH_TIMEOUT_MINUTES, VERIFY_TIMEOUT_MINUTES
    from aliyun_training.plan.inputs import job_tries

    for path in sorted((DAGS_DIR.parent / "pipelines").glob("*.yaml")):
        declaration = load_declaration(path)
        dag = dagbag.dags[declaration.pipeline.dag_id]
        tries = {task: n for task, n in job_tries(declaration).items() if task in dag.task_ids}

        assert {"verify_image", "check_rdma", "train"} <= set(tries), path.name
        assert tries == {task: dag.get_task(task).retries + 1 for task in tries}, path.name
        # ... and each check's timeout is the one the ceiling counts (the spec builders' defaults).
        checks = (dag.get_task("verify_image").timeout_minutes, dag.get_task("check_rdma").timeout_minutes)
        assert checks == (VERIFY_TIMEOUT_MINUTES, BANDWIDTH_TIMEOUT_MINUTES), path.name


def test_every_task_seals_what_it_returns_and_takes_its_plan_parts_sealed(dagbag: DagBag) -> None:
    """What one task hands another crosses a boundary users can write (XCom): each task seals its
    return value, and each plan part a task takes is the sealed part, never an XComArg."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    from aliyun_training.upstream import seal_returned

    dag = dagbag.dags["cifar10_retrain"]
    for task in dag.tasks:
        assert task._post_execute_hook is seal_returned, f"{task.task_id} does not seal its return value"
        for name in task.template_fields:
            assert not isinstance(getattr(task, name, None), XComArg), f"{task.task_id}.{name} is unsealed"
    assert dag.get_task("train").job == Returned("configure", "job", required=True)
    assert dag.get_task("publish_artifacts").job_result == Returned("train")
    assert dag.get_task("show_plan").plan == Returned("configure", required=True)
