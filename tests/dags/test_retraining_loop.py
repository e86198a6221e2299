"""The promotion gate in real DAG runs: the champion pointer in the champion Asset's state, its event
only when the pointer moves, one decision recorded in the log, manifest, report and return value."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.pages.urls import pipeline_page
from tests.dags.asset_events import asset_event_extras
from tests.pages_client import pages_client

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
CHAMPION = "scores_champion"
#: A pipeline whose job reports the accuracy and loss its form asks for, gated on accuracy.
DECLARATION = """\
pipeline:
  dag_id: scores_retrain
dataset:
  name: scores
  version: {from: newest}
training:
  code_dir: code
  command: "python train.py --accuracy {accuracy} --loss {loss}"
resources: {max_nodes: 1}
artifacts:
  collect: []
  report_metrics: [test_loss, test_accuracy]
parameters:
  accuracy: {type: number, default: 0.5, minimum: 0, maximum: 1}
  loss: {type: number, default: 1.0, minimum: 0, maximum: 10}
promotion:
  metric: final_test_accuracy
  min_improvement: 0.01
  guards: {final_test_loss: {max: 2.0}}
"""
SCRIPT = """\
import argparse, json, os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--accuracy", type=float)
parser.add_argument("--loss", type=float)
args = parser.parse_args()
out = Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
epochs = [{"test_loss": args.loss, "test_accuracy": args.accuracy}]
(out / "metrics.json").write_text(json.dumps({"epochs": epochs}))
"""


@pytest.fixture
def dag(airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    folder = tmp_path / "pipelines"
    (folder / "code").mkdir(parents=True)
    (folder / "scores.yaml").write_text(DECLARATION)
    (folder / "code" / "train.py").write_text(textwrap.dedent(SCRIPT))
    version = local_root / "object-store" / "scores" / "v1"
    version.mkdir(parents=True)
    (version / "data.txt").write_text("1 2 3")
    monkeypatch.setenv("ALIYUN_TRAINING_PIPELINES_DIR", str(folder))
    dag = DagBag(dag_folder=str(DAG_FILE)).get_dag("scores_retrain")
    for task in dag.tasks:
        if hasattr(task, "poll_interval"):
            task.poll_interval = 0.1
    return dag


def _run(dag: Any, accuracy: float, loss: float = 1.2, day: int = 1) -> dict[str, Any]:
    """One run whose job reports ``accuracy`` and ``loss``: its publish task's record."""
    run = dag.test(
        logical_date=pendulum.datetime(2026, 11, day, tz="UTC"),
        run_conf={"nodes": 1, "gpus_per_node": 0, "accuracy": accuracy, "loss": loss},
    )
    assert run.state == "success", "a decision not to promote is not a failure"
    published = run.get_task_instance("publish_artifacts").xcom_pull(task_ids="publish_artifacts")
    return {"run_id": run.run_id, **published}


@pytest.mark.slow
def test_only_a_better_model_becomes_champion_and_only_then_is_announced(
    dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    before = len(asset_event_extras(CHAMPION))

    first = _run(dag, accuracy=0.60, day=1)
    worse = _run(dag, accuracy=0.605, day=2)  # better, by less than min_improvement
    unguarded = _run(dag, accuracy=0.90, loss=2.5, day=3)
    better = _run(dag, accuracy=0.64, day=4)

    names = ("first", "worse", "unguarded", "better")
    decisions = {n: r["promotion"] for n, r in zip(names, (first, worse, unguarded, better), strict=True)}
    assert {name: d["promoted"] for name, d in decisions.items()} == {
        "first": True,
        "worse": False,
        "unguarded": False,
        "better": True,
    }
    assert decisions["first"]["reason"].startswith("the first model")
    assert decisions["worse"]["champion_run_id"] == first["run_id"]
    assert decisions["worse"]["required"] == pytest.approx(0.61)
    assert "misses at least 0.61" in decisions["worse"]["reason"]
    assert decisions["unguarded"]["reason"] == "guard failed: final_test_loss 2.5 is not at most 2"
    assert decisions["better"]["champion_run_id"] == first["run_id"], "the others never moved it"
    # One event per promotion, naming the run that became champion and the one it replaced.
    events = asset_event_extras(CHAMPION)[before:]
    assert [(e["run_id"], e["replaced"]) for e in events] == [
        (first["run_id"], None),
        (better["run_id"], first["run_id"]),
    ]
    assert events[1]["final_test_accuracy"] == pytest.approx(0.64)
    # The same record in the manifest, the report and the task log.
    manifest = json.loads(Path(worse["manifest_uri"]).read_text())
    assert manifest["promotion"] == decisions["worse"]
    assert "Not promoted</strong>" in Path(worse["report_uri"]).read_text()
    assert "Promotion: not promoted: final_test_accuracy 0.605 misses" in capfd.readouterr().out
    # The pipeline's page says which runs became champion.
    page = pages_client().get(pipeline_page("scores_retrain")).text
    table = page.split("<h2>Runs</h2>", 1)[1]
    labels = {r["run_id"]: table.split(r["run_id"], 1)[1].split("</tr>")[0] for r in (first, worse, better)}
    assert ">champion</span>" in labels[first["run_id"]] and ">champion</span>" in labels[better["run_id"]]
    assert ">held</span>" in labels[worse["run_id"]]
    # Above the runs, each final metric across them, oldest first: one point per published run.
    history = page.split("<h2>Across runs</h2>", 1)[1].split("<h2>Runs</h2>", 1)[0]
    accuracy = history.split('data-series="test_accuracy"', 1)[1].split("</svg>", 1)[0]
    assert accuracy.count("<circle") == 4 and "test accuracy, run 4: 64.00%" in accuracy
    assert history.count(" — champion</li>") == 2
