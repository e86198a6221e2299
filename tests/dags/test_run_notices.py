"""What a run tells people, in real DAG runs of a declared pipeline: the job's progress and ETA in
the train task's log and its live record, a deadline the ETA says will be overrun announced before
it passes, and exactly one notice per state change (a retried failure is told once)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import pendulum
import pytest

from aliyun_training.live import LIVE_KEY, open_live
from tests.dags.recording_notifier import recorded
from tests.dags.scores_pipeline import land_version, scores_pipeline

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

#: The job prints the progress contract: 5 of 1,000 steps, 1.2 s apart, so its ETA is far past
#: the 30 s deadline the declaration gives it; a loss over 5 fails it (a user_code failure).
TRAIN = """\
import argparse, json, os, sys, time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--skill", type=float)
parser.add_argument("--loss", type=float)
args = parser.parse_args()
if args.loss > 5:
    print("the loss diverged", file=sys.stderr)
    sys.exit(3)
for step in range(1, 6):
    report = {"event": "progress", "step": step, "total_steps": 1000, "time": time.time(),
              "metrics": {"loss": round(args.loss / step, 4)}}
    print(json.dumps(report), flush=True)
    time.sleep(1.2)
out = Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "model.json").write_text(json.dumps({"skill": args.skill, "loss": args.loss}))
epochs = [{"test_loss": args.loss, "test_accuracy": args.skill}]
(out / "metrics.json").write_text(json.dumps({"epochs": epochs}))
"""


def _declared(notices: Path) -> str:
    return textwrap.dedent(f"""\
        deadline: {{expected_minutes: 0.5, tolerance: 1.0}}
        recovery:
          retries: 1
          classes: {{user_code: {{action: retry, delay_minutes: 0}}}}
        notifications:
          - kind: class
            class_path: tests.dags.recording_notifier.RecordingNotifier
            options: {{path: "{notices}"}}
        """)


@pytest.fixture
def notices(tmp_path: Path) -> Path:
    return tmp_path / "notices.jsonl"


@pytest.fixture
def dag(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notices: Path
) -> Any:
    dag = scores_pipeline(tmp_path, local_root, monkeypatch, extra=_declared(notices))
    (tmp_path / "pipelines" / "code" / "train.py").write_text(textwrap.dedent(TRAIN))
    land_version(local_root, "v1", difficulty=0.0)
    return dag


def _run(dag: Any, loss: float, day: int) -> Any:
    moment = pendulum.datetime(2026, 10, day, tz="UTC")
    conf = {"nodes": 1, "gpus_per_node": 0, "skill": 0.7, "loss": loss, "dataset_version": "v1"}
    return dag.test(logical_date=moment, run_after=moment, run_conf=conf)


def _events(path: Path) -> list[str]:
    return [notice["event"] for notice in recorded(path)]


def test_progress_eta_and_a_deadline_at_risk_are_told_once_before_the_deadline(
    dag: Any, notices: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run = _run(dag, loss=1.0, day=1)
    assert run.state == "success"
    out = capfd.readouterr()
    progress = [line for line in (out.out + out.err).splitlines() if "/1000" in line and "ETA" in line]
    assert progress, "the train task's log shows the job's progress with its ETA"
    assert any("s/step" in line for line in progress), "with the job's pace"

    train = run.get_task_instance("train")
    live = open_live(train.xcom_pull(task_ids="train", key=LIVE_KEY), run.dag_id, run.run_id, "train")
    assert live is not None, "the trigger kept a sealed live record of the job"
    assert live.progress is not None and live.progress.step == 5 and live.progress.total_steps == 1000
    assert [point.metrics["loss"] for point in live.points][-1] == pytest.approx(0.2)
    assert live.deadline is not None and live.deadline.source == "declared"
    assert "deadline_at_risk" in live.sent

    events = _events(notices)
    assert events.count("deadline_at_risk") == 1, events
    assert events.count("deadline_missed") == 0, events
    assert events.count("succeeded") == 1 and events.count("promoted") == 1, events
    [at_risk] = [n for n in recorded(notices) if n["event"] == "deadline_at_risk"]
    assert "ETA" in at_risk["text"] and at_risk["dag_id"] == run.dag_id
    assert at_risk["recorded_at"] < live.deadline.deadline.timestamp(), "told before the deadline passed"
    result = train.xcom_pull(task_ids="train")
    assert result["progress"]["step"] == 5, "the job's result records its last progress"


def test_a_failure_retried_then_failing_for_good_is_told_once_with_its_class_and_action(
    dag: Any, notices: Path
) -> None:
    run = _run(dag, loss=9.0, day=2)
    assert run.state == "failed"
    assert run.get_task_instance("train").try_number == 2, "the user_code failure was retried once"
    failed = [n for n in recorded(notices) if n["event"] == "failed"]
    assert len(failed) == 1, recorded(notices)
    assert failed[0]["run_id"] == run.run_id
    assert "train failed" in failed[0]["text"]
    assert "class user_code" in failed[0]["text"] and "recovery retry" in failed[0]["text"]
