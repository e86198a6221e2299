"""A dry run: the plan, the read-only checks and every request the run would make, then stop.

The document is the same from the CLI (``python -m aliyun_training plan``) and from a DAG run with
``dry_run`` set: ``plan`` (the typed plan as JSON), ``requests`` (``{"service", "action", "body",
"task"}`` per request, in the order the stages send them), ``checks`` (the preflight report: its
``findings`` and, under ``not_applicable``, each check group skipped with why; what staging would
copy, whether the image exists; each ``{"skipped": reason}`` when not checked) and
``cost`` (every job the run may start, its tries and GPU-hours at most, from ``plan.cost``) with
their sum, ``gpu_hour_ceiling``. Only reads reach a platform: listings, Describe and
Get calls, the registry's manifest HEAD.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from aliyun_training.plan.cost import cost_ceiling
from aliyun_training.plan.requests import JobNamer, planned_image, planned_requests

if TYPE_CHECKING:
    from aliyun_training.plan.models import RunPlan


def dry_run_document(
    plan: RunPlan, job_namer: JobNamer, preflight: dict[str, Any] | None, check_platform: bool
) -> dict[str, Any]:
    """The dry run of ``plan``; ``check_platform`` asks the read-only questions of the platform."""
    requests = [request.as_json() for request in planned_requests(plan, job_namer)]
    not_checked = "not checked: the dry run ran without preflight"
    cost = cost_ceiling(plan)
    return {
        "backend": plan.backend.value,
        "dataset_version": plan.dataset.version,
        "gpu_hour_ceiling": cost["gpu_hours"],
        "cost": cost,
        "plan": plan.model_dump(mode="json"),
        "checks": {
            "preflight": preflight or {"skipped": not_checked},
            "staging": staging_check(plan) if check_platform else {"skipped": not_checked},
            "image": image_check(plan) if check_platform else {"skipped": not_checked},
        },
        "requests": requests,
    }


def staging_check(plan: RunPlan) -> dict[str, Any]:
    """What staging would copy: the source listing against the version already staged, read-only."""
    staging = plan.staging
    if staging is None:
        return {"skipped": "the run stages nothing: the job mounts the environment's dataset"}
    if staging.mode != "direct":
        return {"skipped": f"{staging.mode} staging compares the files where it runs, not from here"}
    from aliyun_training.staging.engine import copy_plan
    from aliyun_training.staging.opening import open_connected_source
    from aliyun_training.staging.sources import StagingError
    from aliyun_training.validation import SpecError

    try:
        source = open_connected_source(staging.source_uri, staging.alibaba_cloud_conn_id)
        return copy_plan(source, staging.target_root, staging.version)
    except (SpecError, StagingError) as exc:
        return {"error": str(exc)}


def image_check(plan: RunPlan) -> dict[str, Any]:
    """The image the jobs run in and, for a build, whether its tag is already in the registry."""
    image = plan.image
    reference = planned_image(image)
    if image is None or not image.mode or image.pinned:
        return {"image": reference, "build": False}
    if image.force_rebuild:
        return {"image": reference, "build": True, "exists": None, "why": "force_rebuild is set"}
    from aliyun_training.image.registry import RegistryAuthError, image_digest

    try:
        digest = image_digest(reference or "", image.registry_conn_id)
    except RegistryAuthError as exc:
        return {"image": reference, "error": str(exc)}
    return {"image": reference, "exists": bool(digest), "digest": digest, "build": not digest}


def render_html(document: dict[str, Any]) -> str:
    """A readable page of the dry run: the checks, then each request with its body."""
    escape = html.escape
    rows = "".join(
        f"<h3>{i}. {escape(r['task'])}: {escape(r['service'])} {escape(r['action'])}</h3>"
        f"<pre>{escape(json.dumps(r['body'], indent=2, sort_keys=True, default=str))}</pre>"
        for i, r in enumerate(document["requests"], 1)
    )
    cost = "".join(
        f"<tr><td>{escape(job['task'])}</td><td>{job['nodes']} x {job['gpus_per_node']}</td>"
        f"<td>{job['timeout_minutes']} min</td><td>{job['tries']}</td><td>{job['gpu_hours']}"
        f"{' (max_gpu_hours)' if job.get('capped_by') else ''}</td></tr>"
        for job in document["cost"]["jobs"]
    )
    checks = escape(json.dumps(document["checks"], indent=2, sort_keys=True, default=str))
    plan = escape(json.dumps(document["plan"], indent=2, sort_keys=True, default=str))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Dry run: {escape(document['backend'])} {escape(document['dataset_version'])}</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}"
        "pre{background:#f6f8fa;padding:1em;overflow:auto}</style></head><body>"
        f"<h1>Dry run on {escape(document['backend'])}: dataset version "
        f"{escape(document['dataset_version'])}</h1>"
        f"<p>{len(document['requests'])} requests; at most {document['gpu_hour_ceiling']} GPU-hours"
        f"{_in_money(document['cost'])} (every job the run may start: nodes x GPUs x timeout x tries). "
        "Nothing was created, copied, built or submitted.</p>"
        "<h2>Cost ceiling</h2><table><tr><th>job</th><th>nodes x GPUs</th><th>timeout</th>"
        f"<th>tries</th><th>GPU-hours at most</th></tr>{cost}</table>"
        f"<h2>Checks</h2><pre>{checks}</pre><h2>Requests</h2>{rows}"
        f"<h2>Plan</h2><pre>{plan}</pre></body></html>"
    )


def _in_money(cost: dict[str, Any]) -> str:
    """The ceiling in money where the environment gives a price, as a parenthesis; else nothing."""
    if "money" not in cost:
        return ""
    return f", {cost['money']} {html.escape(cost['currency'])} at {cost['price_per_gpu_hour']} per GPU-hour"
