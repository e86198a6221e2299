"""The pages' HTML: the list of pipelines, a pipeline's runs, and a page for what is not there.

Self-contained pages (inline CSS, no script), every value escaped: run ids, versions and metric
names come from runs that anyone allowed to trigger the DAG could shape.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from aliyun_training.artifacts.report import comparison_basis, duration, metric_charts
from aliyun_training.pages.runs import CHAMPION, champions_after, promotion_status
from aliyun_training.pages.urls import airflow_run_url, pipeline_page, plan_page, report_page

if TYPE_CHECKING:
    from datetime import datetime

    from aliyun_training.pages.runs import ChampionAfter, RunRow

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:78em;padding:0 1em;color:#1b1f24}"
    "table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35em .6em;"
    "border-bottom:1px solid #d0d7de;vertical-align:top}th{background:#f6f8fa}"
    ".state-success{color:#1a7f37}.state-failed{color:#cf222e}.state-running,.state-queued{color:#9a6700}"
    ".charts{display:flex;flex-wrap:wrap;gap:8px}ol.muted{list-style:none;padding:0}"
    "code{font-size:.9em}.muted{color:#57606a}.promotion-champion{color:#1a7f37;font-weight:bold}"
    ".promotion-not-approved{color:#cf222e}.promotion-awaiting-approval,.promotion-pending{color:#9a6700}"
    "tr.moved td{background:#dafbe1}small{display:block}"
)


def page(title: str, body: str) -> str:
    """A whole page around ``body`` (already escaped HTML)."""
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def pipelines_index(dag_ids: list[str]) -> str:
    """The training pipelines the user may read, each linking to its page."""
    items = "".join(f"<li><a href='{escape(pipeline_page(d))}'>{escape(d)}</a></li>" for d in dag_ids)
    listing = f"<ul>{items}</ul>" if items else "<p>No training pipeline you may read is deployed.</p>"
    return page("Training pipelines", f"<h1>Training pipelines</h1>{listing}")


def pipeline_runs_page(dag_id: str, rows: list[RunRow]) -> str:
    """A pipeline's runs, newest first: state, version, backend, final metrics and their pages."""
    metric_names = sorted({name for row in rows for name in row.metrics})
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in ["Run", "Type", "State", "Logical date", "Dataset version", "Model", "Backend", "Took"]
        + [name.removeprefix("final_").replace("_", " ") for name in metric_names]
        + ["Promotion", "Pages"]
    )
    body = "".join(_run_row(dag_id, row, metric_names) for row in rows)
    table = (
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        if rows
        else "<p>No runs yet: trigger one from the DAG's page.</p>"
    )
    return page(
        f"{dag_id}: training runs",
        f"<h1>{escape(dag_id)}</h1>{_history(rows)}{_champion_timeline(rows)}<h2>Runs</h2>"
        "<p class='muted'>Newest first, with the dataset version each trained on, its model's version "
        f"in the registry and its final metrics.</p>{table}",
    )


def _history(rows: list[RunRow]) -> str:
    """The final metrics of the runs that published a model, oldest first, charted run by run, with
    which dataset version each was and which became champion."""
    published = [row for row in reversed(rows) if row.metrics]
    if len(published) < 2:
        return ""
    names = sorted({name.removeprefix("final_") for row in published for name in row.metrics})
    series = {name: [row.metrics.get(f"final_{name}") for row in published] for name in names}
    legend = "".join(
        f"<li>run {i}: {escape(row.dataset_version or '')} <code>{escape(row.run_id)}</code>"
        f"{' — champion' if _became_champion(row) else ''}</li>"
        for i, row in enumerate(published, 1)
    )
    return (
        f"<h2>Across runs</h2><div class='charts'>{metric_charts({'series': names, **series}, 'run')}</div>"
        f"<ol class='muted'>{legend}</ol>"
    )


def _champion_timeline(rows: list[RunRow]) -> str:
    """Oldest first, which run's model was the champion after each run the gate decided on."""
    timeline = champions_after(rows)
    if not timeline:
        return ""
    number = {step.run.run_id: i for i, step in enumerate(timeline, 1)}
    body = "".join(_timeline_row(i, step, number) for i, step in enumerate(timeline, 1))
    return (
        "<h2>Champion after each run</h2><p class='muted'>Oldest first: a promotion makes its run the "
        "champion (highlighted), any other outcome leaves the one before it.</p><table><thead><tr>"
        "<th>#</th><th>Run</th><th>Dataset version</th><th>Model</th><th>Promotion</th>"
        f"<th>Champion after it</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _timeline_row(i: int, step: ChampionAfter, number: dict[str, int]) -> str:
    row, champion = step.run, step.champion
    if step.champion_run_id is None:
        after = "<span class='muted'>none yet</span>"
    else:
        which = f"run {number[step.champion_run_id]}: " if step.champion_run_id in number else ""
        details = []
        if champion is not None and champion.registered:
            details.append(f"model {_version(champion.registered)}")
        if champion is not None and champion.dataset_version:
            details.append(f"dataset {escape(champion.dataset_version)}")
        after = f"{which}<code>{escape(step.champion_run_id)}</code>" + "".join(f", {d}" for d in details)
    moved = " class='moved'" if step.changed else ""
    return (
        f"<tr{moved}><td>{i}</td><td><code>{escape(row.run_id)}</code></td>"
        f"<td>{escape(row.dataset_version or '')}</td><td>{_version(row.registered)}</td>"
        f"<td>{_promotion(row)}</td><td>{after}</td></tr>"
    )


def not_found_page(message: str) -> str:
    return page("Not found", f"<h1>Not found</h1><p>{escape(message)}</p>")


def _run_row(dag_id: str, row: RunRow, metric_names: list[str]) -> str:
    links = [f"<a href='{escape(airflow_run_url(dag_id, row.run_id))}'>Airflow run</a>"]
    if row.has_report:
        links.append(f"<a href='{escape(report_page(dag_id, row.run_id))}'>Run report</a>")
    if row.has_plan:
        links.append(f"<a href='{escape(plan_page(dag_id, row.run_id))}'>Run plan</a>")
    metrics = "".join(
        f"<td>{row.metrics[name]:.4g}</td>" if name in row.metrics else "<td></td>" for name in metric_names
    )
    return (
        f"<tr><td><code>{escape(row.run_id)}</code></td><td>{escape(row.run_type)}</td>"
        f"<td class='state-{escape(row.state)}'>{escape(row.state)}</td>"
        f"<td>{_when(row.logical_date)}</td><td>{escape(row.dataset_version or '')}</td>"
        f"<td>{_version(row.registered)}</td>"
        f"<td>{escape(row.backend or '')}</td><td>{_took(row.started, row.ended)}</td>{metrics}"
        f"<td>{_promotion(row, basis=True)}</td><td>{' · '.join(links)}</td></tr>"
    )


def _promotion(row: RunRow, basis: bool = False) -> str:
    """What the run did to the champion, with the reason on hover (and, with ``basis``, what the
    gate compared); empty where the pipeline has no gate."""
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
    return (
        f"<span class='promotion-{escape(label.replace(' ', '-'))}' title='{escape(reason)}'>"
        f"{escape(label)}</span>{compared}"
    )


def _became_champion(row: RunRow) -> bool:
    status = promotion_status(row)
    return status is not None and status[0] == CHAMPION


def _version(registered: dict[str, Any] | None) -> str:
    """The registry's version of a model ("v3"), its registry URI on hover; empty when unregistered."""
    if not registered or registered.get("version") is None:
        return ""
    uri, version = str(registered.get("uri") or ""), str(registered["version"])
    return f"<span title='{escape(uri)}'>v{escape(version)}</span>"


def _when(moment: datetime | None) -> str:
    return escape(moment.strftime("%Y-%m-%d %H:%M UTC")) if moment else ""


def _took(started: datetime | None, ended: datetime | None) -> str:
    return duration((ended - started).total_seconds()) if started and ended else ""
