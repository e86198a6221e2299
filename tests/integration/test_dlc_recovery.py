"""Classified failures and no orphaned jobs on PAI-DLC, through the real SDK against the emulators.

Each failure class is produced by a job script of the DLC emulator and classified from what the
backend reads back (GetJob, GetJobEvents, ListJobSanityCheckResults, GetPodLogs), sync and async
alike; ``launched`` finds the jobs of ours that have not ended over several ListJobs pages; a
stopped job is Stopping before it is Stopped and is never taken for a job just created; and an
async wait outlives one STS token after another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.base import JobHandle, JobState, JobStatus
from aliyun_training.backends.dlc.request import create_job_request
from aliyun_training.failures import Failure, FailureClass
from aliyun_training.hooks.credentials import MIN_DURATION_SECONDS
from aliyun_training.spec import JobOwner, TrainingJobSpec
from fakes.base import FaultPlan, ManualClock
from fakes.cloud import dlc_backend
from fakes.dlc import DlcEmulator, JobScript
from fakes.environment_files import INSTALLATION
from fakes.sts import StsEmulator
from tests.integration import test_dlc_backend
from tests.integration.test_dlc_backend import AK, ROLE_ARN, SK, connect, spec

if TYPE_CHECKING:
    from aliyun_training.backends.dlc.backend import DlcBackend

#: The DLC emulator and the connection to it, as test_dlc_backend sets them up.
dlc = test_dlc_backend.dlc
studio = test_dlc_backend.studio
connected = test_dlc_backend.connected

#: Long enough that nothing moves on unless a test advances its clock past it.
FOREVER = 10_000.0


def job_spec(owner: JobOwner | None = None) -> TrainingJobSpec:
    return TrainingJobSpec.parse(spec(datasets=[], owner=owner.model_dump() if owner else None))


def owner(index: int) -> JobOwner:
    return JobOwner(
        installation=INSTALLATION,
        dag_id="retrain",
        run_id=f"manual__{index}",
        task_id="train",
        map_index=index,
    )


# -- each failure class, produced and classified ----------------------------------------------------

FAILED_SANITY_CHECK = [
    [
        {
            "CheckNumber": 1,
            "Phase": "GPUCheck",
            "Status": "Failed",
            "Message": "GPU 3 has XID 79",
            "StartedAt": "2026-11-30T00:00:00Z",
            "FinishedAt": "2026-11-30T00:00:05Z",
        }
    ]
]
RAN = [("Creating", 1.0), ("Queuing", 1.0), ("EnvPreparing", 1.0), ("Running", 10.0)]
NEVER_RAN = [("Creating", 1.0), ("Queuing", 10.0)]
TRAINED = ["Starting training: WORLD_SIZE=2 RANK=0", "epoch 1/3 loss=2.3026"]
#: A node's whole output after its torchrun received SIGTERM from outside (recorded: see the README
#: beside it): the agent's "death signal" warning, then the traceback of its SignalException.
AGENT_STOPPED = (
    (Path(__file__).resolve().parents[1] / "data" / "torchrun" / "agent_stopped_by_sigterm.log")
    .read_text()
    .splitlines()
)
NCCL_FAILURE = (
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "expected", "evidence"),
    [
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Job failed",
                pod_sub_status={"worker-0": "Evicted"},
                log_lines=TRAINED,
            ),
            FailureClass.PREEMPTION,
            "ReasonCode=JobFailed: Job failed; pod {job_id}-worker-0 SubStatus=Evicted",
            id="preempted: a pod evicted",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                events=["Job is running", "Node lingjun-node-1 status is now: NodeNotReady"],
                log_lines=[
                    *TRAINED,
                    "RuntimeError: NCCL error: remote process exited or there was a network error",
                ],
            ),
            FailureClass.PREEMPTION,
            "event: Node lingjun-node-1 status is now: NodeNotReady",
            id="preempted: a node lost, whatever NCCL says after",
        ),
        pytest.param(
            JobScript(
                phases=[("Creating", 1.0), ("Queuing", 1.0), ("EnvPreparing", 5.0)],
                final="Failed",
                reason_code="JobFailed",
                events=[
                    "Job is created",
                    'Failed to pull image "registry.example.com/train/pytorch:2.13-rdma": manifest unknown',
                ],
                log_lines=[],
            ),
            FailureClass.CONFIG,
            'event: Failed to pull image "registry.example.com/train/pytorch:2.13-rdma": manifest unknown',
            id="config: an image that cannot be pulled",
        ),
        pytest.param(
            JobScript(
                phases=NEVER_RAN,
                final="Failed",
                reason_code="ResourceAllocateFailed",
                reason_message="resource type is not enough for 16 GPU",
                log_lines=[],
            ),
            FailureClass.CAPACITY,
            "ReasonCode=ResourceAllocateFailed: resource type is not enough for 16 GPU",
            id="capacity: the quota cannot place the job",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Pod master-0 exited with code 1",
                log_lines=[*TRAINED, "RuntimeError: NCCL error: unhandled system error"],
                sanity_check_results=FAILED_SANITY_CHECK,
            ),
            FailureClass.INFRASTRUCTURE,
            "sanity check #1 GPUCheck: Failed GPU 3 has XID 79",
            id="infrastructure: a failed sanity check",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Pod master-0 exited with code 1",
                log_lines=[
                    *TRAINED,
                    "Traceback (most recent call last):",
                    NCCL_FAILURE,
                ],
            ),
            FailureClass.INFRASTRUCTURE,
            NCCL_FAILURE,
            id="infrastructure: NCCL in the log tail",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Pod master-0 exited with code 1",
                log_lines=[
                    *TRAINED,
                    "Traceback (most recent call last):",
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                ],
            ),
            FailureClass.USER_CODE,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            id="user code: CUDA out of memory",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Pod master-0 exited with code 1",
                log_lines=[*TRAINED, "Traceback (most recent call last):", "ValueError: lr must be positive"],
            ),
            FailureClass.USER_CODE,
            "ReasonCode=JobFailed: Pod master-0 exited with code 1",
            id="user code: the script exited 1 with a traceback",
        ),
        pytest.param(
            JobScript(
                phases=[("Creating", 1.0), ("Queuing", 1.0), ("EnvPreparing", 5.0)],
                final="Failed",
                reason_code="JobFailed",
                events=['MountVolume.SetUp failed for volume "data": dataset d-cifar10 not found'],
                log_lines=[],
            ),
            FailureClass.DATA,
            'event: MountVolume.SetUp failed for volume "data": dataset d-cifar10 not found',
            id="data: the dataset cannot be mounted",
        ),
        pytest.param(
            JobScript(phases=RAN, final="Failed", log_lines=TRAINED),
            FailureClass.INFRASTRUCTURE,
            "DLC named no reason",
            id="no cause named and no error printed: infrastructure",
        ),
        pytest.param(
            JobScript(
                phases=RAN,
                final="Failed",
                reason_code="JobFailed",
                reason_message="Pod master-0 exited with code 1",
                log_lines=AGENT_STOPPED,
            ),
            FailureClass.PREEMPTION,
            "torchrun was stopped from outside: W1203 14:59:09.974000 18464 torch/distributed/elastic/"
            "agent/server/api.py:753] Received 15 death signal, shutting down workers",
            id="preemption: torchrun stopped from outside printed a traceback as it died",
        ),
    ],
)
def test_each_failure_class_is_produced_on_dlc_and_read_back_alike_by_the_worker_and_the_trigger(
    connected: DlcEmulator, script: JobScript, expected: FailureClass, evidence: str
) -> None:
    clock = ManualClock()
    connected.clock = clock
    connected.default_script = script
    backend = dlc_backend(workspace_id="ws-1")
    handle = backend.submit(job_spec(), "classified")
    clock.advance(FOREVER)

    failure = classified(backend, handle)
    afailure = asyncio.run(aclassified(dlc_backend(workspace_id="ws-1"), handle))

    assert failure == afailure
    assert failure.failure_class is expected
    assert evidence.format(job_id=handle.job_id) in failure.evidence


def classified(backend: DlcBackend, handle: JobHandle) -> Failure:
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    tail = backend.tail(handle, status.failed_node or 0)
    return backend.classify(status, backend.failure_details(handle), tail)


async def aclassified(backend: DlcBackend, handle: JobHandle) -> Failure:
    status = await backend.astatus(handle)
    tail = await backend.atail(handle, status.failed_node or 0)
    return backend.classify(status, await backend.afailure_details(handle), tail)


def test_a_failed_status_carries_dlc_reason_code_and_the_sub_statuses(connected: DlcEmulator) -> None:
    clock = ManualClock()
    connected.clock = clock
    connected.default_script = JobScript(
        phases=RAN,
        final="Failed",
        reason_code="JobFailed",
        reason_message="Pod worker-0 was evicted",
        sub_status="PreemptionRetryFailed",
        pod_sub_status={"worker-0": "Evicted", "master-0": "Normal"},
    )
    backend = dlc_backend()
    handle = backend.submit(job_spec(), "sub-status")
    early = backend.status(handle)
    clock.advance(FOREVER)

    failed = backend.status(handle)

    assert (early.state, early.reason) == (JobState.PENDING, "")
    assert failed.reason_code == "JobFailed"
    assert failed.reason == (
        f"JobFailed: Pod worker-0 was evicted; SubStatus=PreemptionRetryFailed; "
        f"pod {handle.job_id}-worker-0 SubStatus=Evicted"
    )


# -- launched: our jobs that have not ended ----------------------------------------------------------


@pytest.mark.slow
def test_launched_lists_every_unended_job_of_this_installation_over_several_pages(
    connected: DlcEmulator,
) -> None:
    clock = ManualClock()
    connected.clock = clock
    connected.stopping_seconds = FOREVER
    connected.script_for("queued-", JobScript(phases=[("Queuing", FOREVER)]))
    connected.script_for("run-", JobScript(phases=[("Running", FOREVER)]))
    connected.script_for("done-", JobScript(phases=[("Running", 1.0)]))
    backend = dlc_backend(workspace_id="ws-1")
    running = {backend.submit(job_spec(owner(i)), f"run-{i}").job_id: owner(i) for i in range(101)}
    queued = {backend.submit(job_spec(owner(200)), "queued-200").job_id: owner(200)}
    stopping = backend.submit(job_spec(owner(300)), "run-300")
    backend.stop(stopping)
    ended = backend.submit(job_spec(owner(400)), "done-400")
    unowned = backend.submit(job_spec(), "run-unowned")
    # Another deployment's job of the same DAG, run and task: not ours, not even listed.
    foreign = backend.submit(job_spec(owner(0).model_copy(update={"installation": "ml-staging"})), "run-0")
    partly = create_job_request(
        job_spec(),
        "run-partly",
        job_settings=backend.job_settings,
        workspace_id="ws-1",
        region="cn-wulanchabu",
        vpc=None,
        extended_cidrs=[],
        image_config=None,
    )
    partly.settings.tags["airflow-dag-id"] = "retrain"  # an owner tag, but not a whole owner
    partly_id = backend.hook.conn.create_job(partly).body.job_id
    clock.advance(2.0)  # done-400 has succeeded; everything else is where it was

    found = {job.handle.job_id: job for job in backend.launched(INSTALLATION)}

    assert {job_id: job.owner for job_id, job in found.items()} == {
        **running,
        **queued,
        stopping.job_id: owner(300),
    }
    assert {job.state for job_id, job in found.items() if job_id in running} == {JobState.RUNNING}
    assert found[next(iter(queued))].state is JobState.PENDING
    assert found[stopping.job_id].state is JobState.STOPPING
    assert found[stopping.job_id].handle == stopping
    assert all(job.created for job in found.values())
    assert not {ended.job_id, unowned.job_id, partly_id, foreign.job_id} & found.keys()
    listings = [
        (r.query["Status"], r.query["PageNumber"], r.query["PageSize"], r.query["WorkspaceId"])
        for r in connected.requests_for("ListJobs")
    ]
    selected = [json.loads(r.query["Tags"]) for r in connected.requests_for("ListJobs")]
    assert selected and all(tags == {"airflow-installation": INSTALLATION} for tags in selected)
    assert ("Running", "1", "100", "ws-1") in listings and ("Running", "2", "100", "ws-1") in listings
    assert {status for status, *_ in listings} == {
        "Creating",
        "Queuing",
        "Bidding",
        "EnvPreparing",
        "SanityChecking",
        "Running",
        "Restarting",
        "Stopping",
    }


def test_owner_tags_reach_create_job_next_to_the_name_tag_and_come_back_in_get_job(
    connected: DlcEmulator,
) -> None:
    backend = dlc_backend(workspace_id="ws-1")

    handle = backend.submit(job_spec(owner(7)), "tagged")

    (create,) = connected.requests_for("CreateJob")
    assert create.body["Settings"]["Tags"] == {"airflow-job-name": "tagged", **owner(7).tags()}
    tags = backend.hook.get_job(handle.job_id).settings.tags
    assert JobOwner.from_tags(tags) == owner(7)


# -- Stopping ----------------------------------------------------------------------------------------


def test_a_stopped_job_is_stopping_until_dlc_has_torn_it_down(connected: DlcEmulator) -> None:
    clock = ManualClock()
    connected.clock = clock
    connected.stopping_seconds = 30.0
    connected.default_script = JobScript(phases=[("Running", FOREVER)])
    backend = dlc_backend()
    handle = backend.submit(job_spec(), "stopped")

    backend.stop(handle)
    stopping = backend.status(handle)
    clock.advance(31.0)
    stopped = backend.status(handle)

    assert (stopping.state, stopping.raw) == (JobState.STOPPING, "Stopping")
    assert not stopping.state.is_terminal and stopping.finished is None
    assert (stopped.state, stopped.raw) == (JobState.STOPPED, "Stopped")


def test_a_create_job_whose_answer_was_lost_is_not_taken_for_an_older_stopping_job_of_its_name(
    connected: DlcEmulator,
) -> None:
    connected.stopping_seconds = FOREVER
    connected.default_script = JobScript(phases=[("Running", FOREVER)])
    backend = dlc_backend(workspace_id="ws-1")
    older = backend.submit(job_spec(), "again")
    backend.stop(older)
    connected.faults = FaultPlan(
        drop_rate=0.5, seed=first_dropped_then_answered(0.5), actions=frozenset({"CreateJob"})
    )

    handle = backend.submit(job_spec(), "again")

    assert handle.job_id != older.job_id and handle.job_id in connected.jobs
    assert [r.fault for r in connected.requests_for("CreateJob")] == ["", "drop", ""]
    assert connected.count("ListJobs") >= 1, "the retry looked for a job the lost answer made"
    assert backend.status(older).state is JobState.STOPPING


def first_dropped_then_answered(rate: float) -> int:
    """A seed under which a FaultPlan dropping ``rate`` of its requests drops the first and answers
    the second: each request draws twice from the plan's RNG, its fault and then its delay."""
    for seed in range(1000):
        draws = random.Random(seed)
        first, _, second = draws.random(), draws.random(), draws.random()
        if first < rate <= second:
            return seed
    raise AssertionError("no seed in range")


# -- STS tokens through a long wait ------------------------------------------------------------------


@pytest.mark.slow
def test_async_polling_of_one_job_outlives_one_sts_token_after_another(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Tokens live the shortest session AssumeRole grants (900 s) on a clock the test moves: the
    emulators share it, so each poll finds the token of the previous one expired by DLC's reckoning
    while the client, on its own clock, still thinks it fresh. Only DLC's rejection
    (InvalidSecurityToken.Expired) can make it renew, on the async path the trigger uses."""
    caplog.set_level(logging.WARNING, logger="aliyun_training.hooks.retry")
    clock = ManualClock()
    token_life = MIN_DURATION_SECONDS + 1.0
    lines = ["epoch 1", "epoch 2", "epoch 3", "epoch 4"]
    with StsEmulator({AK: SK}) as sts:
        dlc.clock = sts.clock = clock
        sts.link(dlc)
        connect(
            monkeypatch,
            {"dlc": dlc.endpoint, "sts": sts.endpoint},
            role_arn=ROLE_ARN,
            role_duration_seconds=MIN_DURATION_SECONDS,
        )
        # Four lines over five tokens' lives: polls 2 to 4 read one each, the stop comes before the last.
        dlc.default_script = JobScript(
            phases=[("Creating", 1.0), ("Running", 5 * token_life)], log_lines=lines
        )
        handle = dlc_backend(workspace_id="ws-1").submit(job_spec(), "long-wait")
        trigger_side = dlc_backend(workspace_id="ws-1")

        async def wait() -> tuple[list[JobStatus], list[str]]:
            statuses: list[JobStatus] = []
            seen: list[str] = []
            cursor: dict[str, Any] | None = None
            for _ in range(4):
                clock.advance(token_life)
                statuses.append(await trigger_side.astatus(handle))
                chunk = await trigger_side.alogs(handle, cursor)
                seen, cursor = seen + chunk.lines, chunk.cursor
            clock.advance(token_life)
            await trigger_side.astop(handle)
            statuses.append(await trigger_side.astatus(handle))
            return statuses, seen

        statuses, seen = asyncio.run(wait())

    assert [s.raw for s in statuses] == ["Running"] * 4 + ["Stopping"]
    assert seen == [f"[node-{node}] {line}" for line in lines[:3] for node in (0, 1)]
    rejected = [r.action for r in dlc.requests if r.status == 400]
    assert rejected == ["GetJob"] * 4 + ["StopJob"], "each token was rejected once, then replaced"
    assert sts.assumed == 6, "one token for the submit, one more after each rejection"
    assert caplog.text.count("security token expired; refreshing credentials") == 5
    served = [r.headers["x-acs-security-token"] for r in dlc.requests if r.status == 200]
    assert len(set(served)) == 6
    assert dlc.count("StopJob") == 2 and dlc.jobs[handle.job_id].stop_requested_at is not None
