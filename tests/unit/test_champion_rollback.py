"""Rolling the champion pointer back (``champion.ChampionPointer.roll_back``): to the champion the
current one replaced, or to a named one; the registry's pointer first and the state last, as a
promotion moves them; refused, with nothing moved, where there is nothing to go back to.

The champion Asset's state is a dict with the store's interface; the registry records what it was
asked to do, in order with the state's writes.
"""

from __future__ import annotations

from typing import Any

import pytest

from aliyun_training.champion import (
    CHAMPION_KEY,
    HISTORY_LIMIT,
    ChampionPointer,
    RollbackRefused,
    named,
)
from aliyun_training.model_registry.base import RegisteredVersion, RegistryError, RegistrySettings
from aliyun_training.promotion import Champion
from aliyun_training.stage_records import ArtifactSet

SETTINGS = RegistrySettings(kind="mlflow", model="cifar10", tracking_uri="http://mlflow.internal")


def _champion(n: int, registry: RegistrySettings | None = SETTINGS) -> Champion:
    run_id = f"scheduled__2026-11-{n:02d}"
    return Champion(
        run_id=run_id,
        dataset_version=f"v{n}",
        artifacts=ArtifactSet(
            uri=f"/sets/{run_id}", manifest_uri=f"/sets/{run_id}/m", report_uri="r", metrics={}
        ),
        metrics={"test_accuracy": 0.5 + n / 100},
        registered=RegisteredVersion(
            registry="mlflow", model="cifar10", version=str(n), uri=f"models:/cifar10/{n}", run_id=run_id
        ),
        registry=registry,
    )


class State:
    """The champion Asset's state, logging each write of the pointer."""

    def __init__(self, log: list[str], stored: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = {CHAMPION_KEY: stored} if stored else {}
        self.log = log

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.log.append(f"state -> {value['run_id']}")
        self.values[key] = value


class Registry:
    """The registry's champion pointer; ``fails`` makes it refuse to move."""

    def __init__(self, log: list[str], fails: bool = False) -> None:
        self.log, self.fails = log, fails
        self.opened: list[RegistrySettings] = []

    def open(self, settings: RegistrySettings) -> Registry:
        self.opened.append(settings)
        return self

    def promote(self, version: RegisteredVersion) -> None:
        if self.fails:
            raise RegistryError("MLflow at http://mlflow.internal answered 503")
        self.log.append(f"registry -> {version.version}")


def _promoted(*numbers: int) -> tuple[ChampionPointer, list[str], Registry]:
    """A pointer that promotions moved to each champion of ``numbers`` in turn."""
    log: list[str] = []
    pointer, registry = ChampionPointer(State(log)), Registry(log)
    previous: str | None = None
    for n in numbers:
        champion = _champion(n)
        pointer.compare_and_set(previous, champion, registry)  # type: ignore[arg-type]
        previous = champion.run_id
    log.clear()
    return pointer, log, registry


def _versions(pointer: ChampionPointer) -> list[tuple[str | None, str]]:
    return [(past.version, past.left) for past in pointer.history()]


def test_each_promotion_keeps_the_champion_it_replaced_newest_first_up_to_the_limit() -> None:
    pointer, _, _ = _promoted(*range(1, HISTORY_LIMIT + 4))
    history = pointer.history()
    assert [past.version for past in history] == [str(n) for n in range(HISTORY_LIMIT + 2, 2, -1)]
    assert {past.left for past in history} == {"replaced"} and {past.by for past in history} == {None}
    current = pointer.read()
    assert current is not None and current.registered is not None
    assert current.registered.version == str(HISTORY_LIMIT + 3)


def test_a_rollback_moves_the_registry_first_then_the_state_to_the_champion_it_replaced() -> None:
    pointer, log, registry = _promoted(1, 2, 3)
    done = pointer.roll_back(None, "alice", registry.open)  # type: ignore[arg-type]
    assert log == ["registry -> 2", "state -> scheduled__2026-11-02"]
    assert registry.opened == [SETTINGS], "the registry the past champion was promoted in"
    current = pointer.read()
    assert current == done.champion and current is not None
    assert (current.run_id, current.rolled_back_by) == ("scheduled__2026-11-02", "alice")
    assert done.replaced.run_id == "scheduled__2026-11-03"
    # The one rolled back from stays, marked, at the head; the one rolled back to left the history.
    assert _versions(pointer) == [("3", "rolled back"), ("1", "replaced")]
    assert pointer.history()[0].by == "alice"
    assert named(done.champion) == "version 2 of cifar10, dataset v2 (run scheduled__2026-11-02)"


def test_a_second_rollback_goes_further_back_and_naming_the_one_rolled_back_from_undoes_it() -> None:
    pointer, log, registry = _promoted(1, 2, 3)
    pointer.roll_back(None, "alice", registry.open)  # type: ignore[arg-type]
    pointer.roll_back(None, "bob", registry.open)  # type: ignore[arg-type]
    assert (pointer.read() or _champion(0)).run_id == "scheduled__2026-11-01"
    assert _versions(pointer) == [("2", "rolled back"), ("3", "rolled back")]
    # By its run id as well as by its version.
    pointer.roll_back("scheduled__2026-11-03", "carol", registry.open)  # type: ignore[arg-type]
    assert log[-2:] == ["registry -> 3", "state -> scheduled__2026-11-03"]
    assert _versions(pointer) == [("1", "rolled back"), ("2", "rolled back")]
    # A promotion afterwards replaces the rolled-back-to champion as any other.
    pointer.compare_and_set("scheduled__2026-11-03", _champion(4), registry)  # type: ignore[arg-type]
    assert _versions(pointer) == [("3", "replaced"), ("1", "rolled back"), ("2", "rolled back")]
    assert (pointer.read() or _champion(0)).rolled_back_by is None


@pytest.mark.parametrize(
    ("numbers", "to", "refusal"),
    [
        ((), None, "there is no champion to roll back from: no model was promoted yet"),
        ((1,), None, "no champion before run scheduled__2026-11-01 to roll back to: it was the first"),
        (
            (1, 2),
            "2",
            "to: 2 is the champion already (fix: name a past champion; its past champions: 1 (run ",
        ),
        ((1, 2), "scheduled__2026-11-02", "to: scheduled__2026-11-02 is the champion already"),
        (
            (1, 2),
            "7",
            "to: '7' is no past champion of this pipeline (fix: name one of its past champions: 1 (run ",
        ),
    ],
)
def test_a_rollback_with_nothing_to_go_back_to_is_refused_and_moves_nothing(
    numbers: tuple[int, ...], to: str | None, refusal: str
) -> None:
    pointer, log, registry = _promoted(*numbers)
    before = pointer.read(), pointer.history()
    with pytest.raises(RollbackRefused) as refused:
        pointer.roll_back(to, "alice", registry.open)  # type: ignore[arg-type]
    assert str(refused.value).startswith(refusal)
    assert log == [] and (pointer.read(), pointer.history()) == before


def test_only_champions_rolled_back_from_remain_and_none_to_go_back_to_says_how_to_name_one() -> None:
    pointer, _, registry = _promoted(1, 2)
    pointer.roll_back(None, "alice", registry.open)  # type: ignore[arg-type]
    with pytest.raises(
        RollbackRefused, match=r"no champion before run scheduled__2026-11-01 to roll back to \("
    ):
        pointer.roll_back(None, "bob", registry.open)  # type: ignore[arg-type]
    pointer.roll_back("2", "bob", registry.open)  # type: ignore[arg-type]
    assert (pointer.read() or _champion(0)).run_id == "scheduled__2026-11-02"


def test_a_registry_that_refuses_leaves_the_state_on_the_champion() -> None:
    pointer, log, _ = _promoted(1, 2)
    before = pointer.read(), pointer.history()
    with pytest.raises(RegistryError):
        pointer.roll_back(None, "alice", Registry(log, fails=True).open)  # type: ignore[arg-type]
    assert log == [] and (pointer.read(), pointer.history()) == before


def test_a_champion_recorded_before_registries_takes_the_promoting_runs_registry_where_it_is_the_same() -> (
    None
):
    log: list[str] = []
    old = _champion(1, registry=None)
    pointer, registry = ChampionPointer(State(log, old.model_dump(mode="json"))), Registry(log)
    assert pointer.history() == [], "a pointer written before it kept a history"
    pointer.compare_and_set(old.run_id, _champion(2), registry)  # type: ignore[arg-type]
    assert pointer.history()[0].champion.registry == SETTINGS
    pointer.roll_back(None, "alice", registry.open)  # type: ignore[arg-type]
    assert log[-2:] == ["registry -> 1", "state -> scheduled__2026-11-01"]

    # Another registered model's settings say nothing of where the old version is: refused.
    other = SETTINGS.model_copy(update={"model": "cifar10-v2"})
    pointer = ChampionPointer(State(log, old.model_dump(mode="json")))
    pointer.compare_and_set(old.run_id, _champion(2).model_copy(update={"registry": other}), registry)  # type: ignore[arg-type]
    assert pointer.history()[0].champion.registry is None
    with pytest.raises(RollbackRefused, match="promoted before champions recorded their registry"):
        pointer.roll_back(None, "alice", registry.open)  # type: ignore[arg-type]
