"""A dry run as plain text for a terminal: what the command line prints by default.

Every line fits ``render.WIDTH`` columns but for a single unbreakable token (``render.wrap``). The
JSON bodies are not repeated here: each body is shown key by key with every value, its base64
scripts decoded, and ``--format json`` prints the document whole, exact to the byte, for a program
or a diff; doubling it here would bring back the pages of JSON and the blobs this rendering exists
to spare the reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.plan.render import WIDTH, layout, numbered, read_document, wrap

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aliyun_training.findings import PreflightReport
    from aliyun_training.plan.render import RequestView, StageView

#: How far a request's body and its scripts are indented under the request.
BODY = "      "


def render_text(document: dict[str, Any], width: int = WIDTH) -> str:
    """The dry run's summary, cost ceiling, checks, then each stage with its requests."""
    view = read_document(document)
    lines = [
        view.heading,
        "Nothing was created, copied, built or submitted: this is what the run would do.",
        "",
        "SUMMARY",
        *table(view.summary, width),
        "",
        f"COST CEILING: {view.ceiling}",
        *wrap("every job the run may start, nodes x GPUs x timeout x tries:", width, "  "),
        *table(view.cost_rows, width),
        "",
        "CHECKS",
        *table(view.checks, width),
        *(_findings(view.preflight, width) if view.preflight else []),
    ]
    for number, stage in enumerate(view.stages, 1):
        lines += ["", *_stage(number, stage, width)]
    return "\n".join(line.rstrip() for line in lines)


def table(rows: Sequence[tuple[str, ...]], width: int, indent: str = "  ") -> list[str]:
    """Rows in columns as wide as their widest cell; the last column wrapped under itself."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines: list[str] = []
    for *cells, last in rows:
        lead = indent + "".join(
            f"{cell:<{cell_width}}   " for cell, cell_width in zip(cells, widths, strict=True)
        )
        lines += wrap(last, width, lead, " " * len(lead)) if last else [lead]
    return lines


def _findings(report: PreflightReport, width: int) -> list[str]:
    """The preflight's findings, a fix under each that is not a PASS; then the checks not applicable."""
    rows: list[tuple[str, ...]] = []
    for finding in report.findings:
        rows.append((finding.verdict.value, finding.check, finding.found))
        if finding.fix and finding.verdict != "PASS":
            rows.append(("", "", f"fix: {finding.fix}"))
    rows += [("SKIP", skipped.check, skipped.reason) for skipped in report.not_applicable]
    return ["", "PREFLIGHT FINDINGS", *table(rows, width)] if rows else []


def _stage(number: int, stage: StageView, width: int) -> list[str]:
    heading = f"{number}. {stage.task}" + (f": {stage.purpose}" if stage.purpose else "")
    lines = [*wrap(heading, width), *(table(stage.facts, width) if stage.facts else [])]
    for request in stage.requests:
        lines += _request(request, width)
    return lines


def _request(request: RequestView, width: int) -> list[str]:
    lines = wrap(f"request: {request.heading}", width, "  ")
    if request.where:
        lines += wrap(f"where: {request.where}", width, "    ")
    if request.note:
        lines += wrap(f"note: {request.note}", width, "    ")
    lines += ["    body:", *layout(request.shown, width, BODY)]
    for script in request.scripts:
        if script.repeated:
            lines.append(f"    script {script.number}: as decoded above")
        else:
            lines.append(f"    script {script.number}, decoded from the base64 in the body:")
            lines += [BODY + line for line in numbered(script.text, width - len(BODY))]
    return lines
