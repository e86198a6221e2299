"""A dry run as one self-contained HTML page: the ``plan.html`` the "Run plan" link opens.

It shows what the text rendering shows (``render_text``), as tables and sections, and each
request's JSON body and the whole plan in collapsed ``<details>``: the page is opened from a task's
link, with no terminal to run ``--format json`` in. Inline CSS and no script or external asset,
so the file reads the same wherever it is copied. Every value is escaped: the document carries
what users typed (the trigger form, environment files, pipeline declarations).
"""

from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING, Any

from aliyun_training.plan.render import WIDTH, layout, numbered, read_document

if TYPE_CHECKING:
    from collections.abc import Iterable

    from aliyun_training.findings import PreflightReport
    from aliyun_training.plan.render import RequestView, Script, StageView

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:72em;margin:2em auto;padding:0 1em;color:#1f2328}"
    "table{border-collapse:collapse;margin:.5em 0}th,td{text-align:left;vertical-align:top;"
    "padding:.2em .8em;border-bottom:1px solid #d0d7de}td:first-child{white-space:nowrap}"
    "pre{background:#f6f8fa;padding:.8em;white-space:pre-wrap;overflow-wrap:anywhere}"
    "section{border-top:2px solid #d0d7de;margin-top:1.5em}h4{margin-bottom:.3em}"
    ".PASS{color:#1a7f37}.WARN{color:#9a6700}.FAIL{color:#cf222e;font-weight:bold}.SKIP{color:#59636e}"
)


def render_html(document: dict[str, Any]) -> str:
    """The dry run's page: summary, cost ceiling, checks, then each stage with its requests."""
    view = read_document(document)
    stages = "".join(_stage(number, stage) for number, stage in enumerate(view.stages, 1))
    plan = json.dumps(document["plan"], indent=2, sort_keys=True, default=str)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(view.heading)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(view.heading)}</h1>"
        "<p>Nothing was created, copied, built or submitted: this is what the run would do.</p>"
        f"<h2>Summary</h2>{_table(view.summary)}"
        f"<h2>Cost ceiling: {escape(view.ceiling)}</h2>"
        "<p>Every job the run may start, nodes x GPUs x timeout x tries.</p>"
        f"{_table(view.cost_rows[1:], header=view.cost_rows[0])}"
        f"<h2>Checks</h2>{_table(view.checks)}{_findings(view.preflight) if view.preflight else ''}"
        f"<h2>Stages</h2>{stages}"
        f"<details><summary>The plan (JSON)</summary>{_pre(plan)}</details>"
        "</body></html>"
    )


def _table(rows: Iterable[tuple[str, ...]], header: tuple[str, ...] = ()) -> str:
    head = "<tr>" + "".join(f"<th>{escape(cell)}</th>" for cell in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _findings(report: PreflightReport) -> str:
    """The preflight's findings, each with its fix; then the checks not applicable."""
    rows = [
        (f.verdict.value, f.check, f.found, f.fix if f.verdict != "PASS" else "") for f in report.findings
    ]
    rows += [("SKIP", skipped.check, skipped.reason, "") for skipped in report.not_applicable]
    cells = "".join(
        f"<tr><td class='{escape(verdict)}'>{escape(verdict)}</td><td>{escape(check)}</td>"
        f"<td>{escape(found)}</td><td>{escape(fix)}</td></tr>"
        for verdict, check, found, fix in rows
    )
    head = "<tr><th></th><th>check</th><th>found</th><th>fix</th></tr>"
    return f"<h3>Preflight findings</h3><table>{head}{cells}</table>"


def _stage(number: int, stage: StageView) -> str:
    purpose = f": {escape(stage.purpose)}" if stage.purpose else ""
    requests = "".join(_request(request) for request in stage.requests)
    return (
        f"<section><h3>{number}. {escape(stage.task)}{purpose}</h3>{_table(stage.facts)}{requests}</section>"
    )


def _request(request: RequestView) -> str:
    where = f"<p>where: {escape(request.where)}</p>" if request.where else ""
    note = f"<p>note: {escape(request.note)}</p>" if request.note else ""
    scripts = "".join(_script(script) for script in request.scripts)
    shown = "\n".join(layout(request.shown, WIDTH))
    body = json.dumps(request.body, indent=2, sort_keys=True, default=str)
    return (
        f"<h4>request: {escape(request.heading)}</h4>{where}{note}{_pre(shown)}{scripts}"
        f"<details><summary>JSON body, as sent</summary>{_pre(body)}</details>"
    )


def _script(script: Script) -> str:
    if script.repeated:
        return f"<p>script {script.number}: as decoded above</p>"
    text = "\n".join(numbered(script.text, WIDTH))
    return f"<p>script {script.number}, decoded from the base64 in the body:</p>{_pre(text)}"


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"
