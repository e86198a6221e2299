"""The promote task: it moves the champion pointer (the registry's first, the champion Asset's state
last) only to a candidate the gate and the approval passed, and only while the pointer still names
the champion the gate compared with, also when it moves between the task's read and its write.

The published sets are real (``publish_artifacts`` with a gate, as the publish task runs it); the
champion Asset's state, the outlet events, the task instance and the model registry are stand-ins
with their interfaces, recording what the task did to them, in order.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowSkipException

from aliyun_training import seals
from aliyun_training.artifacts.collect import publish_artifacts
from aliyun_training.champion import CHAMPION_KEY, OUTCOME_KEY, pointer_drift
from aliyun_training.model_registry.base import RegisteredVersion
from aliyun_training.operators.promotion import PromoteOperator
from aliyun_training.promotion import Approval, Champion, Comparison, Decision, PromotionRule, decide
from aliyun_training.stage_records import ApprovalAnswer, ArtifactSet
from tests.operator_harness import MANUAL_RUN, TaskInstanceIds
from tests.unit.test_artifacts import DATASET, RUNTIME, _job, _job_output

if TYPE_CHECKING:
    from collections.abc import Iterator

RUN = MANUAL_RUN
ASSET = Asset(name="cifar10-resnet_champion", uri="model://cifar10-resnet/champion")
#: The candidate scores 0.63 (its final test accuracy): better than either champion's 0.5.
RULE = PromotionRule(metric="final_test_accuracy")
REGISTRY = {"kind": "mlflow", "model": "cifar10-resnet", "tracking_uri": "http://mlflow.internal"}


def _champion(run_id: str, version: str) -> Champion:
    return Champion(
        run_id=run_id,
        dataset_version="v0",
        artifacts=ArtifactSet(uri=f"/sets/{run_id}", manifest_uri="m", report_uri="r", metrics={}),
        metrics={"final_test_accuracy": 0.5},
        registered=RegisteredVersion(
            registry="mlflow",
            model="cifar10-resnet",
            version=version,
            uri=f"models:/x/{version}",
            run_id=run_id,
        ),
    )


#: The champion the gate compared with, and one that another run made the champion since.
OLD = _champion("scheduled__2026-11-15", "1")
OTHER = _champion("manual__2026-11-21", "2")
#: The candidate's version, registered by the publish task.
CANDIDATE = RegisteredVersion(
    registry="mlflow", model="cifar10-resnet", version="3", uri="models:/cifar10-resnet/3", run_id=RUN.run_id
)


class ChampionState:
    """The champion Asset's state; ``moves_to``, when given, is written by someone else right after
    the task's first read (another promotion between this task's read and its write)."""

    def __init__(self, log: list[str], champion: Champion | None, moves_to: Champion | None = None) -> None:
        self.value = champion.model_dump(mode="json") if champion else None
        self.log, self.moves_to = log, moves_to

    def get(self, key: str, default: Any = None) -> Any:
        assert key == CHAMPION_KEY
        value = self.value
        if self.moves_to is not None:
            self.value, self.moves_to = self.moves_to.model_dump(mode="json"), None
        return value if value is not None else default

    def set(self, key: str, value: Any) -> None:
        assert key == CHAMPION_KEY
        self.log.append(f"state -> {value['run_id']}")
        self.value = value

    @property
    def champion(self) -> str | None:
        return self.value["run_id"] if self.value else None


class Registry:
    """The model registry's champion pointer (``ModelRegistry.promote``)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def promote(self, version: RegisteredVersion) -> None:
        self.log.append(f"registry -> {version.version}")

    def reject(self, version: RegisteredVersion, reason: str) -> None:
        self.log.append(f"registry rejects {version.version}: {reason}")


class Events:
    """``outlet_events``: the champion events the task adds, by the alias they go through."""

    def __init__(self) -> None:
        self.added: list[dict[str, Any]] = []

    def __getitem__(self, alias: Any) -> Events:
        return self

    def add(self, asset: Asset, extra: dict[str, Any]) -> None:
        assert asset == ASSET
        self.added.append(extra)


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__SEAL_SECRET", "a deployment secret")
    seals._secret.cache_clear()
    yield
    seals._secret.cache_clear()


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What moved, in order; the plan's registry is the recording stand-in."""
    moves: list[str] = []

    def open_registry(settings: Any, installation: str) -> Registry:
        assert (settings.tracking_uri, installation) == (REGISTRY["tracking_uri"], "test-deployment")
        return Registry(moves)

    monkeypatch.setattr("aliyun_training.model_registry.open_registry", open_registry)
    return moves


def _published(tmp_path: Path, compared_with: Champion | None, rule: PromotionRule = RULE) -> ArtifactSet:
    """A set published by this run, the gate having compared it with ``compared_with``."""

    def gate(metrics: dict[str, Any]) -> Decision:
        return decide(rule, Comparison.of_final_metrics(metrics, compared_with), RUN.run_id, RUN.run_type)

    artifacts = publish_artifacts(
        model="cifar10-resnet",
        artifact_root=str(tmp_path / "artifacts"),
        job=_job(_job_output(tmp_path)),
        dataset=DATASET,
        runtime=RUNTIME,
        run=RUN,
        gate=gate,
    )
    return artifacts.model_copy(
        update={"dataset_version": DATASET.version, "registered": CANDIDATE.model_dump(mode="json")}
    )


def _promote(
    tmp_path: Path,
    published: ArtifactSet,
    state: ChampionState,
    rule: PromotionRule = RULE,
    answer: ApprovalAnswer | None = None,
    ti: TaskInstanceIds | None = None,
) -> tuple[dict[str, Any] | None, Events]:
    """Run the promote task (as task instance ``ti``) on ``published``; what it returned and the
    events it added."""
    operator = PromoteOperator(
        task_id="promote",
        published=published.model_dump(mode="json"),
        job_result=_job(tmp_path / "job-output").model_dump(mode="json"),
        artifacts={
            "model": "cifar10-resnet",
            "artifact_root": str(tmp_path / "artifacts"),
            "promotion": rule.model_dump(mode="json"),
            "registry": REGISTRY,
        },
        approval=answer.model_dump(mode="json") if answer else None,
        champion=ASSET,
    )
    events = Events()
    context = {
        "dag_run": SimpleNamespace(dag_id=RUN.dag_id, run_id=RUN.run_id),
        "asset_state_store": {ASSET: state},
        "outlet_events": events,
        "ti": ti or _instance(),
    }
    return operator.execute(context), events  # type: ignore[arg-type]


def _instance() -> TaskInstanceIds:
    return TaskInstanceIds(dag_id=RUN.dag_id, run_id=RUN.run_id, task_id="promote")


def _outcome(published: ArtifactSet) -> dict[str, Any]:
    """The outcome the set's manifest records now."""
    return json.loads(Path(published.manifest_uri).read_text())["promotion"]["outcome"]


def test_a_candidate_the_gate_passed_becomes_the_champion_registry_first_state_last(
    tmp_path: Path, log: list[str]
) -> None:
    published = _published(tmp_path, OLD)
    state = ChampionState(log, OLD)

    returned, events = _promote(tmp_path, published, state)

    assert log == ["registry -> 3", f"state -> {RUN.run_id}"]
    assert state.value is not None and state.value["registered"]["version"] == "3"
    assert returned is not None and returned["promoted"] is True
    assert (returned["model_version"], returned["replaced"]) == ("3", OLD.run_id)
    assert returned["outcome"]["state"] == "promoted" == _outcome(published)["state"]
    assert [(e["run_id"], e["replaced"], e["model_version"]) for e in events.added] == [
        (RUN.run_id, OLD.run_id, "3")
    ]


def test_a_pointer_moved_between_the_read_and_the_write_is_not_overwritten(
    tmp_path: Path, log: list[str]
) -> None:
    """Another promotion lands after this task read the pointer (and recorded the candidate as
    promoted in its files): the compare-and-set refuses, nothing moves, and the files say held."""
    published = _published(tmp_path, OLD)
    state = ChampionState(log, OLD, moves_to=OTHER)

    returned, events = _promote(tmp_path, published, state)

    reason = (
        f"the champion changed to {OTHER.run_id} after the gate compared with {OLD.run_id}: not promoted "
        "(clear evaluate to compare again)"
    )
    assert log == [], "neither the registry's pointer nor the state moved"
    assert state.champion == OTHER.run_id
    assert events.added == [], "no champion event"
    assert returned is not None and returned["promoted"] is False and returned["reason"] == reason
    assert returned["outcome"] == {"state": "held", "reason": reason, "responder": None}
    assert _outcome(published) == returned["outcome"], "the files say what the task returned"


def test_a_pointer_that_moved_before_the_task_read_it_holds_the_candidate(
    tmp_path: Path, log: list[str]
) -> None:
    published = _published(tmp_path, OLD)
    state = ChampionState(log, OTHER)

    returned, events = _promote(tmp_path, published, state)

    assert log == [] and events.added == [] and state.champion == OTHER.run_id
    assert returned is not None and returned["promoted"] is False
    assert returned["reason"].startswith(f"the champion changed to {OTHER.run_id} after the gate compared")
    assert _outcome(published)["state"] == "held"


def test_the_first_champion_is_set_where_the_gate_compared_with_none(tmp_path: Path, log: list[str]) -> None:
    published = _published(tmp_path, None)
    state = ChampionState(log, None)

    returned, events = _promote(tmp_path, published, state)

    assert log == ["registry -> 3", f"state -> {RUN.run_id}"]
    assert returned is not None and returned["promoted"] is True and returned["replaced"] is None
    assert [e["replaced"] for e in events.added] == [None]


def test_a_retry_after_the_pointer_moved_to_this_run_moves_and_announces_nothing_again(
    tmp_path: Path, log: list[str]
) -> None:
    published = _published(tmp_path, OLD)
    state = ChampionState(log, OLD)
    _promote(tmp_path, published, state)
    log.clear()

    returned, events = _promote(tmp_path, published, state)

    assert log == [] and events.added == []
    assert returned is not None and returned["promoted"] is True
    assert (returned["reason"], returned["model_version"]) == ("already the champion", "3")


def test_a_candidate_the_gate_held_moves_nothing(tmp_path: Path, log: list[str]) -> None:
    strict = PromotionRule(metric="final_test_accuracy", min_improvement=0.5)
    published = _published(tmp_path, OLD, strict)
    state = ChampionState(log, OLD)

    returned, events = _promote(tmp_path, published, state, strict)

    assert log == [] and events.added == [] and state.champion == OLD.run_id
    assert returned is not None and returned["promoted"] is False
    assert returned["outcome"]["state"] == "held" == _outcome(published)["state"]
    assert "misses at least 1" in returned["reason"]


def test_a_rejected_candidate_skips_the_task_and_leaves_its_outcome_sealed_for_the_pages(
    tmp_path: Path, log: list[str]
) -> None:
    rule = PromotionRule(metric="final_test_accuracy", approval=Approval(approvers=["alice"]))
    published = _published(tmp_path, OLD, rule)
    state = ChampionState(log, OLD)
    rejected = ApprovalAnswer(option="Reject", responded_by={"id": "alice", "name": "alice"})

    ti = _instance()

    with pytest.raises(
        AirflowSkipException, match="not promoted: the approval was answered 'Reject' by alice"
    ):
        _promote(tmp_path, published, state, rule, rejected, ti)

    # The pointer stays; the registry marks the version rejected (PAI's approval state).
    assert log == [f"registry rejects {CANDIDATE.version}: the approval was answered 'Reject' by alice"]
    assert state.champion == OLD.run_id
    assert _outcome(published)["state"] == "not_approved"
    # The skipped task returns nothing: what the report says is left beside it, with its seal.
    left = ti.pushed[OUTCOME_KEY]
    assert left == _outcome(published)
    seals.check(left, ti.pushed[seals.SEAL_KEY], RUN.dag_id, RUN.run_id, "promote", OUTCOME_KEY)


def test_a_pointer_moved_by_hand_in_the_registry_is_told_apart_from_one_that_agrees() -> None:
    """The registry's pointer as it reads now, against the record the gate compares with."""
    assert pointer_drift(OLD, OLD.registered) is None, "they agree"
    assert pointer_drift(None, CANDIDATE) is None, "no champion yet: nothing to disagree with"
    unregistered = OLD.model_copy(update={"registered": None})
    assert pointer_drift(unregistered, CANDIDATE) is None, "promoted without a registry"

    moved = pointer_drift(OLD, OTHER.registered)
    assert moved is not None and moved.startswith(
        "the registry's champion pointer names version 2 of cifar10-resnet, not version 1 of the "
        f"champion (run {OLD.run_id})"
    )
    assert moved.endswith("(fix: move the pointer back to version 1)")
    removed = pointer_drift(OLD, None)
    assert removed is not None and "names no version of cifar10-resnet, not version 1" in removed
