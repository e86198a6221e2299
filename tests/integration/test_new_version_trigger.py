"""The versions watcher's trigger, its ``run()`` on an event loop against the local object store and
the OSS emulator (oss2 over HTTP): the baseline, the marker, one announcement per version in order,
and nothing announced again by a rebuilt trigger."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.triggers.new_version import TAKEN_KEY, WATERMARK_KEY, NewVersionTrigger
from fakes.cloud import BUCKET, emulated_oss

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

ASSET = "cifar10_retrain_versions"
CONNECTION = "alibaba_cloud_default"
#: Long enough for many polls of ``POLL`` seconds, each a listing and a look at each unseen version.
#: The longest a collection may take before the test fails instead of hanging.
SAFETY = 120
POLL = 0.02


class StateStore:
    """The asset state store as the triggerer hands it a watcher (and a run's context), in memory;
    values go through JSON as they do through the API."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __getitem__(self, ref: Any) -> StateStore:
        assert ref.name == ASSET, "the watcher reads its own Asset's state"
        return self

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))


class Source:
    """A dataset's source: where versions land (``land``), and the template the watcher lists."""

    def __init__(self, template: str, put: Callable[[str, bytes], None]) -> None:
        self.template = template
        self.put = put

    def land(self, version: str, marker: bool = True) -> None:
        self.put(f"cifar10/{version}/train.npz", f"images of {version}".encode())
        if marker:
            self.put(f"cifar10/{version}/_SUCCESS", b"")

    def trigger(self, marker: str | None = "_SUCCESS", take_timeout: float = 3600.0) -> NewVersionTrigger:
        return NewVersionTrigger(
            asset=ASSET,
            dataset="cifar10",
            source_uri=self.template,
            alibaba_cloud_conn_id=CONNECTION,
            take_timeout=take_timeout,
            marker=marker,
            poll_interval=POLL,
        )


@pytest.fixture(params=["local", "oss"])
def source(
    request: pytest.FixtureRequest, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Source]:
    if request.param == "local":
        store = local_root / "object-store"

        def put_file(key: str, body: bytes) -> None:
            (store / key).parent.mkdir(parents=True, exist_ok=True)
            (store / key).write_bytes(body)

        yield Source(f"file://{store}/{{dataset}}/{{version}}/", put_file)
        return
    with emulated_oss(monkeypatch) as oss:
        yield Source(
            f"oss://{BUCKET}/datasets/{{dataset}}/{{version}}/",
            lambda key, body: oss.put(BUCKET, f"datasets/{key}", body),
        )


def announced(trigger: NewVersionTrigger, store: StateStore, polls: int = 4, events: int = 0) -> list[str]:
    """The versions ``trigger.run()`` announces in ``polls`` looks at the source (and, with
    ``events``, however many more looks it takes to announce that many), in order. Counting looks,
    not seconds, keeps a slow listing on a loaded machine from ending the collection early."""
    trigger.asset_state_store = store  # type: ignore[assignment]  # the triggerer injects the real one
    looked = 0
    poll = trigger._poll

    async def counted(state: Any) -> str | None:
        nonlocal looked
        try:
            return await poll(state)
        finally:
            looked += 1

    trigger._poll = counted  # type: ignore[method-assign]

    async def collect() -> list[str]:
        versions: list[str] = []

        async def consume() -> None:
            async for event in trigger.run():
                assert event.payload["dataset"] == "cifar10"
                assert event.payload["source_uri"] == trigger.source_uri.format(
                    dataset="cifar10", version=event.payload["version"]
                )
                versions.append(event.payload["version"])

        # A look and the announcement it makes happen with no await between them: counting looks
        # from outside never stops between the two.
        consumer = asyncio.create_task(consume())
        try:
            async with asyncio.timeout(SAFETY):
                while looked < polls or len(versions) < events:
                    if consumer.done():
                        consumer.result()  # a failed assertion inside
                    await asyncio.sleep(POLL / 4)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
        return versions

    return asyncio.run(collect())


@pytest.mark.slow
def test_versions_there_at_the_first_look_are_the_baseline_and_only_a_version_landing_later_is_announced(
    source: Source,
) -> None:
    store = StateStore()
    source.land("2026-11-01")
    source.land("2026-11-08")

    baseline = announced(source.trigger(), store)
    recorded = store.values[WATERMARK_KEY]["versions"]
    source.land("2026-11-15", marker=False)
    without_marker = announced(source.trigger(), store)
    source.put("cifar10/2026-11-15/_SUCCESS", b"")
    trigger = source.trigger()
    with_marker = announced(trigger, store)
    store.values[TAKEN_KEY] = "2026-11-15"  # the run took it
    again = announced(trigger, store)
    after_restart = announced(source.trigger(), store)

    assert baseline == [] and recorded == ["2026-11-01", "2026-11-08"]
    assert without_marker == [], "a version without its completion marker has not landed"
    assert with_marker == ["2026-11-15"]
    assert again == [] and after_restart == [], "announced once, also by a trigger rebuilt after a restart"
    assert store.values[WATERMARK_KEY]["announced"] == "2026-11-15"


@pytest.mark.slow
def test_two_new_versions_are_announced_oldest_first_each_once_a_run_took_the_one_before(
    source: Source,
) -> None:
    store = StateStore()
    source.land("v9")
    announced(source.trigger(), store)
    source.land("v11")
    source.land("v10")

    first = announced(source.trigger(), store)
    held = announced(source.trigger(), store)
    store.values[TAKEN_KEY] = "v10"
    second = announced(source.trigger(), store)
    store.values[TAKEN_KEY] = "v11"
    after = announced(source.trigger(), store)

    assert first == ["v10"], "numbers compare as numbers: v10 before v11, one announcement per run"
    assert held == [], "v11 waits until a run took v10, so the two are not folded into one run"
    assert (second, after) == (["v11"], [])


@pytest.mark.slow
def test_a_version_still_uploading_at_the_first_look_is_announced_once_it_lands(source: Source) -> None:
    store = StateStore()
    source.land("2026-11-01")
    source.land("2026-11-08", marker=False)

    baseline = announced(source.trigger(), store)
    source.put("cifar10/2026-11-08/_SUCCESS", b"")
    landed = announced(source.trigger(), store)

    assert (baseline, landed) == ([], ["2026-11-08"])


def test_without_a_marker_the_baseline_is_taken_a_poll_later_and_a_new_version_lands_once_it_holds_still(
    source: Source,
) -> None:
    store = StateStore()
    source.land("2026-11-01", marker=False)

    baseline = announced(source.trigger(marker=None), store)
    recorded = store.values[WATERMARK_KEY]["versions"]
    source.land("2026-11-08", marker=False)
    landed = announced(source.trigger(marker=None), store)

    assert baseline == [] and recorded == ["2026-11-01"]
    assert landed == ["2026-11-08"]


@pytest.mark.slow
def test_an_announcement_no_run_takes_holds_the_next_back_for_the_take_timeout_only(source: Source) -> None:
    store = StateStore()
    announced(source.trigger(), store)
    source.land("v1")
    source.land("v2")
    trigger = source.trigger(take_timeout=2.0)

    first = announced(trigger, store)
    next_after_timeout = announced(trigger, store, polls=0, events=1)

    assert (first, next_after_timeout) == (["v1"], ["v2"])


@pytest.mark.slow
def test_a_moved_source_is_a_new_baseline_not_a_flood_of_runs(source: Source) -> None:
    store = StateStore()
    store.values[WATERMARK_KEY] = {
        "folder": "oss://elsewhere/cifar10/",
        "versions": ["v1"],
        "announced": "v1",
    }
    source.land("v1")
    source.land("v2")

    assert announced(source.trigger(), store) == []
    assert store.values[WATERMARK_KEY]["versions"] == ["v1", "v2"]


def test_the_trigger_round_trips_through_its_serialized_arguments(source: Source) -> None:
    trigger = source.trigger()
    classpath, kwargs = trigger.serialize()

    rebuilt = NewVersionTrigger(**json.loads(json.dumps(kwargs)))

    assert classpath == "aliyun_training.triggers.new_version.NewVersionTrigger"
    assert rebuilt.serialize() == (classpath, kwargs)
