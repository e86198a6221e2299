"""A folder of declarations refuses what clashes across files, or with the provider's own DAGs, at load.

Each refusal is the DAG file's import error, naming the declaration's file, the field and the fix,
while the folder's other pipelines load: one team's mistake never takes down another team's pipeline.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.declaration import DeclarationError
from aliyun_training.pipelines import load_pipelines
from aliyun_training.pipelines.folder import INVALID_DECLARATIONS_DAG_ID
from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID
from tests.dags.test_declared_pipelines import DAG_FILE

if TYPE_CHECKING:
    from pathlib import Path

DECLARATION = """\
    pipeline:
      dag_id: {dag_id}
      schedule: "{schedule}"
    dataset:
      name: {dataset}
    training:
      code_dir: code
      command: python train.py
"""


def _declare(folder: Path, name: str, dag_id: str, dataset: str, schedule: str = "@weekly") -> Path:
    (folder / "code").mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(DECLARATION.format(dag_id=dag_id, dataset=dataset, schedule=schedule)))
    return path


def _errors(dags: dict) -> str:
    with pytest.raises(DeclarationError) as refused:
        dags[INVALID_DECLARATIONS_DAG_ID].validate()
    return str(refused.value)


def test_two_declarations_of_one_model_are_both_refused_naming_each_other(tmp_path: Path) -> None:
    first = _declare(tmp_path, "team_a.yaml", "team_a_retrain", "digits")
    second = _declare(tmp_path, "team_b.yaml", "team_b_retrain", "digits")
    _declare(tmp_path, "team_c.yaml", "team_c_retrain", "mnist")

    dags = load_pipelines(tmp_path)
    errors = _errors(dags)

    assert "team_c_retrain" in dags, "an unrelated pipeline loads"
    assert not {"team_a_retrain", "team_b_retrain"} & set(dags), "neither owns the model more than the other"
    for path, other in ((first, second), (second, first)):
        assert (
            f"pipeline declaration {path}: the model 'digits' (artifacts.model, else dataset.name) is also "
            f"declared by {other}"
        ) in errors
    assert errors.count("(fix: give each pipeline its own artifacts.model)") == 2


def test_a_model_named_apart_from_its_dataset_loads_beside_the_datasets_own(tmp_path: Path) -> None:
    _declare(tmp_path, "a.yaml", "digits_retrain", "digits")
    path = _declare(tmp_path, "b.yaml", "digits_small_retrain", "digits")
    path.write_text(path.read_text() + "artifacts:\n  model: digits-small\n")

    dags = load_pipelines(tmp_path)

    assert {"digits_retrain", "digits_small_retrain"} <= set(dags) and INVALID_DECLARATIONS_DAG_ID not in dags


@pytest.mark.parametrize(
    ("dag_id", "what"),
    [(RECONCILER_DAG_ID, "job reconciler's"), (INVALID_DECLARATIONS_DAG_ID, "broken declarations' stand-in")],
)
def test_a_reserved_dag_id_is_refused_instead_of_replacing_the_providers_dag(
    tmp_path: Path, dag_id: str, what: str
) -> None:
    squatter = _declare(tmp_path, "squatter.yaml", dag_id, "squat")
    _declare(tmp_path, "good.yaml", "good_retrain", "digits")

    dags = load_pipelines(tmp_path)

    assert "good_retrain" in dags
    errors = _errors(dags)
    assert (
        f"pipeline declaration {squatter}: pipeline.dag_id {dag_id!r} is the id of the provider's " in errors
    )
    assert f"own {what} DAG, which it would replace (fix: choose another dag_id" in errors
    assert "train" not in dags[RECONCILER_DAG_ID].task_ids, "the reconciler is the provider's"
    assert type(dags[INVALID_DECLARATIONS_DAG_ID]).__name__ == "InvalidDeclarations"


def test_a_bad_cron_is_the_declarations_error_not_the_dag_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow read the cron only when it serialized the DAG, and its error named neither the
    declaration nor a fix."""
    bad = _declare(tmp_path, "bad.yaml", "bad_retrain", "mnist", schedule="61 * * * *")
    _declare(tmp_path, "good.yaml", "good_retrain", "digits")
    monkeypatch.setenv("ALIYUN_TRAINING_PIPELINES_DIR", str(tmp_path))

    bag = DagBag(dag_folder=str(DAG_FILE))

    assert "good_retrain" in bag.dag_ids and "bad_retrain" not in bag.dag_ids
    (error,) = bag.import_errors.values()
    assert f"pipeline declaration {bad}:" in error
    assert "pipeline.schedule: '61 * * * *' is not a cron schedule" in error
    assert "(fix: five cron fields (minute hour day-of-month month day-of-week)" in error
