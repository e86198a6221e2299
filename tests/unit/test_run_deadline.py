"""A pipeline's run deadline is an Airflow Deadline Alert on its DAG (queued time plus
``deadline.run_minutes``), kept through serialization, whose callback tells the notifiers once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import yaml
from airflow.serialization.serialized_objects import DagSerialization

from aliyun_training.declaration import PipelineDeclaration, declare
from aliyun_training.pipelines import training_pipeline
from aliyun_training.pipelines.run_deadline import tell_run_deadline_missed
from fakes.environment_files import CIFAR10
from tests.dags.recording_notifier import recorded

if TYPE_CHECKING:
    from pathlib import Path


def declared(notices: Path | None, **deadline: Any) -> PipelineDeclaration:
    data = yaml.safe_load(CIFAR10.read_text())
    data["deadline"] = deadline
    if notices is not None:
        data["notifications"] = [
            {
                "kind": "class",
                "class_path": "tests.dags.recording_notifier.RecordingNotifier",
                "options": {"path": str(notices)},
            }
        ]
    return declare(data, base_dir=CIFAR10.parent)


def test_the_run_deadline_is_a_deadline_alert_from_the_runs_queued_time(tmp_path: Path) -> None:
    """As the DAG processor stores it for the scheduler, which creates each run's deadline."""
    dag = training_pipeline(declared(tmp_path / "n.jsonl", run_minutes=240))
    [alert] = DagSerialization.to_dict(dag)["dag"]["deadline"]
    assert alert["reference"] == {"reference_type": "DagRunQueuedAtDeadline"}
    assert alert["interval"]["__data__"] == 240 * 60
    callback = alert["callback"]["__data__"]
    assert callback["path"] == "aliyun_training.pipelines.run_deadline.tell_run_deadline_missed"
    assert callback["kwargs"]["minutes"] == 240
    assert callback["kwargs"]["notifications"][0]["class_path"].endswith("RecordingNotifier")


def test_no_alert_without_a_run_deadline_or_without_a_notifier(tmp_path: Path) -> None:
    assert not training_pipeline(declared(tmp_path / "n.jsonl", expected_minutes=60)).deadline
    assert not training_pipeline(declared(None, run_minutes=240)).deadline


def test_the_callback_tells_each_notifier_of_the_run_once(tmp_path: Path) -> None:
    notices = tmp_path / "n.jsonl"
    [alert] = training_pipeline(declared(notices, run_minutes=240)).deadline
    # What the scheduler hands the callback: the run as the API answers it (Deadline.handle_miss).
    context = {
        "dag_run": {"dag_id": "cifar10_retrain", "dag_run_id": "scheduled__2026-12-07"},
        "deadline": {},
    }

    asyncio.run(tell_run_deadline_missed(**alert.callback.kwargs, context=context))

    [notice] = recorded(notices)
    assert notice["event"] == "deadline_missed" and notice["run_id"] == "scheduled__2026-12-07"
    assert "240 minutes after it was queued" in notice["text"]
    assert notice["url"].endswith("/runs/cifar10_retrain/scheduled__2026-12-07")
