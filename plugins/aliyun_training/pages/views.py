"""The pages' HTML: the index of pipelines, a pipeline's runs, and a page for what is not there (a
run's live page is ``run_view.py``, in the page frame ``page`` draws here).

Self-contained pages (inline CSS and SVG, no script), every value escaped: run ids, versions and
metric names come from runs that anyone allowed to trigger the DAG could shape, and a broken
declaration's error quotes its file. A model is named by its registry
version and the dataset version it trained on, which a team knows it by; the run id, long and
telling nothing of the model, is a small link.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from aliyun_training.artifacts.report import comparison_basis, duration, metric_charts
from aliyun_training.pages.runs import CHAMPION, HELD, NOT_APPROVED, champions_after, promotion_status
from aliyun_training.pages.urls import (
    airflow_dag_url,
    airflow_run_url,
    pipeline_page,
    plan_page,
    report_page,
    rollback_page,
)

if TYPE_CHECKING:
    from datetime import datetime

    from aliyun_training.champion import PastChampion
    from aliyun_training.pages.runs import BrokenDeclaration, ChampionAfter, PipelineSummary, RunRow
    from aliyun_training.promotion import Champion
    from aliyun_training.rollback import ChampionStanding

#: Tables scroll inside their box rather than widen the page; a run id breaks anywhere (the charts
#: draw long y-axis labels outside their box themselves: ``report.metric_chart_svg``).
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:78em;padding:0 1em;color:#1b1f24}"
    ".table{overflow-x:auto}table{border-collapse:collapse;width:100%}th,td{text-align:left;"
    "padding:.35em .6em;border-bottom:1px solid #d0d7de;vertical-align:top}th{background:#f6f8fa}"
    ".state-success{color:#1a7f37}.state-failed{color:#cf222e}.state-running,.state-queued{color:#9a6700}"
    ".charts{display:flex;flex-wrap:wrap;gap:8px}"
    "ol.muted{list-style:none;padding:0}"
    "code{font-size:.9em}.muted{color:#57606a}.promotion-champion{color:#1a7f37;font-weight:bold}"
    ".promotion-not-approved{color:#cf222e}.promotion-awaiting-approval,.promotion-pending{color:#9a6700}"
    "tr.moved td{background:#dafbe1}small{display:block}.model{min-width:11em;max-width:18em}"
    ".run-id{font-family:monospace;overflow-wrap:anywhere}.number{text-align:right}"
    ".error{font-family:monospace;font-size:.85em;overflow-wrap:anywhere;white-space:pre-wrap}"
    ".warning{background:#fff8c5;border-left:4px solid #9a6700;padding:.5em .8em}"
    ".promotion-locked{color:#9a6700;font-weight:bold}"
    "form.inline{display:inline;margin:0}button{font:inherit;padding:.2em .7em;cursor:pointer}"
    ".state-succeeded{color:#1a7f37}.state-stopped{color:#cf222e}.state-pending{color:#9a6700}"
    ".at-risk{color:#9a6700}progress{width:16em;vertical-align:middle}table.facts th{width:9em}"
    ".ended{background:#dafbe1;border-left:4px solid #1a7f37;padding:.5em .8em}"
    "figure{margin:0 0 1em}figcaption{font-weight:bold}pre.log{background:#f6f8fa;padding:.6em;"
    "font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}"
)


def page(title: str, body: str, refresh_seconds: int | None = None) -> str:
    """A whole page around ``body`` (already escaped HTML), reloading itself every
    ``refresh_seconds`` where given."""
    refresh = f"<meta http-equiv='refresh' content='{refresh_seconds}'>" if refresh_seconds else ""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{refresh}<title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def pipelines_index(summaries: list[PipelineSummary], broken: list[BrokenDeclaration]) -> str:
    """The training pipelines the user may read, one line each: its champion, its latest run, when
    it runs next and what its training used this month; then the declaration files that did not
    load, each with its error, since their pipelines are missing from the list above."""
    rows = "".join(_summary_row(summary) for summary in summaries)
    listing = (
        "<div class='table'><table><thead><tr><th>Pipeline</th><th>Champion</th><th>Last run</th>"
        "<th>Next run</th><th class='number' title='GPUs times hours of the training jobs of the runs "
        "that ended this month (UTC) or are under way'>GPU-hours this month</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
        if rows
        else "<p>No training pipeline you may read is deployed.</p>"
    )
    return page("Training pipelines", f"<h1>Training pipelines</h1>{listing}{_broken(broken)}")


def _summary_row(summary: PipelineSummary) -> str:
    """The pipeline's line; its last run by state and when it ended, the run id on hover (a team
    asks whether it worked and how fresh it is, not which run it was)."""
    dag_id = summary.dag_id
    latest = summary.latest
    last = (
        f"<a class='state-{escape(latest.state)}' href='{escape(airflow_run_url(dag_id, latest.run_id))}' "
        f"title='{escape(latest.run_id)}'>{escape(latest.state)}</a>"
        f"<small class='muted'>{_when(latest.ended or latest.started)}</small>"
        if latest
        else "<span class='muted'>no runs yet</span>"
    )
    used = summary.gpu_hours
    return (
        f"<tr><td><a href='{escape(pipeline_page(dag_id))}'>{escape(dag_id)}</a></td>"
        f"<td>{_champion(summary)}</td><td>{last}</td><td>{_next_run(summary)}</td>"
        f"<td class='number'>{'—' if used is None else f'{used:,.1f}'}</td></tr>"
    )


def _champion(summary: PipelineSummary) -> str:
    """The champion by its model, the gate's metric when it was promoted and since when (the end of
    the run that promoted it, or the rollback to it, with who rolled back); a dash where no gate
    decided yet."""
    step = summary.champion
    if step is None:
        return "<span class='muted'>—</span>"
    champion = step.champion
    if champion is None:
        return (
            f"<code>{escape(step.champion_run_id)}</code>"
            if step.champion_run_id
            else "<span class='muted'>none yet</span>"
        )
    decision = champion.promotion or {}
    score = decision.get("candidate")
    metric = f"{decision.get('metric')} {score:.4g}" if isinstance(score, int | float) else ""
    rollback = summary.rolled_back
    since = rollback.until if rollback else champion.ended or champion.started
    return (
        f"<strong title='{escape(_model_title(champion))}'>{escape(_model_name(champion))}</strong>"
        f"<small>{escape(metric)}</small>"
        + (f"<small class='muted'>since {_when(since)}</small>" if since else "")
        + (f"<small class='muted'>rolled back to by {escape(rollback.by or '')}</small>" if rollback else "")
    )


def _next_run(summary: PipelineSummary) -> str:
    """When the scheduler starts the pipeline's next run, in words: its next time, a new version's
    landing, or only when someone triggers it."""
    ways = ([_when(summary.next_run)] if summary.next_run else []) + (
        ["when a new dataset version lands"] if summary.on_new_version else []
    )
    if not ways:
        return "<span class='muted'>manual</span>"
    if summary.paused:
        return "<span class='muted' title='turned off: it runs only when triggered'>paused</span>"
    return " or ".join(ways)


def _broken(broken: list[BrokenDeclaration]) -> str:
    """The declarations that did not load, each linking to its DAG in Airflow, whose docs hold the
    whole error; nothing where every declaration loaded."""
    if not broken:
        return ""
    rows = "".join(
        f"<tr><td><a href='{escape(airflow_dag_url(b.dag_id))}'>{escape(b.dag_id)}</a></td>"
        f"<td class='error'>{escape(b.error)}</td></tr>"
        for b in broken
    )
    return (
        "<h2>Declarations that did not load</h2><p class='muted'>Each file's pipeline is off until the "
        "file is fixed; the DAG standing for it shows the whole error.</p><div class='table'><table>"
        f"<thead><tr><th>DAG</th><th>Error</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def pipeline_runs_page(
    dag_id: str, rows: list[RunRow], standing: ChampionStanding | None = None, may_roll_back: bool = False
) -> str:
    """A pipeline's runs, newest first: model, state, backend, final metrics and their pages; above
    them its champion now and the past champions (``standing``), each with a way to roll back to it
    for a user who ``may_roll_back``."""
    metric_names = sorted({name for row in rows for name in row.metrics})
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in ["Model", "State", "Type", "Logical date", "Backend", "Took"]
        + [name.removeprefix("final_").replace("_", " ") for name in metric_names]
        + ["Promotion", "Pages"]
    )
    body = "".join(_run_row(dag_id, row, metric_names) for row in rows)
    table = (
        f"<div class='table'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
        if rows
        else "<p>No runs yet: trigger one from the DAG's page.</p>"
    )
    return page(
        f"{dag_id}: training runs",
        f"<h1>{escape(dag_id)}</h1>{_gate_lock(rows)}{_champion_now(dag_id, standing, may_roll_back)}"
        f"{_history(rows)}{_champion_timeline(rows)}<h2>Runs</h2>"
        "<p class='muted'>Newest first: each run's model by its version in the registry and the dataset "
        f"version it trained on, with its final metrics.</p>{table}",
    )


def _gate_lock(rows: list[RunRow]) -> str:
    """A warning atop the page where the newest decision says no later model can pass the gate
    (``Decision.unreachable``, with its fix): else the team learns it only from runs held one by one.
    A pass that never became the champion (rejected, or ``promote`` failed) speaks of a champion
    there is not: it warns of nothing."""
    newest = next((row for row in rows if row.promotion), None)
    decision = (newest.promotion if newest else None) or {}
    locked = decision.get("unreachable")
    status = promotion_status(newest) if newest else None
    if not locked or (decision.get("promoted") and status is not None and status[0] in (HELD, NOT_APPROVED)):
        return ""
    return f"<p class='warning' role='alert'><strong>Promotion gate:</strong> {escape(str(locked))}</p>"


def _history(rows: list[RunRow]) -> str:
    """The final metrics of the runs that published a model, oldest first, charted run by run, with
    which model each was and which became champion."""
    published = [row for row in reversed(rows) if row.metrics]
    if len(published) < 2:
        return ""
    names = sorted({name.removeprefix("final_") for row in published for name in row.metrics})
    series = {name: [row.metrics.get(f"final_{name}") for row in published] for name in names}
    legend = "".join(
        f"<li title='{escape(_model_title(row))}'>run {i}: {escape(_model_name(row))}"
        f"{' — champion' if _became_champion(row) else ''}</li>"
        for i, row in enumerate(published, 1)
    )
    return (
        f"<h2>Across runs</h2><div class='charts'>{metric_charts({'series': names, **series}, 'run')}</div>"
        f"<ol class='muted'>{legend}</ol>"
    )


def _champion_timeline(rows: list[RunRow]) -> str:
    """Oldest first, which model was the champion after each run the gate decided on."""
    timeline = champions_after(rows)
    if not timeline:
        return ""
    number = {step.run.run_id: i for i, step in enumerate(timeline, 1)}
    body = "".join(_timeline_row(i, step, number) for i, step in enumerate(timeline, 1))
    return (
        "<h2>Champion after each run</h2><p class='muted'>Oldest first: a promotion makes its run's model "
        "the champion (highlighted), any other outcome leaves the one before it.</p><div class='table'>"
        "<table><thead><tr><th>#</th><th>Model</th><th>Promotion</th><th>Champion after it</th></tr>"
        f"</thead><tbody>{body}</tbody></table></div>"
    )


def _timeline_row(i: int, step: ChampionAfter, number: dict[str, int]) -> str:
    row, champion = step.run, step.champion
    if step.champion_run_id is None:
        after = "<span class='muted'>none yet</span>"
    elif champion is None:
        after = f"<code>{escape(step.champion_run_id)}</code>"
    else:
        which = f"run {number[champion.run_id]}: " if champion.run_id in number else ""
        after = f"<span title='{escape(_model_title(champion))}'>{which}{escape(_model_name(champion))}"
        after += "</span>"
    moved = " class='moved'" if step.changed else ""
    return (
        f"<tr{moved}><td>{i}</td><td title='{escape(_model_title(row))}'>{escape(_model_name(row))}</td>"
        f"<td>{_promotion(row)}</td><td>{after}</td></tr>"
    )


def _champion_now(dag_id: str, standing: ChampionStanding | None, may_roll_back: bool) -> str:
    """The champion as its pointer names it now (who rolled back to it, if someone did), and the
    past champions, newest first, each with a link to roll back to it where the user may."""
    current = standing.current if standing else None
    if standing is None or current is None:
        return ""
    rows = "".join(_past_row(dag_id, past, may_roll_back) for past in standing.history)
    listing = (
        "<div class='table'><table><thead><tr><th>Past champion</th><th>Until</th><th>How it left</th>"
        f"<th></th></tr></thead><tbody>{rows}</tbody></table></div>"
        if rows
        else "<p class='muted'>No champion before it.</p>"
    )
    permission = (
        ""
        if may_roll_back or not rows
        else "<p class='muted'>Rolling back takes the permission to edit assets (Airflow's Op role or "
        "above).</p>"
    )
    return (
        f"<h2>Champion</h2><p><strong title='run {escape(current.run_id)}'>{_champion_name(current)}</strong>"
        f"{_rolled_back_by(current)}</p>{listing}{permission}"
    )


def _past_row(dag_id: str, past: PastChampion, may_roll_back: bool) -> str:
    how = "replaced by a promotion"
    if past.left == "rolled back":
        how = f"rolled back by {escape(past.by or '')}"
    action = (
        f"<a href='{escape(rollback_page(dag_id, past.version or past.champion.run_id))}'>Roll back to it</a>"
        if may_roll_back
        else ""
    )
    return (
        f"<tr><td title='run {escape(past.champion.run_id)}'>{_champion_name(past.champion)}</td>"
        f"<td>{_when(past.until)}</td><td>{how}</td><td>{action}</td></tr>"
    )


def _champion_name(champion: Champion) -> str:
    """A champion as the runs table names its model: "v7 · dataset 2026-11-22" (escaped)."""
    registered = champion.registered
    return escape(_model_label(registered.version if registered else None, champion.dataset_version))


def _rolled_back_by(champion: Champion) -> str:
    return (
        f" <small class='muted'>rolled back to by {escape(champion.rolled_back_by)}</small>"
        if champion.rolled_back_by
        else ""
    )


def rollback_confirmation_page(dag_id: str, current: Champion, target: PastChampion) -> str:
    """What a rollback to ``target`` moves, and the button that does it (a POST to this page)."""
    to = target.version or target.champion.run_id
    registered = target.champion.registered
    moves = (
        f"the registry's champion pointer moves to version {escape(registered.version)} of "
        f"{escape(registered.model)}, "
        if registered
        else ""
    )
    return page(
        f"{dag_id}: roll back the champion",
        f"<h1>Roll back {escape(dag_id)}'s champion</h1>"
        f"<p>From <strong title='run {escape(current.run_id)}'>{_champion_name(current)}</strong> to "
        f"<strong title='run {escape(target.champion.run_id)}'>{_champion_name(target.champion)}</strong>: "
        f"{moves}the pipeline's next runs compare with it, and the champion Asset announces it to what "
        "deploys it. You are recorded as who did it.</p>"
        f"<form class='inline' method='post' action='{escape(rollback_page(dag_id))}'>"
        f"<input type='hidden' name='to' value='{escape(to)}'><button type='submit'>Roll back</button></form>"
        f" <a href='{escape(pipeline_page(dag_id))}'>Cancel</a>",
    )


def rollback_refused_page(dag_id: str, reason: str) -> str:
    """Why the rollback did not happen (nothing moved), with the way back to the pipeline."""
    return page(
        f"{dag_id}: not rolled back",
        f"<h1>Not rolled back</h1><p class='warning' role='alert'>{escape(reason)}</p>"
        f"<p>Nothing moved. <a href='{escape(pipeline_page(dag_id))}'>Back to {escape(dag_id)}</a></p>",
    )


def not_found_page(message: str) -> str:
    return page("Not found", f"<h1>Not found</h1><p>{escape(message)}</p>")


def _run_row(dag_id: str, row: RunRow, metric_names: list[str]) -> str:
    links = []
    if row.has_report:
        links.append(f"<a href='{escape(report_page(dag_id, row.run_id))}'>Report</a>")
    if row.has_plan:
        links.append(f"<a href='{escape(plan_page(dag_id, row.run_id))}'>Plan</a>")
    metrics = "".join(
        f"<td class='number'>{row.metrics[name]:.4g}</td>" if name in row.metrics else "<td></td>"
        for name in metric_names
    )
    return (
        f"<tr><td class='model'><span title='{escape(_model_title(row))}'>{escape(_model_name(row))}</span>"
        f"<small><a class='run-id' href='{escape(airflow_run_url(dag_id, row.run_id))}' "
        f"title='Open the run in Airflow'>{escape(row.run_id)}</a></small></td>"
        f"<td class='state-{escape(row.state)}'>{escape(row.state)}</td><td>{escape(row.run_type)}</td>"
        f"<td>{_when(row.logical_date)}</td><td>{escape(row.backend or '')}</td>"
        f"<td>{_took(row.started, row.ended)}</td>{metrics}"
        f"<td>{_promotion(row, basis=True)}</td><td>{' · '.join(links)}</td></tr>"
    )


def _model_name(row: RunRow) -> str:
    """The run's model as a team names it, "v7 · dataset 2026-11-22": its version in the registry
    (none before it is registered) and the dataset version it trained on (none before it is known)."""
    return _model_label((row.registered or {}).get("version"), row.dataset_version)


def _model_label(version: str | None, dataset_version: str | None) -> str:
    names = ([f"v{version}"] if version is not None else []) + (
        [f"dataset {dataset_version}"] if dataset_version else []
    )
    return " · ".join(names) or "no model"


def _model_title(row: RunRow) -> str:
    """What a model's name shows on hover: the run that trained it and its registry URI."""
    uri = (row.registered or {}).get("uri")
    return f"run {row.run_id}" + (f", {uri}" if uri else "")


def _promotion(row: RunRow, basis: bool = False) -> str:
    """What the run did to the champion, with the reason on hover, "gate locked" where its decision
    says no later model can pass (and, with ``basis``, what the gate compared); empty where the
    pipeline has no gate."""
    status = promotion_status(row)
    if status is None or row.promotion is None:
        return ""
    label, reason = status
    compared = (
        f"<small class='muted' title='{escape(comparison_basis(row.promotion))}'>on "
        f"{escape(str(row.promotion.get('basis') or 'final metrics'))}</small>"
        if basis
        else ""
    )
    locked = row.promotion.get("unreachable")
    marker = (
        f"<small class='promotion-locked' title='{escape(str(locked))}'>gate locked</small>" if locked else ""
    )
    return (
        f"<span class='promotion-{escape(label.replace(' ', '-'))}' title='{escape(reason)}'>"
        f"{escape(label)}</span>{marker}{compared}"
    )


def _became_champion(row: RunRow) -> bool:
    status = promotion_status(row)
    return status is not None and status[0] == CHAMPION


def _when(moment: datetime | None) -> str:
    return escape(moment.strftime("%Y-%m-%d %H:%M UTC")) if moment else ""


def _took(started: datetime | None, ended: datetime | None) -> str:
    return duration((ended - started).total_seconds()) if started and ended else ""
