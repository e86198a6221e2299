"""The evaluate task: what it hands the evaluation job (its ``EvaluationContract``: ``CANDIDATE_DIR``,
``CHAMPION_DIR``, ``EVAL_DATA_DIR``), which champion it chooses and keeps for its retries, and the
inputs it refuses.

Each job is a real local job: one node running a small evaluation command that records the
variables it was given and scores the two folders they name, as a declaration's command would. The
champion Asset's state and the task state store are stand-ins with their interfaces
(tests/operator_harness.py); the task is driven through execute, the trigger and
execute_complete, as the task runner and the triggerer drive it.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from aliyun_training import seals
from aliyun_training.champion import CHAMPION_KEY
from aliyun_training.failures import FailureClass
from aliyun_training.operators.evaluation import INPUTS_KEY, EvaluationOperator
from aliyun_training.operators.recovery import TrainingJobFailed
from aliyun_training.operators.training import HANDLE_KEY
from tests.operator_harness import MemoryTaskStateStore, TaskInstanceIds, defer, fire

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

ASSET = Asset(name="cifar10-resnet_champion", uri="model://cifar10-resnet/champion")
#: The fixed version both models are scored on.
VERSION = "2026-01-04"
CANDIDATE_SCORES = {"test_accuracy": 0.71}
CHAMPION_SCORES = {"test_accuracy": 0.64}

#: The declaration's evaluation command, reduced to what the contract promises it: it records the
#: variables it was given, then scores the model in each folder they name (here: the score each
#: holds) and writes evaluation.json. With FAIL_ONCE set, its first run loses its node (killed).
EVALUATE = """
import json, os, pathlib, signal

out = pathlib.Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
marker = os.environ.get("FAIL_ONCE")
if marker and not os.path.exists(marker):
    pathlib.Path(marker).touch()
    os.kill(os.getpid(), signal.SIGKILL)
given = {name: os.environ.get(name) for name in ("CANDIDATE_DIR", "CHAMPION_DIR", "EVAL_DATA_DIR")}
(out / "contract.json").write_text(json.dumps(given))

def score(folder):
    return json.loads((pathlib.Path(folder) / "score.json").read_text())

scores = {"candidate": score(given["CANDIDATE_DIR"])}
scores["champion"] = score(given["CHAMPION_DIR"]) if given["CHAMPION_DIR"] else None
(out / "evaluation.json").write_text(json.dumps(scores))
"""


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The deployment secret the task seals the inputs it keeps with."""
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__SEAL_SECRET", "a deployment secret")
    seals._secret.cache_clear()
    yield
    seals._secret.cache_clear()


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    """Where every job of the environment writes (its ``output_root``)."""
    return tmp_path / "outputs"


def job_output(folder: Path, scores: dict[str, float]) -> Path:
    """A training job's output folder holding its model (here: the score it gets)."""
    folder.mkdir(parents=True)
    (folder / "score.json").write_text(json.dumps(scores))
    return folder


@pytest.fixture
def candidate(outputs: Path) -> Path:
    """The output folder of this run's training job."""
    return job_output(outputs / "retrain-train-0123456789", CANDIDATE_SCORES)


def champion(run_id: str, outputs_uri: str | Path | None) -> dict[str, Any]:
    """The champion pointer's record of run ``run_id``, whose training job wrote to ``outputs_uri``."""
    return {
        "run_id": run_id,
        "dataset_version": "2025-12-28",
        "artifacts": {"uri": f"/sets/{run_id}", "manifest_uri": "m", "report_uri": "r", "metrics": {}},
        "metrics": {"test_accuracy": 0.6},
        "outputs_uri": str(outputs_uri) if outputs_uri else None,
    }


def plan(tmp_path: Path, outputs: Path, command: str | None = None, **env: str) -> dict[str, Any]:
    """The run plan's EvaluationPlan for the local backend, scoring on the fixed VERSION."""
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    spec = {
        "backend": "local",
        "command": command or f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
        "env": {"EVAL_DATA_DIR": str(tmp_path / "data" / VERSION), **env},
    }
    return {
        "job": {
            "spec": spec,
            "backend_config": {"root": str(tmp_path / "runs"), "stop_grace_seconds": 1},
            "output_root": str(outputs),
        },
        "dataset_version": VERSION,
        "own_version": False,
    }


def operator(evaluation: dict[str, Any] | None, candidate: Path | None, **kwargs: Any) -> EvaluationOperator:
    """The evaluate task of ``evaluation``, the candidate being the training job that wrote to
    ``candidate`` (None: the training task did not run)."""
    job_result = {
        "backend": "local",
        "job_id": "retrain-train-0123456789.1a2b3c4d",
        "display_name": "retrain-train-0123456789",
        "status": "Succeeded",
        "output_uri": str(candidate),
    }
    return EvaluationOperator(
        task_id="evaluate",
        evaluation=evaluation,
        job_result=job_result if candidate is not None else None,
        champion=ASSET,
        poll_interval=0.1,
        **kwargs,
    )


def context(pointer: dict[str, Any] | None = None, ti: TaskInstanceIds | None = None) -> dict[str, Any]:
    """A try's context; the champion Asset's state (get/set, as the task state store's) holds ``pointer``."""
    state = MemoryTaskStateStore({CHAMPION_KEY: pointer} if pointer else {})
    return {
        "ti": ti or TaskInstanceIds(task_id="evaluate"),
        "task_state_store": MemoryTaskStateStore(),
        "asset_state_store": {ASSET: state},
    }


def evaluate(op: EvaluationOperator, ctx: dict[str, Any]) -> dict[str, Any]:
    """One try: execute defers while the job runs, the trigger fires, execute_complete returns."""
    event = asyncio.run(fire(defer(op, ctx)))
    return op.execute_complete(ctx, event)  # type: ignore[arg-type]


def contract_seen(outputs: Path) -> dict[str, str]:
    """The variables the (last) evaluation job was given, as it recorded them."""
    (recorded,) = outputs.glob("*/contract.json")
    return json.loads(recorded.read_text())


def test_the_job_is_told_both_models_and_the_data_and_its_scores_are_the_comparison(
    tmp_path: Path, outputs: Path, candidate: Path
) -> None:
    pointed = job_output(outputs / "retrain-train-champion", CHAMPION_SCORES)
    ctx = context(champion("scheduled__2025-12-28", pointed))

    result = evaluate(operator(plan(tmp_path, outputs), candidate), ctx)

    assert contract_seen(outputs) == {
        "CANDIDATE_DIR": str(candidate),
        "CHAMPION_DIR": str(pointed),
        "EVAL_DATA_DIR": str(tmp_path / "data" / VERSION),
    }
    assert result["comparison"] == {
        "candidate": CANDIDATE_SCORES,
        "champion": CHAMPION_SCORES,
        "champion_run_id": "scheduled__2025-12-28",
        "basis": "evaluation",
    }
    assert result["dataset_version"] == VERSION
    assert result["job_id"] == ctx["task_state_store"][HANDLE_KEY]["job_id"]


def test_a_run_scored_on_its_own_version_reads_it_where_the_training_job_did(
    tmp_path: Path, outputs: Path, candidate: Path
) -> None:
    staged = {
        "uri": str(tmp_path / "cpfs" / "cifar10" / "v7"),
        "version": "v7",
        "files": 6,
        "bytes": 1024,
        "manifest_uri": "",
        "checksum": "0" * 64,
    }
    own = {**plan(tmp_path, outputs), "dataset_version": "v7", "own_version": True}

    result = evaluate(operator(own, candidate, dataset=staged), context())

    assert contract_seen(outputs)["EVAL_DATA_DIR"] == staged["uri"]
    assert result["dataset_version"] == "v7"


@pytest.mark.parametrize(
    "pointer",
    [
        None,
        champion("scheduled__2025-12-28", "oss://another-bucket/outputs/retrain-train-champion"),
        champion("scheduled__2025-12-28", "/mnt/elsewhere/retrain-train-champion"),
        champion("scheduled__2025-12-28", None),
    ],
    ids=["no-champion-yet", "outputs-in-oss", "outputs-outside-the-mount", "outputs-not-recorded"],
)
def test_only_the_candidate_is_scored_without_a_champion_the_job_can_read(
    tmp_path: Path,
    outputs: Path,
    candidate: Path,
    pointer: dict[str, Any] | None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The gate then compares with the champion's recorded scores: the job is not pointed at a
    folder it does not mount, and champion scores it writes anyway are not taken."""
    result = evaluate(operator(plan(tmp_path, outputs), candidate), context(pointer))

    assert contract_seen(outputs)["CHAMPION_DIR"] == ""
    assert (result["comparison"]["champion"], result["comparison"]["champion_run_id"]) == (None, None)
    assert result["comparison"]["candidate"] == CANDIDATE_SCORES
    log = capfd.readouterr().out
    said = "The champion (scheduled__2025-12-28) " in log
    assert said is (pointer is not None), "the task log says why a champion was not scored"
    if pointer is not None:
        why = "which this run's jobs do not mount" if pointer["outputs_uri"] else "has no recorded outputs"
        assert why in log


def test_a_retry_scores_the_champion_the_first_try_chose_though_the_pointer_moved(
    tmp_path: Path, outputs: Path, candidate: Path
) -> None:
    first = job_output(outputs / "retrain-train-first", CHAMPION_SCORES)
    moved = job_output(outputs / "retrain-train-moved", {"test_accuracy": 0.99})
    evaluation = plan(tmp_path, outputs, FAIL_ONCE=str(tmp_path / "failed-once"))
    ti = TaskInstanceIds(task_id="evaluate", max_tries=1)
    ctx = context(champion("scheduled__2025-12-28", first), ti)

    with pytest.raises(TrainingJobFailed) as lost:
        evaluate(operator(evaluation, candidate, retries=1), ctx)
    assert lost.value.failure.failure_class is FailureClass.PREEMPTION, "a lost node: the task retries"
    # Another run promoted its model while this task waited for its retry.
    ctx["asset_state_store"][ASSET][CHAMPION_KEY] = champion("manual__2026-01-03", moved)
    ti.try_number = 2
    result = evaluate(operator(evaluation, candidate, retries=1), ctx)

    assert contract_seen(outputs)["CHAMPION_DIR"] == str(first)
    assert result["comparison"]["champion_run_id"] == "scheduled__2025-12-28"
    assert result["comparison"]["champion"] == CHAMPION_SCORES


#: Inputs that would point the job at folders the task never chose, and name a champion of its own.
FORGED = {"candidate_dir": "/etc", "champion_dir": "/root", "champion_run_id": "manual__forged"}
#: What may be found under the task's key, by who could have written it (built once the secret is set).
NOT_KEPT_BY_THIS_TASK = {
    "unsealed": lambda: FORGED,
    "forged-seal": lambda: {"value": FORGED, "seal": "0" * 64},
    "sealed-for-another-run": lambda: seals.sealed_state(
        FORGED, TaskInstanceIds(task_id="evaluate", run_id="manual__other"), INPUTS_KEY
    ),
}


@pytest.mark.parametrize("kept", NOT_KEPT_BY_THIS_TASK.values(), ids=NOT_KEPT_BY_THIS_TASK.keys())
def test_kept_inputs_this_task_did_not_seal_are_chosen_again(
    tmp_path: Path,
    outputs: Path,
    candidate: Path,
    kept: Callable[[], Any],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Whoever may edit task state could otherwise point the job at any folder it mounts, or name
    the champion the gate compares with."""
    pointed = job_output(outputs / "retrain-train-champion", CHAMPION_SCORES)
    ctx = context(champion("scheduled__2025-12-28", pointed))
    ctx["task_state_store"].set(INPUTS_KEY, kept())

    result = evaluate(operator(plan(tmp_path, outputs), candidate), ctx)

    assert contract_seen(outputs) == {
        "CANDIDATE_DIR": str(candidate),
        "CHAMPION_DIR": str(pointed),
        "EVAL_DATA_DIR": str(tmp_path / "data" / VERSION),
    }
    assert result["comparison"]["champion_run_id"] == "scheduled__2025-12-28"
    chosen = seals.opened_state(ctx["task_state_store"][INPUTS_KEY], ctx["ti"], INPUTS_KEY)
    assert chosen == {
        "candidate_dir": str(candidate),
        "champion_dir": str(pointed),
        "champion_run_id": "scheduled__2025-12-28",
    }, "what it chose instead is kept, sealed, for its retries"
    assert (
        "The kept evaluation inputs are not the ones this task kept: chosen again" in capfd.readouterr().out
    )


def test_a_candidate_the_job_cannot_mount_fails_the_task_naming_the_fix_before_any_job(
    tmp_path: Path, outputs: Path
) -> None:
    elsewhere = job_output(tmp_path / "elsewhere" / "retrain-train-0123456789", CANDIDATE_SCORES)
    ctx = context()

    with pytest.raises(
        AirflowFailException,
        match=rf"output_uri: the training job .* wrote to {elsewhere}, which the evaluation job does not "
        r"mount \(fix: jobs must write under the environment's output_uri\)",
    ):
        operator(plan(tmp_path, outputs), elsewhere).execute(ctx)  # type: ignore[arg-type]

    assert not (tmp_path / "runs").exists(), "no job was launched"
    assert INPUTS_KEY not in ctx["task_state_store"]


def test_a_job_that_writes_no_evaluation_json_fails_the_task_naming_what_to_write(
    tmp_path: Path, outputs: Path, candidate: Path
) -> None:
    with pytest.raises(
        AirflowFailException, match=r"evaluation\.command: it wrote no .*/evaluation\.json \(fix:"
    ):
        evaluate(operator(plan(tmp_path, outputs, command="true"), candidate), context())


@pytest.mark.parametrize(
    ("evaluation", "job_result", "reason"),
    [
        (None, True, "the pipeline declares no evaluation"),
        ("local", False, "the training task did not run"),
        ("dlc", True, "the training job's outputs are not kept"),
    ],
    ids=["no-evaluation-declared", "no-training-result", "cloud-outputs-not-kept"],
)
def test_a_run_with_nothing_to_evaluate_skips_the_task_saying_why(
    tmp_path: Path, outputs: Path, candidate: Path, evaluation: str | None, job_result: bool, reason: str
) -> None:
    planned = plan(tmp_path, outputs) if evaluation else None
    if planned and evaluation == "dlc":
        planned["job"]["spec"] |= {"backend": "dlc", "image": "registry.example.com/eval:1"}

    with pytest.raises(AirflowSkipException, match=reason):
        operator(planned, candidate if job_result else None).execute(context())  # type: ignore[arg-type]
