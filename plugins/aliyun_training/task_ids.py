"""The id of every task the package's DAGs have, each written once.

An id is what Airflow stores and shows: task instances, XComs and the UI are keyed by it, the pages'
records and a job's deterministic name are found by it, and a dry run names each request's task with
it. So the ids stay plain strings, the values themselves, and renaming one orphans every stored run's
records. The DAG factory names its tasks with these; the planner, the dry run, the backend catalog's
``route`` and the pages name the same tasks with the same constants.
"""

from __future__ import annotations

from typing import Final

# A pipeline's DAG (``pipelines.factory``), in the order a run reaches its tasks.
#: Resolves and validates the run's plan from the declaration, the trigger form and the environment file.
CONFIGURE: Final[str] = "configure"
#: Waits, deferred, until a scheduled run's dataset version has landed.
WAIT_FOR_VERSION: Final[str] = "wait_for_version"
#: The task group of the preflight checks, one task per check group, and of their report.
PREFLIGHT: Final[str] = "preflight"
#: Joins the preflight checks' findings into one report with a fix for each (a task of ``PREFLIGHT``).
PREFLIGHT_REPORT: Final[str] = "report"
#: Picks the run's branches: a dry run's plan, or staging, training and the backend's own tasks.
ROUTE: Final[str] = "route"
#: Shows a dry run's plan: every request the run would make, its cost, the preflight findings.
SHOW_PLAN: Final[str] = "show_plan"
#: Waits, deferred, until the job's PAI quota has enough free GPUs.
WAIT_FOR_CAPACITY: Final[str] = "wait_for_capacity"
#: Copies the dataset version onto the training file system, verified, and registers it.
STAGE_DATASET: Final[str] = "stage_dataset"
#: Probes the interpreter a local run's jobs use: the local counterpart of the image's build and check.
TRAINING_RUNTIME: Final[str] = "training_runtime"
#: Builds the training image, unless the registry already has its content-addressed tag.
BUILD_IMAGE: Final[str] = "build_image"
#: Checks the image on one GPU node: Python, torch, CUDA, NCCL and RDMA libraries.
VERIFY_IMAGE: Final[str] = "verify_image"
#: Measures the RDMA bandwidth between two nodes before a multi-node job.
CHECK_RDMA: Final[str] = "check_rdma"
#: Converts the raw dataset version into the training version's shards with a CPU job.
PREPARE_DATASET: Final[str] = "prepare_dataset"
#: Runs the training job, monitored while deferred, stopped when the task is killed.
TRAIN: Final[str] = "train"
#: Scores the new model and the champion in one job, on the same data.
EVALUATE: Final[str] = "evaluate"
#: Publishes the run's artifacts and report, registers the model as a candidate, applies the gate.
PUBLISH_ARTIFACTS: Final[str] = "publish_artifacts"
#: Waits for a person to approve the promotion the gate passed.
APPROVE_PROMOTION: Final[str] = "approve_promotion"
#: Moves the champion pointer (the registry's alias, the champion Asset) to the run's model.
PROMOTE: Final[str] = "promote"

# The package's other DAGs.
#: Stops the jobs of ours that no task waits for any more (the reconciler DAG, ``pipelines.reconciler``).
STOP_ORPHANED_JOBS: Final[str] = "stop_orphaned_jobs"
#: Fails with a declaration file's error, in the DAG that stands for it (``pipelines.folder``).
DECLARATION_ERROR: Final[str] = "declaration_error"


def preflight_check(group: str) -> str:
    """The task (of ``PREFLIGHT``) that runs one group of preflight checks."""
    return f"check_{group}"


def in_preflight(task_id: str) -> str:
    """A task's id inside ``PREFLIGHT`` as the DAG knows it: a task group prefixes its tasks' ids."""
    return f"{PREFLIGHT}.{task_id}"
