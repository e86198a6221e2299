"""The retraining loop in real DAG runs: evaluate both models on the same data, register every
candidate in MLflow's registry, promote only a better one (after approval, when declared), and
announce the champion only when the pointer moves."""

from __future__ import annotations

import getpass
import json
from html import escape
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.dag_processing.dagbag import DagBag

from aliyun_training.installation import installation_id
from aliyun_training.model_registry.mlflow import challenger_alias, champion_alias
from aliyun_training.pages.urls import PREFIX, pipeline_page, report_page, rollback_page
from aliyun_training.pipelines.folder import broken_declaration_dag
from tests.dags.approvals import answer_when_asked
from tests.dags.asset_events import asset_event_extras
from tests.dags.scores_pipeline import (
    DAG_FILE,
    approval_pipeline,
    land_version,
    registry_client,
    scores_pipeline,
)
from tests.pages_client import (
    deploy,
    pages_client,
    screenshot_pages,
    start_runs_when_their_tasks_did,
    turn_on,
)

pytestmark = pytest.mark.slow

CHAMPION = "scores_champion"
#: A declaration file's error as the loader words it: the file, each key and its fix.
BROKEN_ERROR = (
    "pipeline declaration pipelines/team-b.yaml: - pipeline.schedule: 'weekly' has 1 fields, not five "
    "(fix: five cron fields, e.g. '0 3 * * 1', or a preset: @daily, @weekly, @monthly) - "
    "training.code_dir: Field required (fix: the training code's folder)"
)


@pytest.fixture
def dag(airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return scores_pipeline(tmp_path, local_root, monkeypatch)


def _run(
    dag: Any,
    skill: float,
    loss: float = 1.2,
    day: int = 1,
    version: str = "v1",
    answer: Any = None,
    moment: pendulum.DateTime | None = None,
) -> dict[str, Any]:
    """One run whose model has ``skill`` and ``loss``: its publish and promote records. The run id
    follows from ``day`` (or ``moment``, when given): running a day again clears and reruns every
    task of that run."""
    moment = moment or pendulum.datetime(2026, 11, day, tz="UTC")
    run = dag.test(
        logical_date=moment,
        run_after=moment,
        run_conf={"nodes": 1, "gpus_per_node": 0, "skill": skill, "loss": loss, "dataset_version": version},
    )
    assert run.state == "success", f"a decision not to promote is not a failure; the approver: {answer}"
    published = run.get_task_instance("publish_artifacts").xcom_pull(task_ids="publish_artifacts")
    promoted = run.get_task_instance("promote").xcom_pull(task_ids="promote")
    return {"run_id": run.run_id, **published, "promote": promoted}


def _outcome(run: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The run's published manifest's ``promotion`` and its report, as they are now."""
    manifest = json.loads(Path(run["manifest_uri"]).read_text())
    return manifest["promotion"], Path(run["report_uri"]).read_text()


def _row(table: str, run_id: str) -> str:
    """The row of the run in the pipeline page's table of runs, by the link its run id is (the
    tooltips of its model name the run too)."""
    [row] = [row for row in table.split("<tr>") if f">{run_id}</a>" in row]
    return row


def test_only_a_model_better_on_the_same_data_is_promoted_every_one_is_registered_once(
    dag: Any, local_root: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    land_version(local_root, "v1", difficulty=0.0)
    land_version(local_root, "v2", difficulty=0.3)
    before = len(asset_event_extras(CHAMPION))

    first = _run(dag, skill=0.60, day=1)
    # On the harder v2 the champion scores 0.30, the candidate 0.305: better, by less than 0.01.
    worse = _run(dag, skill=0.605, day=2, version="v2")
    unguarded = _run(dag, skill=0.90, loss=2.5, day=3, version="v2")
    # The two held candidates are registered; the challenger stays on the last one the gate passed.
    challenger = challenger_alias(installation_id())
    assert str(registry_client(local_root).get_model_version_by_alias("scores", challenger).version) == "1"
    # Someone moves the champion alias by hand, in MLflow's UI, onto the held version 2: the gate
    # still compares with the champion record (run 1), and says so before it decides.
    champion = champion_alias(installation_id())
    registry_client(local_root).set_registered_model_alias("scores", champion, "2")
    # 0.32 on v2 beats the champion's 0.30 there, although its own run recorded 0.60 on v1.
    better = _run(dag, skill=0.62, day=4, version="v2")
    assert (
        "the registry's champion pointer names version 2 of scores, not version 1"
        in (better["promotion"]["reason"])
    )

    runs = {"first": first, "worse": worse, "unguarded": unguarded, "better": better}
    decisions = {name: r["promotion"] for name, r in runs.items()}
    assert {name: d["promoted"] for name, d in decisions.items()} == {
        "first": True,
        "worse": False,
        "unguarded": False,
        "better": True,
    }
    assert {d["basis"] for d in decisions.values()} == {"evaluation"}
    assert decisions["worse"]["champion"] == pytest.approx(0.30), "the champion scored on v2, not its 0.60"
    assert decisions["worse"]["required"] == pytest.approx(0.31)
    assert "0.305 misses at least 0.31" in decisions["worse"]["reason"]
    assert decisions["unguarded"]["reason"] == "guard failed: test_loss 2.5 is not at most 2"
    assert decisions["better"]["champion_run_id"] == first["run_id"], "the others never moved it"
    assert [r["promote"]["promoted"] for r in runs.values()] == [True, False, False, True]

    # Every candidate is one MLflow model version with its lineage; the alias marks the champion.
    registry = registry_client(local_root)
    versions = sorted(registry.search_model_versions("name = 'scores'"), key=lambda v: int(v.version))
    assert [v.tags["lineage.run_id"] for v in versions] == [r["run_id"] for r in runs.values()]
    assert [v.tags["lineage.dataset_version"] for v in versions] == ["v1", "v2", "v2", "v2"]
    assert versions[1].tags["metric.test_accuracy"] == "0.305"
    assert len(versions[0].tags["lineage.code_digest"]) == 12
    # Made from the model logged from the candidate's MLflow run, kept beside the embedded store.
    run = registry.get_run(versions[0].run_id)
    assert run.data.tags["airflow.run_id"] == first["run_id"] and run.info.status == "FINISHED"
    assert versions[0].source.startswith((local_root / "mlflow" / "artifacts").as_uri())
    assert (
        registry.get_model_version_by_alias("scores", champion_alias(installation_id())).version
        == versions[3].version
    )
    assert better["registered"]["version"] == str(versions[3].version)

    # One champion event per promotion, with the model version, its metrics and the registry URI.
    events = asset_event_extras(CHAMPION)[before:]
    assert [(e["run_id"], e["replaced"]) for e in events] == [
        (first["run_id"], None),
        (better["run_id"], first["run_id"]),
    ]
    assert events[1]["model_version"] == str(versions[3].version)
    assert events[1]["metrics"]["test_accuracy"] == pytest.approx(0.32)
    assert events[1]["registry_uri"].startswith("models:/scores/")

    # The same decision in the manifest, the report and the task log; the files of a promoted
    # model say so once promote moved the pointer (they were published before it did).
    manifest = json.loads(Path(worse["manifest_uri"]).read_text())
    assert {key: manifest["promotion"][key] for key in decisions["worse"]} == decisions["worse"]
    assert manifest["promotion"]["outcome"]["state"] == "held"
    assert "Not promoted</strong>" in Path(worse["report_uri"]).read_text()
    assert [_outcome(r)[0]["promoted"] for r in runs.values()] == [True, False, False, True]
    assert "<strong>Promoted to champion</strong>" in _outcome(better)[1]
    log = capfd.readouterr().out
    assert "Promotion gate (evaluation): not promoted: test_accuracy 0.305 misses" in log
    assert "The champion pointer disagrees: the registry's champion pointer names version 2" in log

    # The pipeline's page says which runs became champion.
    page = pages_client().get(pipeline_page("scores_retrain")).text
    table = page.split("<h2>Runs</h2>", 1)[1]
    labels = {r["run_id"]: _row(table, r["run_id"]) for r in runs.values()}
    assert ">champion</span>" in labels[first["run_id"]] and ">champion</span>" in labels[better["run_id"]]
    assert ">held</span>" in labels[worse["run_id"]]
    assert "title='guard failed: test_loss 2.5 is not at most 2'>held</span>" in labels[unguarded["run_id"]]
    for r in runs.values():
        model = f"{r['registered']['uri']}'>v{r['registered']['version']} · dataset {r['dataset_version']}<"
        assert model in labels[r["run_id"]] and ">on evaluation</small>" in labels[r["run_id"]]
    # Every run and dataset version, oldest first, with the champion after each from promote's records.
    assert table.count("<td class='model'>") == 4
    assert (table.count("· dataset v1<"), table.count("· dataset v2<")) == (1, 3)
    legend = page.split("<h2>Across runs</h2>", 1)[1].split("</ol>", 1)[0]
    assert [line.endswith("— champion") for line in legend.split("</li>")[:4]] == [True, False, False, True]
    timeline = page.split("<h2>Champion after each run</h2>", 1)[1].split("<h2>Runs</h2>", 1)[0]
    steps = timeline.split("<tbody>", 1)[1].split("</tr>")[:4]
    champions_after = [step.rsplit("<td>", 1)[1] for step in steps]
    assert [r["run_id"] in step for r, step in zip(runs.values(), steps, strict=True)] == [True] * 4
    assert [first["run_id"] in c for c in champions_after] == [True, True, True, False]
    latest = champions_after[3]
    assert (
        better["run_id"] in latest and f">run 4: v{better['registered']['version']} · dataset v2<" in latest
    )
    assert "dataset v1" in champions_after[0] and "dataset v2" in champions_after[3]
    assert [step.startswith("<tr class='moved'>") for step in steps] == [True, False, False, True]

    # The champion's whole run again (every task retried, the same run id): registered once, not
    # moved, not announced again.
    again = _run(dag, skill=0.62, day=4, version="v2")
    assert again["run_id"] == better["run_id"]
    assert again["promote"]["reason"] == "already the champion"
    assert len(registry.search_model_versions("name = 'scores'")) == 4
    assert len(asset_event_extras(CHAMPION)) == before + 2

    # Today's run on a new version (0.6 there beats the champion's 0.52): the index reads the
    # pipeline at a glance, with its champion's model, the gate's score and since when, its latest
    # run, and the GPU-hours its jobs used (none here: the jobs ran on CPUs).
    land_version(local_root, "v3", difficulty=0.1)
    today = _run(dag, skill=0.7, version="v3", moment=pendulum.now("UTC"))
    start_runs_when_their_tasks_did("scores_retrain")
    # Beside the declared pipelines (the weekly one turned on) and a declaration that did not load.
    monkeypatch.delenv("ALIYUN_TRAINING_PIPELINES_DIR")
    deploy(*DagBag(dag_folder=str(DAG_FILE)).dags.values())
    turn_on("cifar10_retrain")
    broken = broken_declaration_dag(Path("pipelines/team-b.yaml"), BROKEN_ERROR)
    deploy(broken)
    pages = pages_client()
    index = pages.get(f"{PREFIX}/").text
    [listed] = [row for row in index.split("<tr>") if ">scores_retrain</a>" in row]
    champion, last_run, _, used = listed.split("<td")[2:]
    assert f">v{today['registered']['version']} · dataset v3</strong>" in champion
    assert "<small>test_accuracy 0.6</small><small class='muted'>since " in champion
    assert f"title='{today['run_id']}'>success</a>" in last_run
    assert used.startswith(" class='number'>0.0</td></tr>"), "jobs were recorded: zero, not unknown"
    assert f">{broken.dag_id}</a>" in index.split("<h2>Declarations that did not load</h2>", 1)[1]

    # Today's model turns out bad in production: roll back from the command line, as its admin.
    rolled_back = _roll_back_from_the_command_line(capfd, better, today)
    # Every pointer moved: the registry's alias, the champion record; the Asset announced it, saying who.
    assert _champion_version(local_root) == better["registered"]["version"]
    assert {key: rolled_back[key] for key in ("run_id", "replaced", "model_version")} == {
        "run_id": better["run_id"],
        "replaced": today["run_id"],
        "model_version": better["registered"]["version"],
    }
    assert len(asset_event_extras(CHAMPION)) == before + 4, "two promotions, today's, and the rollback"
    # The next run's gate compares with the champion rolled back to: 0.52 on v3, so 0.5 is held.
    after = _run(dag, skill=0.6, version="v3", moment=pendulum.now("UTC"))
    assert after["promotion"]["champion_run_id"] == better["run_id"]
    assert after["promotion"]["champion"] == pytest.approx(0.52) and not after["promote"]["promoted"]

    # On the page: a viewer sees who rolled back, and no way to; an Op rolls back to the first model.
    html = pages.get(pipeline_page("scores_retrain")).text
    section = html.split("<h2>Champion</h2>", 1)[1].split("<h2>", 1)[0]
    assert f"v{better['registered']['version']} · dataset v2</strong>" in section
    assert f"rolled back to by {escape(getpass.getuser())}" in section and "Roll back to it" not in section
    assert "Rolling back takes the permission to edit assets" in section
    first_version = first["registered"]["version"]
    _roll_back_on_the_page(first_version)
    assert _champion_version(local_root) == first_version
    assert asset_event_extras(CHAMPION)[-1]["rolled_back_by"] == "reader"
    html = pages_client("op").get(pipeline_page("scores_retrain")).text
    section = html.split("<h2>Champion</h2>", 1)[1].split("<h2>", 1)[0]
    assert (
        f"v{first_version} · dataset v1</strong> <small class='muted'>rolled back to by reader</small>"
        in section
    )
    assert section.count("Roll back to it") == 2, "to today's model, or back to the one rolled back from"
    # The timeline shows the run after the rollback compared with the champion rolled back to.
    timeline = html.split("<h2>Champion after each run</h2>", 1)[1].split("<h2>Runs</h2>", 1)[0]
    last_row = timeline.split("</tr>")[-2]
    assert after["run_id"] in last_row and ">run 4: v" in last_row
    [listed] = [row for row in pages.get(f"{PREFIX}/").text.split("<tr>") if ">scores_retrain</a>" in row]
    assert f">v{first_version} · dataset v1</strong>" in listed and "rolled back to by reader" in listed
    screenshot_pages(
        {
            "pipelines-index": index,
            "pipeline-history": html,
            "champion-rollback": pages_client("op")
            .get(rollback_page("scores_retrain", today["registered"]["version"]))
            .text,
            "run-report": pages.get(report_page("scores_retrain", today["run_id"])).text,
        }
    )


def _roll_back_from_the_command_line(
    capfd: pytest.CaptureFixture[str], champion_before: dict[str, Any], champion: dict[str, Any]
) -> dict[str, Any]:
    """``python -m aliyun_training champion rollback scores_retrain``, refused while a promotion is
    under way and done after; the champion event it announced."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    from aliyun_training.cli import main

    promoting = (TaskInstance.run_id == champion["run_id"]) & (TaskInstance.task_id == "promote")
    with create_session() as session:
        session.execute(update(TaskInstance).where(promoting).values(state="up_for_retry"))
    capfd.readouterr()
    assert main(["champion", "rollback", "scores_retrain"]) == 2
    assert f"error: run {champion['run_id']} of scores_retrain is promoting" in capfd.readouterr().err
    with create_session() as session:
        session.execute(update(TaskInstance).where(promoting).values(state="success"))
    assert main(["champion", "rollback", "scores_retrain", "--to", "nine"]) == 2
    assert (
        "error: to: 'nine' is no past champion of this pipeline (fix: name one of" in capfd.readouterr().err
    )

    assert main(["champion", "rollback", "scores_retrain"]) == 0
    said = capfd.readouterr().out
    assert said.split("scores_retrain: the champion is ", 1)[1].startswith(
        f"version {champion_before['registered']['version']} of scores, "
        f"dataset v2 (run {champion_before['run_id']}) again, in place of version "
    )
    assert main(["champion", "show", "scores_retrain"]) == 0
    out = capfd.readouterr().out
    shown = out[out.index("champion: ") :].splitlines()
    before = champion_before["registered"]["version"]
    assert shown[0] == f"champion: version {before} of scores, dataset v2 (run {champion_before['run_id']})"
    assert shown[1].startswith(f"  before: version {champion['registered']['version']} of scores, dataset v3")
    assert f"rolled back by {getpass.getuser()} " in shown[1] and ", replaced " in shown[2]
    extra: dict[str, Any] = asset_event_extras(CHAMPION)[-1]
    assert extra["rolled_back_by"] == getpass.getuser()
    return extra


def _roll_back_on_the_page(version: str) -> None:
    """Roll back to ``version`` as a browser does: the confirmation page, then its button; refused
    to a user without the permission to edit assets, and to a form posted from another site."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from aliyun_training.rollback import ROLLBACK_EVENT

    form = {"to": version}
    for role in ("viewer", "user"):
        assert pages_client(role).get(rollback_page("scores_retrain", version)).status_code == 403
        assert pages_client(role).post(rollback_page("scores_retrain"), data=form).status_code == 403
    op = pages_client("op")
    foreign = {"origin": "https://elsewhere.example"}
    assert op.post(rollback_page("scores_retrain"), data=form, headers=foreign).status_code == 403
    confirmation = op.get(rollback_page("scores_retrain", version))
    assert confirmation.status_code == 200
    assert f"the registry's champion pointer moves to version {version} of scores" in confirmation.text
    assert f"<input type='hidden' name='to' value='{version}'>" in confirmation.text
    done = op.post(rollback_page("scores_retrain"), data=form, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, pipeline_page("scores_retrain"))
    again = op.post(rollback_page("scores_retrain"), data=form)
    assert again.status_code == 409 and f"to: {version} is the champion already" in again.text
    with create_session() as session:
        audit = session.scalars(select(Log).where(Log.event == ROLLBACK_EVENT).order_by(Log.id)).all()
    assert [(entry.owner, entry.dag_id) for entry in audit[-2:]] == [
        (getpass.getuser(), "scores_retrain"),
        ("reader", "scores_retrain"),
    ]


def _champion_version(local_root: Path) -> str:
    """The version the registry's champion alias of this installation names."""
    alias = champion_alias(installation_id())
    return str(registry_client(local_root).get_model_version_by_alias("scores", alias).version)


def test_a_promotion_that_needs_approval_waits_for_it_and_moves_only_once_approved(
    airflow_db: Path, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = approval_pipeline(tmp_path, local_root, monkeypatch)
    before = len(asset_event_extras("approved_champion"))

    approved = answer_when_asked("scores_approved", "approve_promotion", "Approve")
    first = _run(dag, skill=0.6, answer=approved)
    rejected = answer_when_asked("scores_approved", "approve_promotion", "Reject")
    second = _run(dag, skill=0.7, day=2, answer=rejected)

    assert approved["response"] == 200 and rejected["response"] == 200
    assert "| test_accuracy | 0.6 | - |" in approved["body"], "the approver sees the comparison"
    assert "- test_loss 1.2 ≤ max 2" in approved["body"], "each guard with its bound"
    assert f"[Open the run report]({report_page('scores_approved', first['run_id'])})" in approved["body"]
    # The report the link opened while the approver was asked: awaiting them, not promoted yet.
    assert "<strong>Awaiting approval</strong>" in approved["report"]
    assert "Promoted to champion" not in approved["report"]
    assert first["promotion"]["needs_approval"] and first["promote"]["promoted"]
    assert second["promotion"]["promoted"] and second["promote"] is None, "rejected: promote skipped"
    # Once promote decided, the published files say what became of each.
    (promoted, promoted_report), (refused, refused_report) = _outcome(first), _outcome(second)
    assert promoted["promoted"] is True and promoted["outcome"]["state"] == "promoted"
    assert "<strong>Promoted to champion, approved by approver</strong>" in promoted_report
    assert refused["promoted"] is False and refused["outcome"]["state"] == "not_approved"
    assert "<strong>Not approved by approver</strong>" in refused_report
    assert "Promoted to champion" not in refused_report and "Awaiting approval" not in refused_report
    events = asset_event_extras("approved_champion")[before:]
    assert [e["run_id"] for e in events] == [first["run_id"]]
    assert (
        int(
            registry_client(local_root)
            .get_model_version_by_alias("approved", champion_alias(installation_id()))
            .version
        )
        == 1
    )
    page = pages_client().get(pipeline_page("scores_approved")).text
    table = page.split("<h2>Runs</h2>", 1)[1]
    assert ">not approved</span>" in _row(table, second["run_id"])
    # The page says what the report says: the outcome promote recorded, with its reason.
    assert f"title='{escape(refused['outcome']['reason'])}'>not approved</span>" in _row(
        table, second["run_id"]
    )
    assert ">champion</span>" in _row(table, first["run_id"])
    timeline = page.split("<h2>Champion after each run</h2>", 1)[1].split("<tbody>", 1)[1].split("</tr>")
    assert [first["run_id"] in step.rsplit("<td>", 1)[1] for step in timeline[:2]] == [True, True]
