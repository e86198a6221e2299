"""A folder of declarations refuses what clashes across files, or with the provider's own DAGs, at load.

Each refused file is a failing DAG of its own whose docs name the declaration's file, the field and
the fix, while the folder's other pipelines load: one team's mistake never takes down another team's
pipeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.pages.runs import BROKEN_DECLARATION_TAG
from aliyun_training.pipelines import load_pipelines
from aliyun_training.pipelines.folder import BROKEN_DECLARATION_PREFIX
from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID
from tests.dags.test_declared_pipelines import DAG_FILE

pytestmark = pytest.mark.slow

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
    """The docs of the broken declarations' DAGs, each of which still passes Airflow's validation."""
    refused = [dag for dag in dags.values() if BROKEN_DECLARATION_TAG in dag.tags]
    for dag in refused:
        dag.validate()
    return "\n".join(dag.doc_md for dag in refused)


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

    assert {"digits_retrain", "digits_small_retrain"} <= set(dags)
    assert not [dag_id for dag_id in dags if dag_id.startswith(BROKEN_DECLARATION_PREFIX)]


@pytest.mark.parametrize(
    ("dag_id", "what"),
    [
        (RECONCILER_DAG_ID, "is the id of the provider's own job reconciler's DAG, which it would replace"),
        (f"{BROKEN_DECLARATION_PREFIX}good.yaml", f"starts with {BROKEN_DECLARATION_PREFIX!r}, which names"),
    ],
)
def test_a_reserved_dag_id_is_refused_instead_of_replacing_the_providers_dag(
    tmp_path: Path, dag_id: str, what: str
) -> None:
    squatter = _declare(tmp_path, "squatter.yaml", dag_id, "squat")
    _declare(tmp_path, "good.yaml", "good_retrain", "digits")

    dags = load_pipelines(tmp_path)

    assert "good_retrain" in dags
    errors = _errors(dags)
    assert f"pipeline declaration {squatter}: pipeline.dag_id {dag_id!r} {what}" in errors
    assert "(fix: choose another dag_id" in errors
    taken = dags.get(dag_id)
    assert taken is None or "train" not in taken.task_ids, "the id stays the provider's, not the pipeline's"


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
    assert not bag.import_errors
    error = _errors(bag.dags)
    assert f"pipeline declaration {bad}:" in error
    assert "pipeline.schedule: '61 * * * *' is not a cron schedule" in error
    assert "(fix: five cron fields (minute hour day-of-month month day-of-week)" in error


def test_broken_files_dropped_beside_loaded_pipelines_leave_them_active_in_the_metadata_db(
    tmp_path: Path, airflow_db: Path
) -> None:
    """What Airflow records, through its own dag-processor: a DAG file with an import error has every
    DAG of it marked stale (off the UI, their runs stranded), so a broken file must not make one."""
    _declare(tmp_path, "team_a.yaml", "team_a_retrain", "team-a")
    _declare(tmp_path, "team_b.yaml", "team_b_retrain", "team-b")
    _parse(tmp_path)
    assert _recorded() == ({"team_a_retrain": False, "team_b_retrain": False, RECONCILER_DAG_ID: False}, {})

    (tmp_path / "syntax.yaml").write_text("pipeline: [\n")
    typo = _declare(tmp_path, "typo.yaml", "team_c_retrain", "team-c")
    typo.write_text(typo.read_text().replace("  name: team-c", "  nmae: team-c"))
    _parse(tmp_path)
    dags, broken = _recorded()

    assert dags == {
        "team_a_retrain": False,
        "team_b_retrain": False,
        RECONCILER_DAG_ID: False,
        f"{BROKEN_DECLARATION_PREFIX}syntax.yaml": False,
        f"{BROKEN_DECLARATION_PREFIX}typo.yaml": False,
    }, "every pipeline stays active, and each broken file is a DAG of its own"
    assert "syntax.yaml: not valid YAML" in broken[f"{BROKEN_DECLARATION_PREFIX}syntax.yaml"]
    assert (
        "dataset.nmae: Extra inputs are not permitted (fix: remove it"
        in broken[f"{BROKEN_DECLARATION_PREFIX}typo.yaml"]
    )

    typo.write_text(typo.read_text().replace("  nmae: team-c", "  name: team-c"))
    _parse(tmp_path)
    dags, _ = _recorded()
    # Its broken DAG, no longer in the file, goes stale at Airflow's next cleanup (stale_dag_threshold).
    assert dags["team_c_retrain"] is False, "the fixed file's pipeline loads at the next parse"


#: The project's DAG file as a bundle of its own, so the parses here mark nothing of another test stale.
BUNDLE = "declarations_under_test"


def _parse(folder: Path) -> None:
    """One pass of Airflow's dag-processor over the DAG file, loading ``folder``'s declarations."""
    bundles = [
        {
            "name": BUNDLE,
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(DAG_FILE.parent)},
        }
    ]
    env = {
        **os.environ,
        "ALIYUN_TRAINING_PIPELINES_DIR": str(folder),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "dag-processor", "--num-runs", "1"], env=env, check=True, capture_output=True)


def _recorded() -> tuple[dict[str, bool], dict[str, str]]:
    """The bundle's DAGs as the metadata DB records them (dag_id: stale) and its broken declarations'
    descriptions by dag_id; the file's import errors must be none."""
    from airflow.models.dag import DagModel
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session

    with create_session() as session:
        errors = session.query(ParseImportError).filter(ParseImportError.bundle_name == BUNDLE).all()
        assert not errors, [error.stacktrace for error in errors]
        models = session.query(DagModel).filter(DagModel.bundle_name == BUNDLE).all()
        return (
            {model.dag_id: model.is_stale for model in models},
            {
                model.dag_id: model.description or ""
                for model in models
                if model.dag_id.startswith(BROKEN_DECLARATION_PREFIX)
            },
        )


def test_a_long_error_is_cut_in_the_dag_list_after_its_last_whole_item(tmp_path: Path) -> None:
    path = _declare(tmp_path, "long.yaml", "long_retrain", "digits")
    path.write_text(path.read_text() + "".join(f"unknown_key_number_{n}: 1\n" for n in range(20)))

    (dag,) = [dag for dag in load_pipelines(tmp_path).values() if BROKEN_DECLARATION_TAG in dag.tags]

    assert len(dag.description) <= 300 and dag.description.startswith("long.yaml: "), dag.description
    assert dag.description.endswith(" …") and "unknown_key_number_19" not in dag.description
    assert "unknown_key_number_19" in dag.doc_md, "the docs hold the whole error"


def test_an_error_quoting_backticks_stays_inside_its_dags_code_block(tmp_path: Path) -> None:
    """A file's text reaches its error; whatever it holds, the DAG's docs show it, not render it."""
    path = _declare(tmp_path, "fenced.yaml", "fenced_retrain", "digits")
    path.write_text(path.read_text() + "'```\\n[click](http://example.com)': 1\n")

    (dag,) = [dag for dag in load_pipelines(tmp_path).values() if BROKEN_DECLARATION_TAG in dag.tags]

    fence, body = dag.doc_md.split("\n\n")[1].split("\n", 1)
    assert fence == "````" and body.endswith("\n````"), dag.doc_md
    assert "```" in body.removesuffix("\n````"), "the file's own backticks stay inside the block"
