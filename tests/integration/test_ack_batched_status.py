"""The ACK backend's batched status listing (``StatusListing``) against the Kubernetes API fake, over
real HTTP with kubernetes_asyncio: one listing answers many jobs as ``astatus`` would, in requests
that do not grow with the jobs until a selector is full, and leaves to ``astatus`` what it cannot
tell (a job deleted or replaced)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.ack.backend import RELEASES_PER_SELECTOR, AckBackend
from aliyun_training.backends.base import JobHandle, JobState, JobStatus, StatusListing, same_state
from aliyun_training.spec import TrainingJobSpec
from fakes.base import ManualClock
from fakes.cloud import arena_job
from fakes.kube import NS, kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: A connection of these tests alone: the process's request rate limiter of a connection is made
#: on its first use, with the ``api_rate_limits`` then set (see ``fake``).
CONN_ID = "ack_batched_cluster"
OTHER_NS = "other-team"

#: With the fake's clock moved on by ``SETTLED`` seconds, each prefix's job is in that state.
SETTLED = 10.0
SCRIPTS = {
    "pending": TrainingScript(phases=[("Created", 1000.0)]),
    "running": TrainingScript(phases=[("Created", 1.0), ("Running", 1000.0)]),
    "succeeded": TrainingScript(phases=[("Created", 1.0), ("Running", 1.0)]),
    "failed": TrainingScript(phases=[("Created", 1.0), ("Running", 1.0)], outcome="Failed"),
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Iterator[KubernetesFake]:
    # Hundreds of requests create the jobs: client-go's 5 a second would make that a minute.
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS", '{"kubernetes": 10000}')
    with kubernetes_fake(tmp_path, monkeypatch, clock, conn_id=CONN_ID) as server:
        for prefix, script in SCRIPTS.items():
            server.script_for(prefix, script)
        yield server


def settings(**overrides: Any) -> dict[str, Any]:
    return {"kubernetes_conn_id": CONN_ID, "namespace": NS, **overrides}


def submit(backend: AckBackend, name: str, framework: str = "pytorch", nodes: int = 2) -> JobHandle:
    job = arena_job(command="python train.py", framework=framework, nodes=nodes)
    return backend.submit(TrainingJobSpec.parse(job), name)


def settle(fake: KubernetesFake, clock: ManualClock) -> None:
    clock.advance(SETTLED)
    fake.reconcile()


def listed(backend: AckBackend, handles: list[JobHandle]) -> dict[str, JobStatus]:
    return asyncio.run(backend.alisted_statuses(handles))


def test_one_listing_answers_jobs_of_two_kinds_as_astatus_does(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    backend = AckBackend(**settings())
    handles = [submit(backend, f"{state}-pt") for state in SCRIPTS]
    handles += [submit(backend, f"{state}-tf", "tensorflow") for state in ("running", "failed")]
    settle(fake, clock)
    before = len(fake.requests)

    statuses = listed(backend, handles)

    assert isinstance(backend, StatusListing)
    made = fake.requests[before:]
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in made] == [
        ("GET", "pytorchjobs"),
        ("GET", "pods"),
        ("GET", "tfjobs"),
        ("GET", "pods"),
    ], "one CR list and one pod list per kind"
    assert all(r.query["labelSelector"].startswith("release in (") for r in made)
    assert [statuses[h.job_id].state for h in handles] == [
        JobState.PENDING,
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.RUNNING,
        JobState.FAILED,
    ]
    for handle in handles:
        alone = asyncio.run(AckBackend(**settings()).astatus(handle))
        assert same_state(statuses[handle.job_id], alone), handle.name
        assert (statuses[handle.job_id].state, statuses[handle.job_id].raw) == (alone.state, alone.raw)
    assert statuses[handles[3].job_id].failed_node is not None, "the failed job's pods were read"


@pytest.mark.slow
def test_requests_per_poll_stay_two_per_kind_until_a_selector_is_full(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """3 jobs and a full selector's 100 take one CR list and one pod list; the 101st job one more
    of each. (One node a job: the fake reconciles every object on every request.)"""
    backend = AckBackend(**settings())
    handles: list[JobHandle] = []
    made = {}
    for count in (3, RELEASES_PER_SELECTOR, RELEASES_PER_SELECTOR + 1):
        handles += [submit(backend, f"running-{n}", nodes=1) for n in range(len(handles), count)]
        settle(fake, clock)
        before = len(fake.requests)
        statuses = listed(backend, handles)
        made[count] = len(fake.requests) - before
        assert len(statuses) == count
        assert {status.state for status in statuses.values()} == {JobState.RUNNING}

    assert made == {3: 2, 100: 2, 101: 4}


def test_a_deleted_or_replaced_job_is_left_out_for_astatus_to_tell(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    backend = AckBackend(**settings())
    kept, deleted, replaced = (
        submit(backend, name) for name in ("running-kept", "running-gone", "failed-again")
    )
    settle(fake, clock)
    backend.stop(deleted)
    newer = submit(backend, replaced.name)  # the failed attempt is deleted and the job created afresh
    settle(fake, clock)

    statuses = listed(backend, [kept, deleted, replaced, newer])

    assert set(statuses) == {kept.job_id, newer.job_id}
    assert asyncio.run(backend.astatus(deleted)).state in (JobState.STOPPING, JobState.STOPPED)
    with pytest.raises(LookupError, match="replaced by a newer attempt"):
        asyncio.run(backend.astatus(replaced))


def test_another_namespace_or_a_longer_release_name_is_not_mixed_in(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    """A failed job whose name begins with the watched one's, and a failed job of the same name in
    another namespace: neither one's pods reach the running job's status."""
    backend, elsewhere = AckBackend(**settings()), AckBackend(**settings(namespace=OTHER_NS))
    watched = submit(backend, "running-ab")
    fake.reconcile()  # the watched job takes its script now; every later "running-ab..." one fails
    fake.script_for("running-ab", SCRIPTS["failed"])
    longer, same_name = submit(backend, "running-ab-2"), submit(elsewhere, "running-ab")
    settle(fake, clock)

    statuses = listed(backend, [watched])

    assert asyncio.run(backend.astatus(longer)).state is JobState.FAILED
    assert asyncio.run(elsewhere.astatus(same_name)).state is JobState.FAILED
    status = statuses[watched.job_id]
    assert status.state is JobState.RUNNING and status.failed_node is None
    assert same_state(status, asyncio.run(AckBackend(**settings()).astatus(watched)))
    pods = backend._listed[watched.job_id][1]
    assert sorted(pod["metadata"]["name"] for pod in pods) == ["running-ab-master-0", "running-ab-worker-0"]
    assert {(pod["metadata"]["namespace"], pod["metadata"]["labels"]["release"]) for pod in pods} == {
        (NS, "running-ab")
    }


def test_a_log_read_after_the_listing_reuses_its_pods_until_forget(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    backend = AckBackend(**settings())
    handle = submit(backend, "running-logs")
    settle(fake, clock)
    listed(backend, [handle])

    def pod_lists() -> int:
        return sum(1 for r in fake.requests if r.method == "GET" and r.path.endswith("/pods"))

    before = pod_lists()
    chunk = backend.logs(handle)
    assert set(chunk.cursor["pods"]) == {"running-logs-master-0", "running-logs-worker-0"}, "both pods read"
    assert pod_lists() == before, "the log read reuses the pods the listing read"

    backend.forget(handle)
    backend.logs(handle)
    assert pod_lists() == before + 1, "forgotten: the log read lists them itself"
    backend.forget(handle)  # forgetting a job twice is no error


def test_a_kind_the_cluster_does_not_serve_leaves_its_jobs_out(
    fake: KubernetesFake, clock: ManualClock
) -> None:
    backend = AckBackend(**settings())
    pytorch, tensorflow = submit(backend, "running-pt"), submit(backend, "running-tf", "tensorflow")
    settle(fake, clock)
    fake.fail_next("GET", "/tfjobs", status=404)

    assert set(listed(backend, [pytorch, tensorflow])) == {pytorch.job_id}


def test_the_batch_key_is_shared_only_by_identical_settings() -> None:
    key = AckBackend(**settings(nccl_env={"A": "1", "B": "2"})).batch_key

    assert key.startswith("arena:")
    assert AckBackend(**settings(nccl_env={"B": "2", "A": "1"})).batch_key == key
    assert AckBackend(**settings(namespace=OTHER_NS, nccl_env={"A": "1", "B": "2"})).batch_key != key
    assert AckBackend(**settings(kubernetes_conn_id="other", nccl_env={"A": "1", "B": "2"})).batch_key != key
