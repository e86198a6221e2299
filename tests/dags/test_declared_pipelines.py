"""Declared pipelines: the second example end to end, broken declarations, and the README's guide."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pendulum
import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.declaration import load_declaration
from aliyun_training.operators.prepare import DatasetPrepareOperator
from aliyun_training.pages.runs import BROKEN_DECLARATION_TAG
from aliyun_training.pages.urls import report_page
from aliyun_training.pipelines import load_pipelines, training_pipeline
from aliyun_training.pipelines.folder import broken_dag_id
from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID

pytestmark = pytest.mark.slow

PROJECT_DIR = Path(__file__).resolve().parents[2]
DAG_FILE = PROJECT_DIR / "dags" / "training_pipelines.py"
RAW = "2026-11-01"


def _fast(dag):
    for task in dag.tasks:
        if hasattr(task, "poll_interval"):
            task.poll_interval = 0.1
    return dag


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_the_imagenet_pipeline_prepares_shards_once_stages_them_trains_and_publishes(
    airflow_db: Path, local_root: Path
) -> None:
    raw = local_root / "object-store" / "imagenet" / RAW
    generator = PROJECT_DIR / "include" / "imagenet_resnet" / "make_synthetic_raw.py"
    subprocess.run(
        [sys.executable, str(generator), "--out", str(raw), "--classes", "4", "--train-per-class", "40"],
        check=True,
    )
    dag = _fast(DagBag(dag_folder=str(DAG_FILE)).get_dag("imagenet_resnet_retrain"))
    conf = {"nodes": 1, "epochs": 1, "batch_size": 16, "width": 8}  # two nodes: the CIFAR-10 runs

    first = dag.test(logical_date=pendulum.datetime(2026, 11, 2, tz="UTC"), run_conf=conf)

    assert first.state == "success"
    states = _states(first)
    assert states["prepare_dataset"] == states["stage_dataset"] == states["train"] == "success"
    (derived,) = (local_root / "object-store" / "imagenet-shards").iterdir()
    declaration = load_declaration(PROJECT_DIR / "pipelines" / "imagenet_resnet.yaml")
    assert derived.name == f"{RAW}.{declaration.code_digest(declaration.render_prepare())}", (
        "named after the raw version and the code"
    )
    assert sorted(p.name for p in derived.glob("*.tar"))[0] == "train-000000.tar"
    assert (derived / "_prepared.json").is_file(), "the marker is written once the shards are complete"
    prepared = first.get_task_instance("prepare_dataset").xcom_pull(task_ids="prepare_dataset")
    assert prepared["reused"] is False
    # A rerun of the raw version plans the same derived version (its name is the code's digest) and
    # its prepare task finds the marker: nothing is submitted (an empty context would fail a submit).
    plan = first.get_task_instance("configure").xcom_pull(task_ids="configure", key="prepare")
    again = DatasetPrepareOperator(task_id="prepare_dataset", prepare=plan).execute({})  # type: ignore[arg-type]
    assert again == {"output_uri": prepared["output_uri"], "raw_uri": prepared["raw_uri"], "reused": True}
    (manifest_path,) = (local_root / "artifacts" / "resnet8" / derived.name).glob("*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["metrics"]["series"] == ["train_loss", "test_loss", "train_accuracy", "test_accuracy"]
    assert "Final train accuracy" in (manifest_path.parent / "report.html").read_text()
    assert manifest["dataset"]["version"] == derived.name
    link = first.get_task_instance("publish_artifacts").xcom_pull(
        task_ids="publish_artifacts", key="run_report_url"
    )
    assert link == report_page(dag.dag_id, first.run_id), "the task's Run report link, as the UI reads it"


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


MINIMAL = """\
    pipeline:
      dag_id: {dag_id}
      schedule: "@weekly"
    dataset:
      name: digits
    training:
      code_dir: code
      command: "python train.py --epochs {{epochs}}"
    parameters:
      epochs: {{type: integer, default: 2, minimum: 1, maximum: 50}}
"""


def test_each_broken_declaration_is_a_failing_dag_of_its_own_naming_file_and_key_while_the_others_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "pipelines"
    (folder / "code").mkdir(parents=True)
    _write(folder, "good.yaml", MINIMAL.format(dag_id="good_retrain"))
    broken = _write(
        folder, "broken.yaml", MINIMAL.format(dag_id="broken_retrain").replace("name: digits", "nam: x")
    )
    typo = _write(
        folder,
        "typo.yaml",
        MINIMAL.format(dag_id="typo_retrain").replace("--epochs {epochs}", "--epochs {epoch}"),
    )
    monkeypatch.setenv("ALIYUN_TRAINING_PIPELINES_DIR", str(folder))
    # Each of these fails alone, at load, instead of hiding every pipeline or failing every run:
    minimal = MINIMAL.format(dag_id="{dag_id}")
    pattern = "\n      run_name: {{type: string, default: a, pattern: '{pattern}'}}\n"
    loose = {
        "regex": minimal.rstrip("\n") + pattern.format(pattern="(["),
        "redos": minimal.rstrip("\n") + pattern.format(pattern="^(a+)+$"),
        "quoted": minimal.replace("--epochs {epochs}", '--epochs \\"{epochs}\\"'),
        "slashed": minimal.replace("name: digits", 'name: digits\n      version: {format: "%Y/%m/%d"}'),
    }
    for dag_id, text in loose.items():
        _write(folder, f"{dag_id}.yaml", text.replace("{dag_id}", f"{dag_id}_retrain"))
    # Its own model: two pipelines of one model would both be refused (tests/dags/test_loader_folder.py).
    _write(
        folder, "team_a.yaml", MINIMAL.format(dag_id="team_a_retrain").replace("name: digits", "name: team-a")
    )
    environments = tmp_path / "config"
    environments.mkdir()
    (environments / "dlc.json").write_text(json.dumps({"allowed_pipelines": ["team_b_*", "good_*"]}))
    monkeypatch.setenv("ALIYUN_TRAINING_ENVIRONMENT_DIR", str(environments))

    bag = DagBag(dag_folder=str(DAG_FILE))

    assert "good_retrain" in bag.dag_ids
    assert not bag.import_errors, "an import error would make Airflow mark every DAG of the file stale"
    refused = {dag.dag_id: dag for dag in bag.dags.values() if BROKEN_DECLARATION_TAG in dag.tags}
    files = ["broken", "typo", *loose, "team_a"]
    assert set(refused) == {broken_dag_id(folder / f"{name}.yaml") for name in files}, "one DAG per file"
    assert refused[broken_dag_id(broken)].description.startswith(f"{broken.name}: - ")
    assert [task.task_id for task in refused[broken_dag_id(typo)].tasks] == ["declaration_error"]
    error = "\n".join(dag.doc_md or "" for dag in refused.values())
    assert f"pipeline declaration {broken}" in error and "dataset.name: Field required" in error
    assert "dataset.nam: Extra inputs are not permitted" in error
    assert f"pipeline declaration {typo}" in error and "unknown placeholders ['epoch']" in error
    assert "parameters.run_name.pattern: '([' is not a regular expression" in error
    assert "parameters.run_name.pattern: '^(a+)+$' can take exponential time" in error
    assert "training.command: {epochs} is inside double quotes" in error
    assert "dataset.version.format: '%Y/%m/%d' makes version names such as '2026/01/05'" in error
    assert (
        "backends.dlc.environment dlc.json: its allowed_pipelines ['team_b_*', 'good_*'] do not match"
        in error
    )
    assert not {
        "regex_retrain",
        "redos_retrain",
        "quoted_retrain",
        "slashed_retrain",
        "team_a_retrain",
    } & set(bag.dag_ids)


def test_the_form_types_the_declared_parameters_and_refuses_a_bad_one(tmp_path: Path) -> None:
    folder = tmp_path / "pipelines"
    (folder / "code").mkdir(parents=True)
    dag = training_pipeline(_write(folder, "p.yaml", MINIMAL.format(dag_id="p")))
    declaration_param = dag.params.get_param("epochs")

    assert declaration_param.schema["type"] == "integer" and declaration_param.schema["title"] == "Epochs"
    [bounds] = declaration_param.schema["allOf"]
    assert (bounds["minimum"], bounds["maximum"]) == (1, 50), "where the UI's number input does not clamp"
    assert "framework" not in dag.params, "a pipeline offering one framework has no choice to make"
    with pytest.raises(Exception, match="50"):
        declaration_param.resolve(51)


def test_the_readme_guide_adds_a_model_and_dry_runs_it(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's "Add your own model", literally: a declaration, a script, a dry run.

    Its local run is the installed wheel's, in tests/packaging: the same declaration, script and
    DAG file, run by ``airflow dags test`` where only the wheel provides the package.
    """
    folder = tmp_path / "pipelines"
    guide = (PROJECT_DIR / "README.md").read_text()
    declaration = guide.split("<!-- guide:declaration -->\n```yaml\n", 1)[1].split("```", 1)[0]
    script = guide.split("<!-- guide:train.py -->\n```python\n", 1)[1].split("```", 1)[0]
    _write(folder, "digits.yaml", declaration)
    _write(folder / "digits", "train.py", script)
    version = local_root / "object-store" / "digits" / "v1"
    version.mkdir(parents=True)
    (version / "samples.txt").write_text("\n".join(str(i) for i in range(100)))
    (version / "_SUCCESS").touch()  # as the guide's upload does: a run takes only a landed version

    assert list(load_pipelines(folder)) == ["digits_retrain", RECONCILER_DAG_ID], "and its jobs' reconciler"
    monkeypatch.setenv("ALIYUN_TRAINING_PIPELINES_DIR", str(folder))
    dag = _fast(DagBag(dag_folder=str(DAG_FILE)).get_dag("digits_retrain"))
    dry = dag.test(logical_date=pendulum.datetime(2026, 11, 22, tz="UTC"), run_conf={"dry_run": True})

    assert dry.state == "success" and _states(dry)["train"] == "skipped", _states(dry)
    assert list((local_root / "dry-runs" / "digits").glob("*/plan.json"))
