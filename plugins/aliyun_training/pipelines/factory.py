"""One declaration, one DAG: the whole run (preflight, staging, image, training, artifacts, dry run).

Each task is a stage's operator taking its part of the run plan, which ``configure`` resolves from
the declaration, the trigger form and the backend's environment file; ``route`` picks the branches
of the run's backend. The declaration decides what differs between pipelines (dataset, command,
framework, resources, backends, outputs, a prepare stage); nothing here knows any model.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, CronTriggerTimetable, TaskGroup, task

from aliyun_training.backend_catalog import backend_record
from aliyun_training.declaration import PipelineBlock, PipelineDeclaration, declare, load_declaration
from aliyun_training.monitor import TRAIN_POLL_SECONDS
from aliyun_training.operators.artifacts import ArtifactsOperator
from aliyun_training.operators.bandwidth import RdmaBandwidthOperator
from aliyun_training.operators.evaluation import EvaluationOperator
from aliyun_training.operators.image import ImageBuildOperator, ImageVerifyOperator
from aliyun_training.operators.notices import FailureNotice, PromotionNotice, SuccessNotice
from aliyun_training.operators.plan import RunPlanOperator
from aliyun_training.operators.preflight import CHECK_GROUPS, PreflightCheckOperator, PreflightReportOperator
from aliyun_training.operators.prepare import DatasetPrepareOperator
from aliyun_training.operators.promotion import PromoteOperator
from aliyun_training.operators.reconcile import StopRunJobs
from aliyun_training.operators.recovery import FailureClassRetryPolicy
from aliyun_training.operators.runtime import LocalRuntimeOperator
from aliyun_training.operators.staging import DatasetStagingOperator
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.pages.urls import pipeline_page
from aliyun_training.params import run_params
from aliyun_training.pipelines.environments import check_environment_use, unconfigured_backends
from aliyun_training.pipelines.run_deadline import run_deadline_alert
from aliyun_training.pipelines.task_params import params_copied_once
from aliyun_training.pipelines.watch import pipeline_schedule, take_landed_version, version_inlets
from aliyun_training.plan.backends import WatchedBackend
from aliyun_training.sensors.dataset_version import DatasetVersionSensor
from aliyun_training.sensors.quota import QuotaCapacitySensor
from aliyun_training.settings import ENVIRONMENT_DIR_ENV
from aliyun_training.task_ids import (
    APPROVE_PROMOTION,
    BUILD_IMAGE,
    CHECK_RDMA,
    CONFIGURE,
    EVALUATE,
    PREFLIGHT,
    PREFLIGHT_REPORT,
    PREPARE_DATASET,
    PROMOTE,
    PUBLISH_ARTIFACTS,
    ROUTE,
    SHOW_PLAN,
    STAGE_DATASET,
    TRAIN,
    TRAINING_RUNTIME,
    VERIFY_IMAGE,
    WAIT_FOR_CAPACITY,
    WAIT_FOR_VERSION,
    in_preflight,
    preflight_check,
)
from aliyun_training.upstream import RETURN_VALUE, Returned, read_returned, seal_returned


def training_pipeline(
    declaration: PipelineDeclaration | dict[str, Any] | str | Path,
    *,
    environment_dir: str | Path | None = None,
    base_dir: str | Path | None = None,
) -> DAG:
    """The DAG of a declared pipeline.

    :param declaration: a ``PipelineDeclaration``, the path of a YAML declaration, or the
        declaration as a dict (relative paths then resolve against ``base_dir``, default: here).
    :param environment_dir: where the backends' environment files are when the deployment does not
        set ``ALIYUN_TRAINING_ENVIRONMENT_DIR``; default: ``config`` beside the declaration.
    """
    if isinstance(declaration, str | Path):
        declaration = load_declaration(Path(declaration))
    elif isinstance(declaration, dict):
        declaration = declare(declaration, Path(base_dir or Path.cwd()).resolve())
    environments = _environment_dir(declaration, environment_dir)
    check_environment_use(declaration, environments)
    return _build(declaration, environments)


def watched_backends(
    declaration: PipelineDeclaration, environment_dir: str | Path | None = None
) -> list[WatchedBackend]:
    """The declaration's backends with their environment files: where its jobs may run."""
    environments = _environment_dir(declaration, environment_dir)
    return [
        WatchedBackend(backend=backend, environment=str(environments / declared.environment))
        for backend, declared in declaration.backends.items()
    ]


def _environment_dir(declaration: PipelineDeclaration, environment_dir: str | Path | None) -> Path:
    default_dir = Path(environment_dir) if environment_dir else declaration.base_dir / "config"
    return Path(os.environ.get(ENVIRONMENT_DIR_ENV) or default_dir)


def _build(declaration: PipelineDeclaration, environment_dir: Path) -> DAG:
    settings = declaration.pipeline
    model = Asset(name=f"{declaration.model_name}_model", uri=f"model://{declaration.model_name}")
    # Its state holds the champion pointer; its events announce promotions (operators.promotion).
    champion = Asset(
        name=f"{declaration.model_name}_champion", uri=f"model://{declaration.model_name}/champion"
    )
    dag = DAG(
        dag_id=settings.dag_id,
        description=settings.description
        or f"Retrain {declaration.model_name} on {declaration.dataset.name}.",
        doc_md=_doc(declaration),
        schedule=pipeline_schedule(declaration, _timetable(settings), environment_dir),
        start_date=pendulum.datetime(
            settings.start_date.year, settings.start_date.month, settings.start_date.day, tz="UTC"
        )
        if settings.catchup
        else None,
        catchup=settings.catchup,
        max_active_runs=settings.max_active_runs,
        dagrun_timeout=timedelta(hours=settings.dagrun_timeout_hours),
        tags=list(dict.fromkeys([*settings.tags, "training", "aliyun"])),
        default_args={
            "owner": settings.owner,
            "retries": settings.retries,
            "retry_delay": timedelta(minutes=1),
            "retry_exponential_backoff": True,
            # What each task returns is sealed; the tasks that read it check the seal (upstream.py).
            "post_execute": seal_returned,
            # A task that fails for good tells the pipeline's notifiers (once: a retry does not).
            **_failure_notices(declaration),
        },
        params=run_params(declaration, unconfigured_backends(declaration, environment_dir)),
        # A failed run (its dagrun_timeout included) stops whatever job it still has.
        on_failure_callback=StopRunJobs(watched_backends(declaration, environment_dir)),
        deadline=run_deadline_alert(declaration),
    )
    with dag, params_copied_once(dag):

        @task(task_id=CONFIGURE, multiple_outputs=True, inlets=version_inlets(declaration))
        def configure(
            params: dict[str, Any],
            logical_date: Any = None,
            dag_run: Any = None,
            triggering_asset_events: Any = None,
            asset_state_store: Any = None,
        ) -> dict[str, Any]:
            """Plan and validate the whole run once; a bad value fails here, naming the field."""
            from aliyun_training.operators.plan import plan_for_task

            run_date: datetime = logical_date or dag_run.run_after
            # The scheduler's and a backfill's runs are the logical date's; a run_type enum equals its value.
            scheduled = getattr(dag_run, "run_type", None) in ("scheduled", "backfill")
            if getattr(dag_run, "run_type", None) == "asset_triggered":
                # A run its versions watcher started trains on the version that landed.
                params = take_landed_version(params, declaration, triggering_asset_events, asset_state_store)
            return plan_for_task(params, run_date, scheduled, declaration, environment_dir)

        @task.branch(task_id=ROUTE)
        def route(ti: Any = None) -> list[str]:
            """A dry run only shows its plan; a run stages when its plan says so (else it mounts its
            environment's dataset), and takes its backend's own branches (the catalog's ``route``)."""
            plan = read_returned(ti, planned())
            if plan["dry_run"]:
                return [SHOW_PLAN]
            # train and publish_artifacts follow a run's records from any branch; a dry run skips them.
            stage = (
                [STAGE_DATASET, TRAIN, PUBLISH_ARTIFACTS] if plan["staging"] else [TRAIN, PUBLISH_ARTIFACTS]
            )
            stage += [PREPARE_DATASET] if plan["prepare"] else []
            return [*stage, *backend_record(plan["backend"]).route]

        # Every task that runs a job fails, waits or resumes by its failure's class.
        recovery = FailureClassRetryPolicy(declaration.recovery.table)
        # Each key of configure's return value is one part of the plan (multiple_outputs); a task
        # takes its parts sealed (``planned``), so a part rewritten after configure is refused.
        run: Any = configure()  # type: ignore[call-arg, misc]  # Airflow fills the context arguments
        wait_for_version = DatasetVersionSensor(task_id=WAIT_FOR_VERSION, dataset=planned("dataset"))
        run >> wait_for_version
        with TaskGroup(PREFLIGHT) as preflight:
            checks = [
                PreflightCheckOperator(
                    task_id=preflight_check(group),
                    group=group,
                    job=planned("job"),
                    preflight=planned("preflight"),
                    skip=planned("skip_preflight"),
                )
                for group in CHECK_GROUPS
            ]
            checks >> PreflightReportOperator(
                task_id=PREFLIGHT_REPORT,
                check_task_ids=[in_preflight(preflight_check(group)) for group in CHECK_GROUPS],
                shows_plan=planned("dry_run", required=False),
            )
        show_plan = RunPlanOperator(
            task_id=SHOW_PLAN,
            plan=planned(),
            report_task_id=in_preflight(PREFLIGHT_REPORT),
        )
        wait_for_capacity = QuotaCapacitySensor(
            task_id=WAIT_FOR_CAPACITY, job=planned("job"), poke_interval=30, timeout=6 * 3600
        )
        stage = DatasetStagingOperator(
            task_id=STAGE_DATASET, staging=planned("staging"), trigger_rule="none_failed_min_one_success"
        )
        runtime = LocalRuntimeOperator(task_id=TRAINING_RUNTIME, job=planned("job"))
        build_image = ImageBuildOperator(task_id=BUILD_IMAGE, build=planned("image", required=False))
        # The image checks are jobs on the run's backend, with the run's spec and settings.
        verify_image = ImageVerifyOperator(
            task_id=VERIFY_IMAGE,
            job=planned("job"),
            image=Returned(BUILD_IMAGE),
            poll_interval=10,
            retry_policy=recovery,
            **_failure_notices(declaration),
        )
        check_rdma = RdmaBandwidthOperator(
            task_id=CHECK_RDMA,
            job=planned("job"),
            image=Returned(VERIFY_IMAGE),
            check=planned("rdma_check", required=False),
            poll_interval=10,
            retry_policy=recovery,
            **_failure_notices(declaration),
        )
        train = TrainingJobOperator(
            task_id=TRAIN,
            job=planned("job"),
            dataset=Returned(STAGE_DATASET),
            planned_dataset=planned("dataset"),
            image=Returned(VERIFY_IMAGE),
            price=planned("price", required=False),
            expected_minutes=declaration.deadline.expected_minutes,
            deadline_tolerance=declaration.deadline.tolerance,
            notifications=declaration.notifications,
            poll_interval=TRAIN_POLL_SECONDS,
            retries=declaration.recovery.retries,
            retry_policy=recovery,
            **_failure_notices(declaration),
            trigger_rule="none_failed_min_one_success",
        )
        # Records of alternative branches are named (Returned), so only the branch that ran is asked.
        # Its records come from branches of which only the backend's ran: it runs once train succeeded
        # although the others were skipped; a failed train fails it upstream, a skipped one skips it.
        publish = ArtifactsOperator(
            task_id=PUBLISH_ARTIFACTS,
            artifacts=planned("artifacts"),
            planned_dataset=planned("dataset"),
            job_result=Returned(TRAIN),
            dataset=Returned(STAGE_DATASET),
            runtime=[Returned(VERIFY_IMAGE), Returned(TRAINING_RUNTIME)],
            bandwidth=Returned(CHECK_RDMA),
            outlets=[model],
            # The gate applies the plan's rule (artifacts.promotion) to the champion this Asset keeps.
            champion=champion if declaration.promotion else None,
            evaluation=Returned(EVALUATE) if declaration.evaluation else None,
            trigger_rule="none_failed_min_one_success",
            on_success_callback=SuccessNotice(declaration.notifications)
            if declaration.notifications
            else None,
        )
        branches = [show_plan, stage, runtime, build_image, wait_for_capacity, train, publish]
        if declaration.evaluation:
            # Scores the candidate and the champion on the same data, in the run's image.
            (
                train
                >> EvaluationOperator(
                    task_id=EVALUATE,
                    evaluation=planned("evaluation", required=False),
                    job_result=Returned(TRAIN),
                    champion=champion,
                    dataset=Returned(STAGE_DATASET),
                    image=Returned(VERIFY_IMAGE),
                    poll_interval=5,
                    retry_policy=recovery,
                    **_failure_notices(declaration),
                )
                >> publish
            )
        if declaration.promotion:
            _promotion_steps(declaration, publish, champion)
        if declaration.dataset.prepare:
            # On a cloud backend the prepare job runs in the verified training image.
            prepare = DatasetPrepareOperator(
                task_id=PREPARE_DATASET,
                prepare=planned("prepare"),
                image=Returned(VERIFY_IMAGE),
                poll_interval=5,
                retry_policy=recovery,
                **_failure_notices(declaration),
                trigger_rule="none_failed_min_one_success",
            )
            branches.append(prepare)
            verify_image >> prepare >> stage
        wait_for_version >> preflight
        preflight >> route() >> branches
        build_image >> verify_image >> check_rdma
        [stage, runtime, wait_for_capacity, check_rdma] >> train >> publish
    return dag


def _failure_notices(declaration: PipelineDeclaration) -> dict[str, Any]:
    """The task callback that tells the notifiers of a task failed for good (none when the pipeline
    declares no notifier): a default argument of every task, and given to the job operators by
    name, since their own callback (which stops their job) would replace the default."""
    if not declaration.notifications:
        return {}
    return {"on_failure_callback": FailureNotice(declaration.notifications, declaration.recovery.table)}


def planned(part: str = RETURN_VALUE, required: bool = True) -> Any:
    """The sealed ``part`` of the run's plan (the whole plan by default), as ``configure`` returned it.

    A ``Returned`` marker, which the operator's field holds until it runs and then resolves into the
    part (as an XComArg did): typed as the part the field takes, so Any.
    """
    return Returned(CONFIGURE, part, required=required)


def _promotion_steps(declaration: PipelineDeclaration, publish: ArtifactsOperator, champion: Asset) -> None:
    """publish >> [approve_promotion] >> promote: the pointer moves after the gate (and a person) passed."""
    rule = declaration.promotion
    assert rule is not None
    promote = PromoteOperator(
        task_id=PROMOTE,
        published=Returned(PUBLISH_ARTIFACTS),
        job_result=Returned(TRAIN),
        artifacts=planned("artifacts"),
        approval=Returned(APPROVE_PROMOTION) if rule.approval else None,
        champion=champion,
        on_success_callback=PromotionNotice(declaration.notifications) if declaration.notifications else None,
    )
    if rule.approval is None:
        publish >> promote
        return
    from aliyun_training.operators.approval import PromotionApprovalOperator

    (
        publish
        >> PromotionApprovalOperator(
            task_id=APPROVE_PROMOTION,
            published=Returned(PUBLISH_ARTIFACTS),
            approval=rule.approval,
            model=declaration.model_name,
            notifications=declaration.notifications,
        )
        >> promote
    )


def _timetable(settings: PipelineBlock) -> CronTriggerTimetable | str | None:
    """The schedule; without catchup, turning the pipeline on waits for the next period's tick.

    Airflow would otherwise create a run for the period that began before the pipeline was turned
    on, at once: a run waiting (for hours) for a version that may never land, ahead of the run its
    user triggered from the same form, which unpauses the DAG, or a second training of the version
    that user chose. Without a start date (only a catchup needs one) a cron timetable's first run
    is its next tick (``run_immediately``: none of the past period); later runs follow as usual.
    """
    schedule = settings.schedule
    if schedule is None or schedule in ("@once", "@continuous") or settings.catchup:
        return schedule
    return CronTriggerTimetable(schedule, timezone="UTC", run_immediately=timedelta(0))


def _doc(declaration: PipelineDeclaration) -> str:
    """The DAG's documentation: the declaration's own, then what every declared pipeline does."""
    source = f"Declared in `{declaration.source}`." if declaration.source else ""
    return f"""### {declaration.pipeline.description or declaration.dag_id}

{source} Trains on `{declaration.dataset.name}` with `{declaration.training.framework.value}` and publishes
the `{declaration.model_name}_model` Asset. Every run's dataset version, results, report and plan:
[the pipeline's page]({pipeline_page(declaration.dag_id)}).

1. **configure** — resolve the run (dataset version, job, backend settings); a bad value fails here.
2. **wait_for_version** — a scheduled run waits (in the triggerer) for its version to land.
3. **preflight** — parallel checks for the chosen backend, then one report with a fix for each finding.
4. **route** — a dry run only shows its plan (`show_plan`); otherwise the backend's branches run.
5. **prepare_dataset** (when declared) — a CPU job converts the raw version into shards, once per version.
6. **stage_dataset** — copy the version onto CPFS (or the local disk), verified, published atomically.
7. **build_image / verify_image / check_rdma** (cloud) or **training_runtime** (local).
8. **train** — the distributed job, monitored while deferred; stopped when the task is killed.
9. **evaluate** (when declared) — one job scores the candidate and the champion on the same data.
10. **publish_artifacts** — checkpoints, metrics and a run report with a manifest, announced as an
    Asset; the model is registered as a candidate and the promotion gate decides.
11. **approve_promotion** (when declared) — a person approves the promotion in the UI.
12. **promote** — the champion pointer (registry alias, champion Asset) moves to a model that passed.
"""
