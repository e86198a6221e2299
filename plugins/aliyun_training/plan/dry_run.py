"""A dry run: the plan, the read-only checks and every request the run would make, then stop.

The document is the same from the CLI (``python -m aliyun_training plan``) and from a DAG run with
``dry_run`` set: ``plan`` (the typed plan as JSON), ``requests`` (``{"service", "action", "body",
"task"}`` per request, in the order the stages send them), ``checks`` (the preflight report: its
``findings`` and, under ``not_applicable``, each check group skipped with why; what staging would
copy, whether the image exists; each ``{"skipped": reason}`` when not checked) and
``cost`` (every job the run may start, its tries and GPU-hours at most, from ``plan.cost``) with
their sum, ``gpu_hour_ceiling``. Only reads reach a platform: listings, Describe and
Get calls, the registry's manifest HEAD. The document is for programs (plan.json, ``--format
json``); ``plan.render_text`` and ``plan.render_html`` render it for the person deciding the spend.
"""

from __future__ import annotations

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
    """The image the jobs run in and, for a build, whether its tag is already in the registry.

    A registry that refuses the credentials or cannot be reached is this check's error, shown in the
    plan beside the others: the dry run still writes its plan."""
    image = plan.image
    reference = planned_image(image)
    if image is None or not image.mode or image.pinned:
        return {"image": reference, "build": False}
    if image.force_rebuild:
        return {"image": reference, "build": True, "exists": None, "why": "force_rebuild is set"}
    from aliyun_training.image.container_registry import (
        RegistryAuthError,
        RegistryUnavailableError,
        image_digest,
    )

    try:
        digest = image_digest(reference or "", image.registry_conn_id)
    except (RegistryAuthError, RegistryUnavailableError) as exc:
        return {"image": reference, "error": str(exc)}
    return {"image": reference, "exists": bool(digest), "digest": digest, "build": not digest}
