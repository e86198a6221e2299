"""plan.render_text: a dry run as text for the person deciding the spend, within the terminal's width.

The dry runs are of 2 x 8-GPU DLC runs (the ``dlc_plan`` fixture) at a price per GPU-hour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.plan.dry_run import dry_run_document
from aliyun_training.plan.render import WIDTH
from aliyun_training.plan.render_text import render_text, table

if TYPE_CHECKING:
    from collections.abc import Callable

    from aliyun_training.plan.models import RunPlan

REPORT = {
    "findings": [
        {"check": "quota", "verdict": "FAIL", "found": "quota1ab2 has 8 GPUs free", "fix": "wait for room"},
        {"check": "network", "verdict": "PASS", "found": "vsw-1 is in the Lingjun zone", "fix": "unused"},
    ],
    "not_applicable": [{"check": "pvc", "reason": "only ACK jobs mount PVCs"}],
}


def dlc_dry_run(dlc_plan: Callable[..., RunPlan], preflight: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dry run, without platform checks, of a run of at most 90 minutes a try at 30.5 a GPU-hour."""
    plan = dlc_plan({"price_per_gpu_hour": 30.5}, timeout_minutes=90)
    return dry_run_document(plan, lambda task: f"dry-run-{task}", preflight=preflight, check_platform=False)


def test_the_text_leads_with_what_happened_the_summary_cost_and_checks_then_each_stage(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    lines = render_text(dlc_dry_run(dlc_plan)).splitlines()

    assert lines[:2] == [
        "Dry run on dlc: cifar10 version 2026-11-22",
        "Nothing was created, copied, built or submitted: this is what the run would do.",
    ]
    headings = [line for line in lines if line and not line.startswith(" ")]
    assert headings[2:5] == [
        "SUMMARY",
        "COST CEILING: at most 89.5 GPU-hours, 2729.75 CNY at 30.5 per GPU-hour",
        "CHECKS",
    ]
    stages = [line.split(":")[0] for line in headings[5:]]
    assert stages[:3] == ["1. verify_image", "2. check_rdma", "3. train"], stages
    assert "  request: dlc CreateJob: PyTorchJob dry-run-train" in lines


def test_no_line_is_wider_than_the_terminal_but_a_single_unbreakable_token(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    lines = render_text(dlc_dry_run(dlc_plan)).splitlines()

    too_wide = [line for line in lines if len(line) > WIDTH and len(line.split()) > 1]
    assert too_wide == []
    assert all(line == line.rstrip() for line in lines), "no trailing blanks"


def test_preflight_findings_show_a_fix_under_each_that_did_not_pass_then_the_skipped_checks(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    text = render_text(dlc_dry_run(dlc_plan, REPORT))

    findings = text.split("PREFLIGHT FINDINGS\n")[1].split("\n\n")[0].splitlines()
    assert findings == [
        "  FAIL   quota     quota1ab2 has 8 GPUs free",
        "                   fix: wait for room",
        "  PASS   network   vsw-1 is in the Lingjun zone",
        "  SKIP   pvc       only ACK jobs mount PVCs",
    ]


def test_a_table_pads_its_columns_and_wraps_the_last_one_under_itself() -> None:
    rows = [("backend", "dlc"), ("dataset", "cifar10 " + "a-long-word " * 4)]

    lines = table(rows, width=40)

    assert lines == [
        "  backend   dlc",
        "  dataset   cifar10 a-long-word",
        "            a-long-word a-long-word",
        "            a-long-word",
    ]
    assert max(len(line) for line in lines) <= 40
