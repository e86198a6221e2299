"""The backends this installation runs jobs on: one record each, read by every place that differs by backend.

A backend is made of parts that live in several layers: its environment model (``environments``),
its planner and the constructor settings it derives from the environment (``plan``), its backend
class (``backends``), its preflight groups, the tasks the DAG's ``route`` adds for it and its label
on the trigger form. Each of those places reads the backend's :class:`BackendRecord` instead of
switching on its name, so adding a backend is one package plus one entry in :data:`BACKENDS`
(docs/architecture.md walks through the local backend as the example). The rules a platform
enforces on a spec are its backend's (``TrainingBackend.check``), applied by its planner.

The record sits below the layers its parts live in, so it names code parts by import path
(``"package.module:attribute"``), the way Airflow's provider metadata names hook classes: nothing
is imported until a part is used, so parsing a DAG imports no planner, backend or SDK.
``tests/unit/test_backend_catalog.py`` resolves every path and checks what it finds.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from aliyun_training.task_ids import BUILD_IMAGE, TRAINING_RUNTIME, WAIT_FOR_CAPACITY
from aliyun_training.validation import SpecError


class Backend(StrEnum):
    """Where a training job runs: the name a trigger form, a declaration and a record use.

    The code names each backend for its platform (``Backend.ACK``, ``AckBackend``, ``plan.ack``);
    the value is what users type and files record. The ACK backend's value is ``arena``: it runs
    Kubeflow training jobs on ACK as the ``arena`` command submits them, and ``arena`` is what its
    users know it by, what the trigger form offers and what environment files (``arena.json``),
    declarations and job records already say.
    """

    LOCAL = "local"
    DLC = "dlc"
    ACK = "arena"


#: How a backend measures RDMA bandwidth between two nodes before a multi-node run:
#: nccl-tests' ``all_reduce_perf`` under ``mpirun`` (an MPIJob; needs GPUs), or ``ib_write_bw``
#: between two pods (no GPU needed).
BandwidthTest = Literal["nccl_tests", "ib_write_bw"]


@dataclass(frozen=True)
class BackendRecord:
    """One backend: its data, and its code parts by import path (resolved by :meth:`part`)."""

    name: Backend
    #: The trigger form's label for the backend.
    label: str
    #: Runs in containers on Alibaba Cloud: needs an image (built or pinned, then verified) and an
    #: environment file; a local run uses the worker's Python and an optional file of defaults.
    cloud: bool
    #: The frameworks the backend runs (values of ``spec.Framework``); empty: every one.
    frameworks: frozenset[str]
    #: What it runs, in words, for the error refusing another framework (empty: runs every one).
    frameworks_note: str
    #: The preflight groups that apply to the backend's runs (``operators.preflight``).
    preflight_groups: tuple[str, ...]
    #: What the DAG's ``route`` runs for this backend besides staging, training and publishing.
    route: tuple[str, ...]
    #: The RDMA bandwidth check the backend runs, if any.
    bandwidth_test: BandwidthTest | None
    #: API requests one read of a job's status makes, alone or for a listing of up to 100 jobs:
    #: DLC's GetJob or ListJobs; ACK's CR and its pods; none for local jobs, which are files.
    status_requests: int
    #: The environment file's model (a pydantic class).
    environment_model: str
    #: ``(PlanRequest) -> RunPlan``: plans one run on this backend.
    planner: str
    #: ``(PipelineDeclaration, environment, LocalPaths) -> DatasetSources``: where versions are read.
    dataset_sources: str
    #: ``(environment) -> dict``: the backend class's constructor settings from its environment.
    backend_config: str
    #: The ``TrainingBackend`` class.
    backend_class: str
    #: The kind of PAI resource the backend's jobs are (PAI's SDK names a DLC job ``DlcJob``), which
    #: a PAI model version names as its source; None: PAI knows nothing of its jobs.
    pai_job_kind: str | None = None

    def part(self, field: str) -> Any:
        """The code part named by ``field`` (e.g. ``"planner"``), imported on first use."""
        module, _, attribute = str(getattr(self, field)).partition(":")
        found: Any = importlib.import_module(module)
        for name in attribute.split("."):
            found = getattr(found, name)
        return found


#: Every backend this installation offers, in the order the trigger form lists them.
BACKENDS: tuple[BackendRecord, ...] = (
    BackendRecord(
        name=Backend.LOCAL,
        label="local — torchrun processes on the Airflow worker",
        cloud=False,
        frameworks=frozenset({"pytorch", "elastic"}),
        frameworks_note="torchrun only",
        preflight_groups=("machine",),
        route=(TRAINING_RUNTIME,),
        bandwidth_test=None,
        status_requests=0,
        environment_model="aliyun_training.environments:LocalEnvironment",
        planner="aliyun_training.plan.local:plan_run",
        dataset_sources="aliyun_training.plan.local:dataset_sources",
        backend_config="aliyun_training.plan.local:local_backend_config",
        backend_class="aliyun_training.backends.local:LocalBackend",
    ),
    BackendRecord(
        name=Backend.DLC,
        label="dlc — PAI-DLC job",
        cloud=True,
        frameworks=frozenset(),
        frameworks_note="",
        preflight_groups=("network", "quota", "permissions"),
        route=(BUILD_IMAGE, WAIT_FOR_CAPACITY),
        bandwidth_test="nccl_tests",
        status_requests=1,
        environment_model="aliyun_training.environments:DlcEnvironment",
        planner="aliyun_training.plan.dlc:plan_run",
        dataset_sources="aliyun_training.plan.cloud:dataset_sources",
        backend_config="aliyun_training.plan.dlc:dlc_backend_config",
        backend_class="aliyun_training.backends.dlc.backend:DlcBackend",
        pai_job_kind="DlcJob",
    ),
    BackendRecord(
        name=Backend.ACK,
        label="arena — Kubeflow job on ACK, as arena submits it",
        cloud=True,
        frameworks=frozenset({"pytorch", "tensorflow", "mpi", "elastic"}),
        frameworks_note="Kubeflow's PyTorchJob, TFJob and MPIJob",
        preflight_groups=("cluster",),
        route=(BUILD_IMAGE,),
        bandwidth_test="ib_write_bw",
        status_requests=2,
        environment_model="aliyun_training.environments:AckEnvironment",
        planner="aliyun_training.plan.ack:plan_run",
        dataset_sources="aliyun_training.plan.cloud:dataset_sources",
        backend_config="aliyun_training.plan.ack:ack_backend_config",
        backend_class="aliyun_training.backends.ack.backend:AckBackend",
    ),
)

_BY_NAME = {record.name.value: record for record in BACKENDS}


def backend_record(name: str) -> BackendRecord:
    """The record of backend ``name``; SpecError names the backends there are."""
    record = _BY_NAME.get(str(name))
    if record is None:
        offered = ", ".join(_BY_NAME)
        raise SpecError(
            f"backend: {name!r} is not available in this installation (fix: use one of: {offered})"
        )
    return record


def preflight_groups() -> tuple[str, ...]:
    """Every preflight group of every backend, each once, in the order the records list them."""
    return tuple(dict.fromkeys(group for record in BACKENDS for group in record.preflight_groups))
