"""A small declared pipeline for DAG tests of the retraining loop: its job "trains" a model of the
skill and loss its form asks for, and its evaluation scores a model on a version as skill less the
version's difficulty, so both models are scored on the same data in a second or two."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.dag_processing.dagbag import DagBag

if TYPE_CHECKING:
    import pytest

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
#: A pipeline whose job "trains" a model of the skill and loss its form asks for; its evaluation
#: scores a model on a version as skill less the version's difficulty: both models on the same data.
DECLARATION = """\
pipeline:
  dag_id: {dag_id}
dataset:
  name: scores
  version: {{from: newest}}
training:
  code_dir: code
  command: "python train.py --skill {{skill}} --loss {{loss}}"
resources: {{max_nodes: 1}}
artifacts:
  model: {model}
  collect: [model.json]
  report_metrics: [test_loss, test_accuracy]
parameters:
  skill: {{type: number, default: 0.5, minimum: 0, maximum: 1}}
  loss: {{type: number, default: 1.0, minimum: 0, maximum: 10}}
evaluation:
  command: python evaluate.py
  cpu: 1
  memory_gib: 1
promotion:
  metric: test_accuracy
  min_improvement: 0.01
  guards: {{test_loss: {{max: 2.0}}}}
  {approval}
"""
TRAIN = """\
import argparse, json, os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--skill", type=float)
parser.add_argument("--loss", type=float)
args = parser.parse_args()
out = Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "model.json").write_text(json.dumps({"skill": args.skill, "loss": args.loss}))
epochs = [{"test_loss": args.loss, "test_accuracy": args.skill}]
(out / "metrics.json").write_text(json.dumps({"epochs": epochs}))
"""
EVALUATE = """\
import json, os
from pathlib import Path

difficulty = float((Path(os.environ["EVAL_DATA_DIR"]) / "difficulty.txt").read_text())

def score(folder):
    model = json.loads((Path(folder) / "model.json").read_text())
    return {"test_accuracy": round(model["skill"] - difficulty, 6), "test_loss": model["loss"]}

champion = os.environ["CHAMPION_DIR"]
scores = {"candidate": score(os.environ["CANDIDATE_DIR"]), "champion": score(champion) if champion else None}
out = Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
(out / "evaluation.json").write_text(json.dumps(scores))
"""


def scores_pipeline(
    tmp_path: Path, local_root: Path, monkeypatch: pytest.MonkeyPatch, approval: str = "", extra: str = ""
) -> Any:
    """The pipeline's DAG (``scores_approved`` with an approval block, else ``scores_retrain``),
    declared in ``tmp_path``, polling its jobs every 0.1 s, with no champion yet (the session's
    metadata DB keeps the champion Asset's state of another test's pipeline of the same model).
    ``extra`` is YAML added to the declaration's top level."""
    dag_id = "scores_approved" if approval else "scores_retrain"
    folder = tmp_path / "pipelines"
    (folder / "code").mkdir(parents=True)
    model = "approved" if approval else "scores"
    (folder / "scores.yaml").write_text(
        DECLARATION.format(dag_id=dag_id, model=model, approval=approval) + extra
    )
    (folder / "code" / "train.py").write_text(textwrap.dedent(TRAIN))
    (folder / "code" / "evaluate.py").write_text(textwrap.dedent(EVALUATE))
    monkeypatch.setenv("ALIYUN_TRAINING_PIPELINES_DIR", str(folder))
    dag = DagBag(dag_folder=str(DAG_FILE)).get_dag(dag_id)
    for task in dag.tasks:
        if hasattr(task, "poll_interval"):
            task.poll_interval = 0.1
    _forget_champion(f"{model}_champion")
    return dag


def _forget_champion(asset_name: str) -> None:
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == asset_name))
        session.execute(delete(AssetStateStoreModel).where(AssetStateStoreModel.asset_id == asset_id))


def land_version(local_root: Path, name: str, difficulty: float) -> None:
    """A dataset version whose evaluation subtracts ``difficulty`` from every model's skill."""
    version = local_root / "object-store" / "scores" / name
    version.mkdir(parents=True)
    (version / "difficulty.txt").write_text(str(difficulty))
    (version / "_SUCCESS").touch()  # landed: a run takes only a complete version


def registry_client(local_root: Path) -> Any:
    """An MLflow client of the embedded registry under ``local_root``."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{local_root / 'mlflow' / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def approval_pipeline(tmp_path: Path, local_root: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The pipeline whose promotions wait for a person (``scores_approved``), on a landed version v1."""
    dag = scores_pipeline(tmp_path, local_root, monkeypatch, approval="approval: {timeout_hours: 1}")
    land_version(local_root, "v1", difficulty=0.0)
    return dag
