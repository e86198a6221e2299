"""What the pages show, read in the API server: a pipeline's runs and what their tasks returned.

Everything comes from Airflow's metadata database (runs, XComs and the live record the trigger
watching a run's job keeps, ``live``) and, for a report, from where
the run's own ``publish_artifacts`` task said it published it: the pages never list a bucket or a
folder, so they show nothing a run of this pipeline did not publish. A report on OSS is read through
the alibaba_cloud connection the run's plan named; the browser never gets bucket credentials.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.champion import OUTCOME_KEY, PastChampion, promote_outcome
from aliyun_training.live import LIVE_KEY, LiveRecord, open_live
from aliyun_training.rollback import ChampionStanding, champion_standing
from aliyun_training.task_ids import (
    APPROVE_PROMOTION,
    CONFIGURE,
    PROMOTE,
    PUBLISH_ARTIFACTS,
    SHOW_PLAN,
    TRAIN,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from aliyun_training.promotion import Champion

log = logging.getLogger(__name__)

#: The XCom every task's return value is stored under.
RETURN_VALUE = "return_value"
#: The tag every DAG built from a pipeline declaration carries, and no other DAG of the package.
PIPELINE_TAG = "training"
#: The tag of the DAG that stands for a declaration file that did not load, in its pipeline's place.
BROKEN_DECLARATION_TAG = "invalid-declaration"
#: The records that count only while their task is in the given state: a cleared task still holds
#: its old XComs. ``promote`` returns its record when it succeeds, and leaves its outcome when it skips.
_COUNTED_WHEN = {
    (PUBLISH_ARTIFACTS, RETURN_VALUE): "success",
    (PROMOTE, RETURN_VALUE): "success",
    (PROMOTE, OUTCOME_KEY): "skipped",
}
#: The states of a task that has not finished (yet): an approval waits in the last three.
_UNFINISHED = {"none", "scheduled", "queued", "running", "up_for_retry", "up_for_reschedule", "restarting"}
_AWAITING = {"awaiting_input", "deferred", "running"}

#: What a run did to the champion, as the pipeline page labels it.
CHAMPION, HELD, NOT_APPROVED, AWAITING_APPROVAL, PENDING = (
    "champion",
    "held",
    "not approved",
    "awaiting approval",
    "pending",
)
#: The label of each ``promotion.Outcome`` state.
_LABELS = {
    "promoted": CHAMPION,
    "held": HELD,
    "not_approved": NOT_APPROVED,
    "approval_timed_out": NOT_APPROVED,
    "awaiting_approval": AWAITING_APPROVAL,
    "awaiting_promotion": PENDING,
}


class PageNotFound(LookupError):
    """The run has no such record (yet): the message says what is missing, for a 404 page."""


@dataclass(frozen=True)
class RunRow:
    """One run as the pipeline page lists it."""

    run_id: str
    run_type: str
    state: str
    logical_date: datetime | None
    started: datetime | None
    ended: datetime | None
    backend: str | None = None
    dataset_version: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    has_report: bool = False
    has_plan: bool = False
    #: The promotion gate's decision (``promotion.Decision`` as JSON), when the pipeline has one.
    promotion: dict[str, Any] | None = None
    #: The model registry's version of the run's model (``RegisteredVersion`` as JSON).
    registered: dict[str, Any] | None = None
    #: What the ``promote`` task returned: ``promoted`` true only where the pointer moved to this run.
    promoted: dict[str, Any] | None = None
    #: The outcome (``promotion.Outcome`` as JSON) ``promote`` left when it skipped: a Reject, or an
    #: approval that timed out.
    skipped_outcome: dict[str, Any] | None = None
    #: The states of the ``promote`` and ``approve_promotion`` tasks (None: the run has no such task).
    promote_state: str | None = None
    approval_state: str | None = None


@dataclass(frozen=True)
class ChampionAfter:
    """Which run's model was the champion once ``run`` had run (``champion`` its row, when listed)."""

    run: RunRow
    champion_run_id: str | None
    champion: RunRow | None
    #: Whether this run moved the pointer.
    changed: bool


@dataclass(frozen=True)
class PipelineSummary:
    """One pipeline as the index lists it: what a team asks of it at a glance."""

    dag_id: str
    #: The champion the pointer names: the one after the newest run the gate decided on, unless a
    #: person rolled back since; None where no gate decided yet.
    champion: ChampionAfter | None
    latest: RunRow | None
    #: Whether the scheduler starts runs of it now (a paused pipeline only runs when triggered).
    paused: bool
    #: When the scheduler creates its next time-scheduled run; None without a time schedule.
    next_run: datetime | None
    #: Whether a new dataset version landing starts a run (an asset schedule).
    on_new_version: bool
    #: What this month's runs' training jobs used; None where no such run recorded a job.
    gpu_hours: float | None
    #: The rollback that made ``champion`` the champion again, when one did (who, and when).
    rolled_back: PastChampion | None = None


@dataclass(frozen=True)
class LiveRun:
    """What the run page shows of a pipeline's run: its training job as the trigger last recorded
    it (None before the job reported, or where the record is not the trigger's), and whether the
    run has published its report, which then takes over from the page."""

    dag_id: str
    run_id: str
    #: The DAG run's state: a run that ended stops the page refreshing, whatever its record says.
    run_state: str
    record: LiveRecord | None
    has_report: bool

    @property
    def refreshing(self) -> bool:
        """Whether the page reloads itself: the run goes on, its job has not ended and there is no
        report yet."""
        return (
            not self.has_report
            and self.run_state in ("queued", "running")
            and (self.record is None or self.record.running)
        )


@dataclass(frozen=True)
class BrokenDeclaration:
    """A declaration file that did not load: the DAG that stands for it and its error on one line."""

    dag_id: str
    error: str


def promotion_status(row: RunRow) -> tuple[str, str] | None:
    """What the run did to the champion and why; None where there is no gate.

    Once ``promote`` ran, its outcome (``promotion.Outcome``, the record the run's manifest and
    report carry too) says it, with its reason. Before, the gate's decision and the tasks' states
    do: a gate that passed a model leaves it a candidate until a person approves it (where the
    rule asks) and ``promote`` succeeds. A run from before the promote task existed (it has none,
    and is over) was promoted by its gate's decision alone.
    """
    decision = row.promotion
    if not decision:
        return None
    reason = str(decision.get("reason", ""))
    recorded = promote_outcome(row.promoted, row.skipped_outcome)
    if recorded is not None:
        return _LABELS[recorded.state], recorded.reason
    if not decision.get("promoted"):
        return HELD, reason
    if row.approval_state in _AWAITING:
        return AWAITING_APPROVAL, f"the gate passed it ({reason}); it waits for a person to approve"
    if decision.get("needs_approval") and row.promote_state == "skipped":
        # A promote from before it left its outcome when it skipped.
        return NOT_APPROVED, f"the gate passed it ({reason}), but it was rejected or not answered in time"
    if row.promote_state is None and row.state not in ("queued", "running"):
        return CHAMPION, reason
    if row.promote_state is None or row.promote_state in _UNFINISHED:
        return PENDING, f"the gate passed it ({reason}); promote has not run yet"
    return HELD, f"the gate passed it ({reason}), but promote ended {row.promote_state}"


def champions_after(rows: list[RunRow]) -> list[ChampionAfter]:
    """Oldest first, the champion after each run the gate decided on (``rows`` newest first): a
    promotion makes the run the champion, any other outcome leaves the one before it. Before the
    first promotion listed, the champion is the one the oldest run's gate compared with. A run
    that started after the champion's run ended, and whose gate compared with another champion,
    shows a rollback between them: the champion is then the one it compared with."""
    decided = [row for row in reversed(rows) if row.promotion]
    by_id = {row.run_id: row for row in decided}
    current: str | None = (decided[0].promotion or {}).get("champion_run_id") if decided else None
    timeline = []
    for row in decided:
        if _rolled_back_before(row, by_id.get(current) if current else None):
            current = (row.promotion or {}).get("champion_run_id")
        status = promotion_status(row)
        changed = status is not None and status[0] == CHAMPION and current != row.run_id
        if status is not None and status[0] == CHAMPION:
            current = row.run_id
        timeline.append(ChampionAfter(row, current, by_id.get(current) if current else None, changed))
    return timeline


def _rolled_back_before(row: RunRow, champion: RunRow | None) -> bool:
    """Whether the pointer moved off ``champion`` (the runs' last) before ``row`` ran: its gate
    compared with another run although it started after the champion's run ended. Overlapping runs
    say nothing (one awaiting approval may promote after the other's gate compared)."""
    compared = (row.promotion or {}).get("champion_run_id")
    if champion is None or not compared or compared in (row.run_id, champion.run_id):
        return False
    return champion.ended is not None and row.started is not None and champion.ended <= row.started


def champion_now(
    timeline: list[ChampionAfter], current: Champion | None, rows: list[RunRow]
) -> ChampionAfter | None:
    """The champion after the newest run the gate decided on (``timeline``'s last), unless the
    pointer names another one now (``current``: a person rolled back since), which is then it."""
    last = timeline[-1] if timeline else None
    if current is None or last is None or last.champion_run_id == current.run_id:
        return last
    listed = next((row for row in rows if row.run_id == current.run_id), None)
    return ChampionAfter(last.run, current.run_id, listed, changed=False)


def rolled_back_to(standing: ChampionStanding) -> PastChampion | None:
    """The rollback that made the current champion the champion again (the history's newest entry
    says who rolled back from what, and when); None where its own promotion made it champion."""
    current, history = standing.current, standing.history
    if current is None or current.rolled_back_by is None or not history or history[0].left != "rolled back":
        return None
    return history[0]


def pipeline_dag_ids(session: Session) -> list[str]:
    """The ids of the deployed DAGs built from a pipeline declaration."""
    return [model.dag_id for model in _tagged(session, PIPELINE_TAG)]


def broken_declarations(session: Session) -> list[BrokenDeclaration]:
    """The declaration files of this deployment that did not load, by the DAGs that stand for them:
    the loader gives each the error (file, key path and fix) as its description."""
    return [
        BrokenDeclaration(model.dag_id, model.description or "")
        for model in _tagged(session, BROKEN_DECLARATION_TAG)
    ]


def pipeline_summaries(session: Session, dag_ids: list[str]) -> list[PipelineSummary]:
    """Each of the pipelines ``dag_ids``: its champion, latest run, next run and this month's GPU-hours."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    models = {m.dag_id: m for m in session.scalars(select(DagModel).where(DagModel.dag_id.in_(dag_ids)))}
    month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    summaries = []
    for dag_id in dag_ids:
        model, rows = models[dag_id], pipeline_runs(session, dag_id)
        standing = champion_standing(session, dag_id)
        summaries.append(
            PipelineSummary(
                dag_id=dag_id,
                champion=champion_now(champions_after(rows), standing.current, rows),
                rolled_back=rolled_back_to(standing),
                latest=rows[0] if rows else None,
                paused=bool(model.is_paused),
                next_run=model.next_dagrun_create_after,
                on_new_version=model.asset_expression is not None,
                gpu_hours=_gpu_hours_since(session, dag_id, month),
            )
        )
    return summaries


def run_gpu_hours(trained: dict[str, Any]) -> float:
    """The GPU-hours a run's training task used (its ``JobResult``): every try's job once, at its
    largest record, as the run's ``max_gpu_hours`` budget counts them (a try that lost track of a
    job and the try that watched it end both record it). A record from before tries were recorded
    counts its own job."""
    from aliyun_training.stage_records import jobs_gpu_hours

    attempts = trained.get("attempts") or [trained]
    return jobs_gpu_hours((str(a.get("job_id")), float(a.get("gpu_hours") or 0.0)) for a in attempts)


def pipeline_runs(session: Session, dag_id: str, limit: int = 100) -> list[RunRow]:
    """The pipeline's newest ``limit`` runs with their backend, version, final metrics and pages."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    runs = session.scalars(
        select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()).limit(limit)
    ).all()
    run_ids = [run.run_id for run in runs]
    values = _returned(session, dag_id, run_ids)
    states = _states(session, dag_id, run_ids, [PUBLISH_ARTIFACTS, PROMOTE, APPROVE_PROMOTION])
    for run_id, task_id, key in list(values):
        counted = _COUNTED_WHEN.get((task_id, key))
        if counted is not None and states.get((run_id, task_id)) != counted:
            del values[(run_id, task_id, key)]
    rows = []
    for run in runs:
        published = values.get((run.run_id, PUBLISH_ARTIFACTS, RETURN_VALUE)) or {}
        dataset = values.get((run.run_id, CONFIGURE, "dataset")) or {}
        rows.append(
            RunRow(
                run_id=run.run_id,
                run_type=str(run.run_type),
                state=str(run.state),
                logical_date=run.logical_date,
                started=run.start_date,
                ended=run.end_date,
                backend=values.get((run.run_id, CONFIGURE, "backend")),
                dataset_version=dataset.get("version"),
                metrics={
                    key: value
                    for key, value in (published.get("metrics") or {}).items()
                    if key.startswith("final_") and isinstance(value, int | float)
                },
                has_report=bool(published.get("report_uri")),
                promotion=published.get("promotion"),
                registered=published.get("registered"),
                promoted=values.get((run.run_id, PROMOTE, RETURN_VALUE)),
                skipped_outcome=values.get((run.run_id, PROMOTE, OUTCOME_KEY)),
                promote_state=states.get((run.run_id, PROMOTE)),
                approval_state=states.get((run.run_id, APPROVE_PROMOTION)),
                has_plan=(run.run_id, SHOW_PLAN, RETURN_VALUE) in values,
            )
        )
    return rows


def task_record(session: Session, dag_id: str, run_id: str, task_id: str, key: str = RETURN_VALUE) -> Any:
    """What ``task_id`` of the run returned (or pushed under ``key``); PageNotFound when nothing."""
    found = _xcoms(session, dag_id, [run_id], [(task_id, key)])
    if (run_id, task_id, key) not in found:
        raise PageNotFound(f"{task_id} of run {run_id} of {dag_id} has returned nothing (yet)")
    return found[(run_id, task_id, key)]


def live_run(session: Session, dag_id: str, run_id: str) -> LiveRun:
    """The run page's content; PageNotFound where ``dag_id`` is no pipeline or has no such run."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if state is None or dag_id not in pipeline_dag_ids(session):
        raise PageNotFound(f"{dag_id} has no training pipeline run {run_id}")
    published = _xcoms(session, dag_id, [run_id], [(PUBLISH_ARTIFACTS, RETURN_VALUE)])
    report = published.get((run_id, PUBLISH_ARTIFACTS, RETURN_VALUE))
    return LiveRun(
        dag_id=dag_id,
        run_id=run_id,
        run_state=str(state),
        record=_live_record(session, dag_id, run_id),
        has_report=isinstance(report, dict) and bool(report.get("report_uri")),
    )


def _live_record(session: Session, dag_id: str, run_id: str) -> LiveRecord | None:
    """The ``train`` task's live record, read raw (it carries its own seal); None where there is
    none yet or its seal is not that task's: one written through the REST API is not shown."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    row = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == TRAIN,
            XComModel.key == LIVE_KEY,
            XComModel.map_index == -1,
        )
    ).first()
    if row is None:
        return None
    record = open_live(XComModel.deserialize_value(row), dag_id, run_id, TRAIN)
    if record is None:
        log.warning(
            "Not shown: %s's XCom %r of run %s has no seal of its own: it was written or changed after "
            "the trigger wrote it (through the REST API?)",
            TRAIN,
            LIVE_KEY,
            run_id,
        )
    return record


def read_report(published: dict[str, Any], alibaba_cloud_conn_id: str | None) -> str:
    """The run report of the artifact set ``publish_artifacts`` returned, from where it was published.

    Only the set's own ``report.html`` is read: a local one must be a plain file directly in the
    set's folder (no link followed), an OSS one is the object under the set's prefix.
    """
    from aliyun_training.artifacts.manifest import REPORT_NAME

    uri, report_uri = str(published.get("uri") or ""), str(published.get("report_uri") or "")
    if uri.startswith("oss://"):
        from aliyun_training.oss_location import parse_oss_uri
        from aliyun_training.staging.oss import OssClientConfig

        location = parse_oss_uri(uri, field="uri")
        if report_uri != location.uri + REPORT_NAME:
            raise PageNotFound(f"the artifact set at {uri} names no report of its own")
        if not alibaba_cloud_conn_id:
            raise PageNotFound("the run's plan names no alibaba_cloud connection to read its report with")
        bucket = OssClientConfig.from_connection(alibaba_cloud_conn_id).bucket(
            location.bucket_name, enable_crc=True
        )
        content: bytes = bucket.get_object(location.prefix + REPORT_NAME).read()
        return content.decode("utf-8")
    folder, report = Path(uri), Path(report_uri)
    if report != folder / REPORT_NAME or report.is_symlink() or not report.is_file():
        raise PageNotFound(f"no report at {report_uri}: it was moved or removed, or is not the set's own")
    return report.read_text(encoding="utf-8")


def _tagged(session: Session, tag: str) -> list[Any]:
    """The deployed (not stale) ``DagModel``s carrying ``tag``, by dag_id."""
    from airflow.models.dag import DagModel, DagTag
    from sqlalchemy import select

    return list(
        session.scalars(
            select(DagModel)
            .join(DagTag, DagTag.dag_id == DagModel.dag_id)
            .where(DagTag.name == tag, DagModel.is_stale.is_(False))
            .order_by(DagModel.dag_id)
        ).all()
    )


def _gpu_hours_since(session: Session, dag_id: str, start: datetime) -> float | None:
    """The GPU-hours of the training jobs of the pipeline's runs that ended after ``start`` or have
    not ended; None where none of them recorded a training job (a failed one records none)."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import or_, select

    run_ids = list(
        session.scalars(
            select(DagRun.run_id).where(
                DagRun.dag_id == dag_id, or_(DagRun.end_date.is_(None), DagRun.end_date >= start)
            )
        ).all()
    )
    trained = _xcoms(session, dag_id, run_ids, [(TRAIN, RETURN_VALUE)]).values()
    return sum(run_gpu_hours(record) for record in trained) if trained else None


def _returned(session: Session, dag_id: str, run_ids: list[str]) -> dict[tuple[str, str, str], Any]:
    """The records the run list shows; of the plan only whether one exists (it can be large)."""
    found = _xcoms(
        session,
        dag_id,
        run_ids,
        [
            (CONFIGURE, "backend"),
            (CONFIGURE, "dataset"),
            (PUBLISH_ARTIFACTS, RETURN_VALUE),
            (PROMOTE, RETURN_VALUE),
            (PROMOTE, OUTCOME_KEY),
        ],
    )
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    planned = session.execute(
        select(XComModel.run_id).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id.in_(run_ids),
            XComModel.task_id == SHOW_PLAN,
            XComModel.key == RETURN_VALUE,
            XComModel.map_index == -1,
        )
    ).scalars()
    return found | {(run_id, SHOW_PLAN, RETURN_VALUE): True for run_id in planned}


def _states(
    session: Session, dag_id: str, run_ids: list[str], task_ids: list[str]
) -> dict[tuple[str, str], str]:
    """``(run_id, task_id) -> state`` ("none" before it was scheduled) of the runs' unmapped
    instances of ``task_ids``; a run without such a task has no entry."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    if not run_ids:
        return {}
    rows = session.execute(
        select(TaskInstance.run_id, TaskInstance.task_id, TaskInstance.state).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id.in_(run_ids),
            TaskInstance.task_id.in_(task_ids),
            TaskInstance.map_index == -1,
        )
    ).all()
    return {(run_id, task_id): str(state or "none") for run_id, task_id, state in rows}


def _xcoms(
    session: Session, dag_id: str, run_ids: list[str], wanted: list[tuple[str, str]]
) -> dict[tuple[str, str, str], Any]:
    """``(run_id, task_id, key) -> value`` of the unmapped XComs ``wanted`` of the runs whose seal
    matches: a record written or changed through the REST API is not shown, as if absent."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import or_, select

    from aliyun_training.seals import SEAL_KEY, SealError, check

    if not run_ids:
        return {}
    sealed = [*wanted, *((task, SEAL_KEY) for task in sorted({task for task, _ in wanted}))]
    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id.in_(run_ids),
            XComModel.map_index == -1,
            or_(*((XComModel.task_id == task) & (XComModel.key == key) for task, key in sealed)),
        )
    ).all()
    found = {(row.run_id, row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}
    verified = {}
    for (run_id, task_id, key), value in found.items():
        if key == SEAL_KEY:
            continue
        try:
            check(value, found.get((run_id, task_id, SEAL_KEY)), dag_id, run_id, task_id, key)
        except SealError as exc:
            log.warning("Not shown: %s", exc)
            continue
        verified[(run_id, task_id, key)] = value
    return verified
