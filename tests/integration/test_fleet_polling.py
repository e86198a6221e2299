"""Triggers of one account and workspace share one status listing (``triggers/fleet.py``), through
the real DLC SDK against the DLC emulator: how many requests a poll takes, and that every trigger
still ends with its own job's outcome when jobs disappear, triggers are cancelled mid-listing, two
accounts share a triggerer and the listing is throttled."""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.hooks.rate_limit import LATE_SLOTS, forget_limiters
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.triggers import fleet
from aliyun_training.triggers.training import TrainingJobTrigger
from fakes.base import FaultPlan
from fakes.cloud import dlc_backend, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator, JobScript
from tests.operator_harness import fire

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "LTAI-fleet-access-key", "fleet-secret-access-key-value"
OTHER_AK, OTHER_SK = "LTAI-other-account-key", "other-account-secret-value"
POLL = 0.1
#: How long the emulator holds a listing back, to cancel a trigger while its page is in flight.
HELD = 0.5

#: Queued, then running and logging, then done: a job of each phase a fleet holds at once.
SCRIPT = JobScript(
    phases=[("Creating", 0.05), ("Queuing", 0.4), ("Running", 0.8)],
    log_lines=["epoch 1 loss=2.0", "epoch 2 loss=1.5", "epoch 3 loss=1.0"],
)


@pytest.fixture
def dlc(monkeypatch: pytest.MonkeyPatch) -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        emulator.default_script = SCRIPT
        use_alibaba_connection(monkeypatch, {"dlc": emulator.endpoint}, AK, SK)
        yield emulator
        assert emulator.internal_errors == []


def submit(
    count: int, conn_id: str = "alibaba_cloud_default", prefix: str = "fleet"
) -> list[TrainingJobTrigger]:
    """``count`` one-node jobs, and the triggers a deferring task would hand the triggerer for them."""
    backend = dlc_backend(alibaba_cloud_conn_id=conn_id, workspace_id="ws-1")
    spec = TrainingJobSpec.model_validate(
        dlc_job(nodes=1, gpus_per_node=1, cpu=8, memory_gib=64, command="python train.py")
    )
    triggers = []
    for index in range(count):
        handle = backend.submit(spec, f"{prefix}-{index}")
        triggers.append(
            TrainingJobTrigger(
                backend="dlc",
                handle=handle.model_dump(),
                backend_config=backend.config,
                poll_interval=POLL,
                last_raw_status="Creating",
            )
        )
    return triggers


def job_ids(triggers: list[TrainingJobTrigger]) -> set[str]:
    return {trigger.handle["job_id"] for trigger in triggers}


def listed_ids(emulator: DlcEmulator) -> list[set[str]]:
    """The JobIds each ListJobs request asked for, in order."""
    return [set(request.query["JobIds"].split(",")) for request in emulator.requests_for("ListJobs")]


async def fire_all(triggers: list[TrainingJobTrigger]) -> list[dict[str, Any]]:
    return await asyncio.gather(*(fire(trigger) for trigger in triggers))


def test_jobs_of_one_workspace_are_listed_together_and_each_trigger_gets_its_own_outcome(
    dlc: DlcEmulator,
) -> None:
    triggers = submit(5)
    before = len(dlc.requests)

    outcomes = asyncio.run(fire_all(triggers))

    assert [outcome["status"] for outcome in outcomes] == ["succeeded"] * 5
    assert [outcome["handle"]["job_id"] for outcome in outcomes] == [t.handle["job_id"] for t in triggers]
    listings = listed_ids(dlc)
    assert listings and all(ids <= job_ids(triggers) for ids in listings)
    assert listings[0] == job_ids(triggers), "the first poll lists every job in one request"
    polls = len(listings)
    get_job = len(dlc.requests_for("GetJob"))
    # Details only on a change: Creating -> Queuing -> Running -> Succeeded, at most three per job,
    # where polling each job alone would have asked GetJob on every poll.
    assert get_job <= 3 * 5 < polls * 5, (get_job, polls)
    assert len(dlc.requests) - before == polls + get_job + len(dlc.requests_for("GetPodLogs"))
    for trigger, outcome in zip(triggers, outcomes, strict=True):
        assert outcome["job_status"]["raw"] == "Succeeded", trigger.handle


@pytest.mark.slow
def test_a_steady_jobs_logs_are_read_at_the_steady_pace_and_each_line_reaches_the_log_once(
    dlc: DlcEmulator, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs every poll for steady_log_seconds after the job starts running, then every
    steady_log_seconds, and at the end: far fewer reads than polls, and no line lost or doubled."""
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__STEADY_LOG_SECONDS", "0.5")
    dlc.default_script = JobScript(
        phases=[("Creating", 0.05), ("Running", 4.0)],
        log_lines=[f"step {step}" for step in range(40)],
    )
    triggers = submit(2)

    asyncio.run(fire_all(triggers))

    output = capfd.readouterr().out
    for step in range(40):
        assert output.count(f"[node-0] step {step} ") == 2, step
    polls = len(dlc.requests_for("ListJobs"))
    reads = len(dlc.requests_for("GetPodLogs")) / 2
    # While running (40 polls): 5 in the half second after it started, then one each half second,
    # then the end; every poll would be 40.
    assert polls >= 40 and reads <= polls / 2, (reads, polls)


def test_a_job_that_disappears_from_the_listing_ends_its_trigger_with_the_platform_error(
    dlc: DlcEmulator,
) -> None:
    triggers = submit(3)
    gone = triggers[1].handle["job_id"]

    async def run() -> list[dict[str, Any]]:
        tasks = [asyncio.create_task(fire(trigger)) for trigger in triggers]
        while not dlc.requests_for("ListJobs"):
            await asyncio.sleep(0.01)
        del dlc.jobs[gone]  # deleted by someone else between two polls
        return await asyncio.gather(*tasks)

    outcomes = asyncio.run(run())

    assert [outcome["status"] for outcome in outcomes] == ["succeeded", "error", "succeeded"]
    assert "JobNotFound" in outcomes[1]["message"]
    assert all(gone not in ids for ids in listed_ids(dlc)[-1:]), "a job no trigger watches is not listed"


def test_a_page_that_arrives_after_a_trigger_was_cancelled_goes_to_the_others_and_on_kill_stops_the_job(
    dlc: DlcEmulator,
) -> None:
    triggers = submit(3)
    killed = triggers[0]

    cancelled_at = 0.0

    async def run() -> list[dict[str, Any]]:
        nonlocal cancelled_at
        tasks = [asyncio.create_task(fire(trigger)) for trigger in triggers]
        while not dlc.requests_for("ListJobs"):
            await asyncio.sleep(0.01)
        dlc.faults = FaultPlan(slow_rate=1.0, slow_seconds=HELD, actions=frozenset({"ListJobs"}))
        await asyncio.sleep(POLL + 0.1)  # the next listing is now held back by the emulator
        # The user marks the first task failed while that page is in flight.
        cancelled_at = time.time()
        tasks[0].cancel()
        await killed.on_kill()
        dlc.faults = FaultPlan()
        rest = await asyncio.gather(*tasks[1:])
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        return rest

    outcomes = asyncio.run(run())

    held = [
        r for r in dlc.requests_for("ListJobs") if r.fault == "slow" and r.at < cancelled_at < r.at + HELD
    ]
    assert any(killed.handle["job_id"] in r.query["JobIds"] for r in held), "its page was in flight"
    assert [outcome["status"] for outcome in outcomes] == ["succeeded", "succeeded"]
    (stop,) = dlc.requests_for("StopJob")
    assert killed.handle["job_id"] in stop.path
    assert killed.handle["job_id"] not in listed_ids(dlc)[-1], "the cancelled trigger left the poller"


def test_two_accounts_in_one_triggerer_each_list_only_their_own_jobs(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DlcEmulator({OTHER_AK: OTHER_SK}) as other:
        other.default_script = SCRIPT
        use_alibaba_connection(
            monkeypatch, {"dlc": other.endpoint}, OTHER_AK, OTHER_SK, conn_id="other_account"
        )
        ours, theirs = submit(2), submit(2, conn_id="other_account", prefix="theirs")

        outcomes = asyncio.run(fire_all([*ours, *theirs]))

        assert [outcome["status"] for outcome in outcomes] == ["succeeded"] * 4
        assert listed_ids(dlc)[0] == job_ids(ours)
        assert listed_ids(other)[0] == job_ids(theirs)
        assert other.internal_errors == []


def test_a_throttled_listing_backs_off_and_every_trigger_still_ends_right(dlc: DlcEmulator) -> None:
    triggers = submit(4)
    dlc.faults = FaultPlan(throttle_rate=0.5, actions=frozenset({"ListJobs"}), seed=3)

    outcomes = asyncio.run(fire_all(triggers))

    assert [outcome["status"] for outcome in outcomes] == ["succeeded"] * 4
    throttled = [request for request in dlc.requests_for("ListJobs") if request.fault == "throttle"]
    assert throttled, "the plan throttled some listings"


def test_the_last_trigger_to_leave_ends_the_poller_and_the_next_starts_another(dlc: DlcEmulator) -> None:
    first, second = submit(2)

    async def run() -> None:
        assert (await fire(first))["status"] == "succeeded"
        assert fleet._pollers[asyncio.get_running_loop()] == {}, "no watcher, no poller"
        assert (await fire(second))["status"] == "succeeded"

    asyncio.run(run())

    listings = listed_ids(dlc)
    switch = listings.index({second.handle["job_id"]})
    assert switch > 0 and all(ids == {first.handle["job_id"]} for ids in listings[:switch])
    assert all(ids == {second.handle["job_id"]} for ids in listings[switch:])


def test_with_batching_off_each_trigger_polls_its_own_job(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__BATCHED_STATUS", "False")
    triggers = submit(2)

    outcomes = asyncio.run(fire_all(triggers))

    assert [outcome["status"] for outcome in outcomes] == ["succeeded"] * 2
    assert dlc.requests_for("ListJobs") == []
    assert len(dlc.requests_for("GetJob")) > 2 * 3


#: The restarted triggerer's limit for every DLC API, lower than the default so the ramp shows.
RESTART_RATE = 150
#: Seconds a request may spend between leaving its slot and being recorded by the emulator (the
#: SDK's signing, the emulator's threads, all in this one busy process): a bound's tolerance.
ARRIVAL_JITTER = 0.05


@pytest.mark.slow
def test_a_restarted_triggerer_with_1000_triggers_stays_under_the_rate_limit_and_ends_each_right(
    dlc: DlcEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer that held 1,000 deferred tasks restarts: it inflates each trigger from its
    kwargs at once (their last status from long ago, so each reads its job's details and logs
    first). Its buckets start empty: every API's requests arrive at most RESTART_RATE in any second,
    and each trigger still ends with its own job's outcome."""
    dlc.default_script = JobScript(phases=[("Creating", 0.05), ("Running", 8.0)], log_lines=["training"])
    backend = dlc_backend(workspace_id="ws-1")
    spec = TrainingJobSpec.model_validate(
        dlc_job(nodes=1, gpus_per_node=1, cpu=8, memory_gib=64, command="python train.py")
    )

    gate = asyncio.Semaphore(16)  # the emulator's listen backlog is small

    async def create(index: int) -> str:
        request = backend.create_request(spec, f"restart-{index:04d}")
        async with gate:
            return (await backend.hook.conn.create_job_async(request)).body.job_id

    async def create_all() -> list[str]:
        return list(await asyncio.gather(*(create(index) for index in range(1000))))

    ids = asyncio.run(create_all())
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__API_RATE_LIMITS", json.dumps({"dlc": RESTART_RATE}))
    forget_limiters()  # the restarted process
    kwargs = [
        TrainingJobTrigger(
            backend="dlc",
            handle={"backend": "dlc", "job_id": job_id, "name": f"restart-{index:04d}"},
            backend_config=backend.config,
            poll_interval=1.0,
            last_raw_status="Queuing",
        ).serialize()[1]
        for index, job_id in enumerate(ids)
    ]
    restarted_at = time.time()

    outcomes = asyncio.run(fire_all([TrainingJobTrigger(**each) for each in kwargs]))

    assert [outcome["status"] for outcome in outcomes] == ["succeeded"] * 1000
    assert [outcome["handle"]["job_id"] for outcome in outcomes] == ids
    after = [request for request in dlc.requests if request.at >= restarted_at]
    for action in {request.action for request in after}:
        times = sorted(request.at for request in after if request.action == action)
        busiest = max(bisect.bisect_left(times, start + 1.0) - first for first, start in enumerate(times))
        # The bucket's bound (a burst of 1, a waiter up to LATE_SLOTS slots late), and what requests
        # sent a slot apart may gain on each other on the way: ARRIVAL_JITTER of the rate.
        assert busiest <= RESTART_RATE * (1 + ARRIVAL_JITTER) + 1 + LATE_SLOTS, (action, busiest)
    assert len([request for request in after if request.action == "GetJob"]) >= 1000, "details once each"
