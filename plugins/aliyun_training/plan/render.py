"""A dry run's document read for a person deciding the spend: what the text and the HTML page show.

The document (``plan.dry_run``) is made for programs: every request's body whole, the image
check's probe as a base64 blob inside its command, a cost table as numbers. Here it becomes what
both renderings lay out alike: a summary (backend and where, dataset, job size, image, the cost
ceiling), the cost table's rows, the checks in words, and each stage with what it creates, where,
how big, what it costs and its requests. A body is shown key by key with long values wrapped at
whitespace (a path, URI or digest is never split: what a reader copies stays whole), and each
``echo <base64> | base64 -d`` script is decoded and shown, numbered, under the body that runs it.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aliyun_training.backend_catalog import backend_record
from aliyun_training.backends.dlc.request import DlcJobSettings
from aliyun_training.findings import PreflightReport
from aliyun_training.monitor import LISTING_JOBS
from aliyun_training.plan.models import RunPlan, StagingPlan
from aliyun_training.plan.requests import planned_image
from aliyun_training.task_ids import (
    BUILD_IMAGE,
    CHECK_RDMA,
    EVALUATE,
    PREPARE_DATASET,
    PROMOTE,
    PUBLISH_ARTIFACTS,
    STAGE_DATASET,
    TRAIN,
    VERIFY_IMAGE,
)

if TYPE_CHECKING:
    from aliyun_training.promotion import PromotionRule

#: The widest line a rendering writes, but for a single token longer than that (see ``wrap``).
WIDTH = 100
#: What each task that sends requests is for, in a reader's words.
PURPOSES = {
    STAGE_DATASET: "copy the dataset version onto the training file system, verified, and register it",
    BUILD_IMAGE: "build the training image, unless the registry already has its tag",
    VERIFY_IMAGE: "check the image on one GPU node: Python, torch, CUDA, NCCL and RDMA libraries",
    CHECK_RDMA: "measure the RDMA bandwidth between two nodes before the multi-node job",
    PREPARE_DATASET: "convert the raw version into the training version's shards",
    TRAIN: "the training job",
    EVALUATE: "score the new model and the champion on the same data",
    PUBLISH_ARTIFACTS: "register the new model as a candidate in the model registry",
    PROMOTE: "move the registry's champion pointer to the new model",
}
#: Where a request acts, as its body says: the label and the path of each field that names a place.
PLACES = (
    ("namespace", ("metadata", "namespace")),
    ("workspace", ("WorkspaceId",)),
    ("file system", ("FileSystemId",)),
    ("data flow", ("DataFlowId",)),
    ("registry instance", ("InstanceId",)),
    ("repository", ("RepoId",)),
    ("build rule", ("BuildRuleId",)),
    ("from", ("source_uri",)),
    ("from", ("Directory",)),
    ("to", ("target",)),
    ("to", ("DstDirectory",)),
    ("uri", ("Uri",)),
    ("in", ("working_dir",)),
)
#: The name a request's body gives what it creates, the first found.
NAMES = (("metadata", "name"), ("DisplayName",), ("Name",), ("name",))
#: The backend settings that say where its jobs run.
SETTINGS = (("region", "region"), ("workspace_id", "workspace"), ("namespace", "namespace"))
#: A script passed inline as base64, as ``image.jobs.check_command`` writes it (a YAML dump may
#: fold the line before the pipe).
INLINE_SCRIPT = re.compile(r"(echo\s+)([A-Za-z0-9+/]+={0,2})(\s+\|\s*base64\s+(?:-d|--decode)\b)")
NO_IMAGE = "none: the job runs in the Airflow worker's own Python"
COST_HEADER = ("job", "nodes x GPUs", "timeout", "tries", "GPU-hours a try", "GPU-hours")


@dataclass(frozen=True)
class Script:
    """A script a command carries in base64, decoded; ``repeated`` when an earlier body showed it."""

    number: int
    text: str
    repeated: bool


@dataclass(frozen=True)
class RequestView:
    """One request: what it creates and where, its note, the body as sent and as shown (its
    scripts replaced by their numbers)."""

    heading: str
    where: str
    note: str
    body: Any
    shown: Any
    scripts: list[Script]


@dataclass(frozen=True)
class StageView:
    """One task's requests, with what the task is for and its facts (data, size, cost)."""

    task: str
    purpose: str
    facts: list[tuple[str, str]]
    requests: list[RequestView]


@dataclass(frozen=True)
class DryRunView:
    """The document as a person reads it, top to bottom."""

    heading: str
    summary: list[tuple[str, str]]
    ceiling: str
    cost_rows: list[tuple[str, ...]]
    #: Each check in words: the preflight's verdicts, what staging would copy, the image's state.
    checks: list[tuple[str, str]]
    #: The preflight's findings; None when it did not run.
    preflight: PreflightReport | None
    stages: list[StageView]


def read_document(document: dict[str, Any]) -> DryRunView:
    """The view of a dry run's document, as ``dry_run_document`` returns it."""
    plan = RunPlan.model_validate(document["plan"])
    cost = document["cost"]
    ceiling = f"at most {cost['gpu_hours']} GPU-hours"
    if "money" in cost:
        ceiling += f", {cost['money']} {cost['currency']} at {cost['price_per_gpu_hour']} per GPU-hour"
    checks = document["checks"]
    report = None if "skipped" in checks["preflight"] else PreflightReport.model_validate(checks["preflight"])
    return DryRunView(
        heading=f"Dry run on {plan.backend.value}: {plan.dataset.name} version {plan.dataset.version}",
        summary=_summary(plan, document["requests"], ceiling),
        ceiling=ceiling,
        cost_rows=_cost_rows(cost),
        checks=[
            ("preflight", _preflight_words(report) if report else checks["preflight"]["skipped"]),
            ("staging", _staging_words(checks["staging"])),
            ("image", _image_words(checks["image"])),
        ],
        preflight=report,
        stages=_stages(plan, document["requests"], cost["jobs"], checks["staging"]),
    )


def _summary(plan: RunPlan, requests: list[dict[str, Any]], ceiling: str) -> list[tuple[str, str]]:
    spec = plan.job.spec
    gpu_type = DlcJobSettings.from_backend_config(plan.job.backend_config).gpu_type
    training = (
        f"{_size(spec.nodes, spec.gpus_per_node)}{f' ({gpu_type})' if gpu_type else ''}, "
        f"up to {spec.timeout_minutes} min a try, {plan.job_tries.get(TRAIN, 1)} tries"
    )
    if plan.job.max_gpu_hours is not None:
        training += f", stopped at {plan.job.max_gpu_hours} GPU-hours (max_gpu_hours)"
    services = itertools.groupby(sorted(r["service"] for r in requests))
    return [
        ("backend", f"{plan.backend.value}: {_backend_place(plan)}"),
        ("dataset", _dataset_words(plan)),
        ("training", training),
        ("image", _image_plan_words(plan)),
        ("cost ceiling", f"{ceiling} (every try of every job below)"),
        ("requests", f"{len(requests)}: " + ", ".join(f"{len(list(g))} to {s}" for s, g in services)),
        ("outputs", plan.job.output_uri or plan.job.output_root or "the job's own output directory"),
        ("evaluation", _evaluation_words(plan)),
        (
            "registry",
            plan.artifacts.registry.where if plan.artifacts.registry else "none: nothing is published",
        ),
        ("promotion", _promotion_words(plan.artifacts.promotion)),
    ]


def _evaluation_words(plan: RunPlan) -> str:
    """What the gate's numbers are measured by."""
    evaluation = plan.evaluation
    if evaluation is None:
        return (
            "none: the gate compares the training's final metrics, each run's on its own data "
            "(weaker than scoring both models on the same data)"
        )
    spec = evaluation.job.spec
    data = (
        "the version the run trains on" if evaluation.own_version else f"version {evaluation.dataset_version}"
    )
    gpus = f", {spec.gpus_per_node} GPU" if spec.gpus_per_node else ""
    size = f"{spec.cpu} CPU, {spec.memory_gib} GiB{gpus}"
    return f"one job ({size}) scores the new model and the champion on {data}"


def _promotion_words(rule: PromotionRule | None) -> str:
    """The gate publishing will apply, in words: what decides, by how much, what must hold."""
    if rule is None:
        return "none: the model is published as a candidate and never becomes the champion"
    better = "higher" if rule.direction == "max" else "lower"
    margin = f"{rule.min_improvement:.0%} of it" if rule.relative else f"{rule.min_improvement:g}"
    guards = "; ".join(
        name
        + "".join(f" {op} {bound:g}" for op, bound in ((">=", b.min), ("<=", b.max)) if bound is not None)
        for name, b in rule.guards.items()
    )
    first = "promoted" if rule.without_champion == "promote" else "held"
    return (
        f"becomes the champion if {rule.metric} is {better} than the champion's by at least {margin}"
        + (f", with {guards}" if guards else "")
        + f"; with no champion yet, the first model is {first}"
        + ("" if rule.backfills_promote else "; a backfill never promotes")
        + ("" if rule.older_versions_promote else "; nor does a run on an older version than the champion's")
        + (
            f"; while {rule.metric} cannot improve by that (the champion at its bound), a model no worse "
            f"on it is compared on {rule.at_bound.metric}"
            if rule.at_bound is not None
            else ""
        )
    )


def _backend_place(plan: RunPlan) -> str:
    """Where a cloud backend's jobs run (region, workspace or namespace, quota) and the connections
    it is reached through; a local run's machine."""
    if not backend_record(plan.backend).cloud:
        return "on the Airflow worker's machine"
    config = plan.job.backend_config
    where = [f"{label} {config[key]}" for key, label in SETTINGS if config.get(key)]
    quota_id = DlcJobSettings.from_backend_config(config).quota_id
    where += [f"quota {quota_id}"] if quota_id else []
    connections = sorted({str(v) for k, v in config.items() if k.endswith("_conn_id") and v})
    where += [f"through connection {', '.join(connections)}"] if connections else []
    return ", ".join(where)


def _dataset_words(plan: RunPlan) -> str:
    dataset = plan.dataset
    words = f"{dataset.name} {dataset.version}"
    if plan.staging is not None:
        staging = plan.staging
        words += f", staged ({staging.mode}) from {staging.source_uri} to {_staged_path(staging)}"
    elif dataset.fixed is not None:
        fixed = dataset.fixed
        source = fixed.dataset_id or fixed.uri or "the environment's dataset"
        words += f", mounted from {source} at {fixed.mount_path or '<not mounted>'}"
    if dataset.prepared_from:
        words += f", prepared from {dataset.prepared_from}"
    return words


def _image_plan_words(plan: RunPlan) -> str:
    image = plan.image
    reference = planned_image(image)
    if image is None or reference is None:
        return NO_IMAGE
    if image.pinned:
        return f"{reference} (pinned)"
    if image.mode:
        when = "force_rebuild is set" if image.force_rebuild else "unless the registry has the tag"
        return f"{reference} (built by {image.mode} from {image.context_dir}, {when})"
    return f"{reference} (the environment's image, as it is)"


def _cost_rows(cost: dict[str, Any]) -> list[tuple[str, ...]]:
    """The cost table: the header, a row per job, the total."""
    rows = [
        (
            job["task"],
            f"{job['nodes']} x {job['gpus_per_node']}",
            f"{job['timeout_minutes']} min",
            str(job["tries"]),
            str(job["gpu_hours_per_try"]),
            f"{job['gpu_hours']}{' (max_gpu_hours)' if job.get('capped_by') else ''}",
        )
        for job in cost["jobs"]
    ]
    return [COST_HEADER, *rows, ("total", "", "", "", "", str(cost["gpu_hours"]))]


def _preflight_words(report: PreflightReport) -> str:
    counts = ", ".join(
        f"{sum(f.verdict == verdict for f in report.findings)} {verdict}"
        for verdict in ("PASS", "WARN", "FAIL")
    )
    skipped = f", {len(report.not_applicable)} not applicable" if report.not_applicable else ""
    stop = ": a FAIL stops the run before it starts a job" if report.failed else ""
    return f"{counts}{skipped}{stop}"


def _staging_words(check: dict[str, Any]) -> str:
    if "skipped" in check:
        return str(check["skipped"])
    if "error" in check:
        return f"could not be checked: {check['error']}"
    todo = (
        f"{check['files_to_copy']} files ({_bytes(check['bytes_to_copy'])}) to copy"
        if check["files_to_copy"]
        else "all already staged, nothing to copy"
    )
    found = f"{check['files']} files ({_bytes(check['bytes'])}) at {check['source_uri']}"
    return f"{found}; {todo} to {check['target']}"


def _image_words(check: dict[str, Any]) -> str:
    if "skipped" in check:
        return str(check["skipped"])
    image = check.get("image")
    if image is None:
        return NO_IMAGE
    if "error" in check:
        return f"{image}: could not be checked: {check['error']}"
    if "why" in check:
        return f"{image}: will be built ({check['why']})"
    if "exists" not in check:
        return f"{image}: used as it is, no build"
    if check["exists"]:
        return f"{image}: in the registry ({check['digest']}), no build"
    return f"{image}: not in the registry, the run builds it"


def _stages(
    plan: RunPlan, requests: list[dict[str, Any]], jobs: list[dict[str, Any]], staging: dict[str, Any]
) -> list[StageView]:
    """The requests by the task that sends them, in order; scripts numbered across the document."""
    costs = {job["task"]: job for job in jobs}
    scripts: dict[str, int] = {}
    return [
        StageView(
            task=task,
            purpose=PURPOSES.get(task, ""),
            facts=_facts(plan, task, costs.get(task), staging),
            requests=[_request_view(plan, request, scripts) for request in group],
        )
        for task, group in itertools.groupby(requests, key=lambda request: request["task"])
    ]


def _facts(
    plan: RunPlan, task: str, job: dict[str, Any] | None, staging: dict[str, Any]
) -> list[tuple[str, str]]:
    """What the document knows of a task's data, size and cost."""
    facts: list[tuple[str, str]] = []
    if task == STAGE_DATASET and plan.staging is not None:
        facts.append(("data", f"{plan.staging.source_uri} -> {_staged_path(plan.staging)}"))
        if "files" in staging:
            facts.append(("size", _staging_words(staging)))
    if task == PREPARE_DATASET and plan.prepare is not None:
        facts.append(("data", f"{plan.prepare.raw_uri} -> {plan.prepare.output_uri}"))
    if job is not None:
        size = _size(job["nodes"], job["gpus_per_node"])
        facts.append(("size", f"{size}, up to {job['timeout_minutes']} min a try"))
        capped = " (capped by max_gpu_hours)" if job.get("capped_by") else ""
        tries = f"{job['tries']} {'try' if job['tries'] == 1 else 'tries'}"
        facts.append(
            (
                "cost",
                f"{tries}: at most {job['gpu_hours']} GPU-hours{capped}, {job['gpu_hours_per_try']} a try",
            )
        )
    if job is not None and job.get("monitoring"):
        facts.append(("monitoring", _monitoring_words(job["monitoring"])))
    return facts


def _monitoring_words(rate: dict[str, float]) -> str:
    alone, fleet = rate["requests_per_minute_alone"], rate["requests_per_minute_in_fleet"]
    if alone == 0:
        return "no API requests: the job's files are read"
    return (
        f"{alone:g} API requests a minute while it runs, {fleet:g} when the triggerer lists it with "
        f"{LISTING_JOBS} or more jobs of its workspace (DLC) or namespace (ACK); each change of state "
        "adds a status read, and log reads every poll for steady_log_seconds"
    )


def _request_view(plan: RunPlan, request: dict[str, Any], scripts: dict[str, int]) -> RequestView:
    body = request["body"]
    found: list[Script] = []
    return RequestView(
        heading=_heading(request),
        where=_where(plan, request),
        note=request.get("note", ""),
        body=body,
        shown=_decoded(body, scripts, found),
        scripts=found,
    )


def _heading(request: dict[str, Any]) -> str:
    """``service action: kind name``, as the body names what it creates."""
    service, action, body = request["service"], request["action"], request["body"]
    if not isinstance(body, dict):
        return f"{service} {action}"
    kind = body.get("kind") or body.get("JobType") or ""
    name = next((value for value in (_dig(body, path) for path in NAMES) if value), "")
    what = " ".join(str(word) for word in (kind if kind not in action else "", name) if word)
    return f"{service} {action}" + (f": {what}" if what else "")


def _where(plan: RunPlan, request: dict[str, Any]) -> str:
    """The places the body names, with the backend's region for the backend's own requests."""
    body = request["body"]
    places = [f"{label} {value}" for label, path in PLACES if (value := _dig(body, path))]
    region = plan.job.backend_config.get("region")
    if request["service"] == plan.backend.value and region:
        places.insert(0, f"region {region}")
    return ", ".join(places)


def _dig(body: Any, path: tuple[str, ...]) -> Any:
    value: Any = body
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _decoded(value: Any, scripts: dict[str, int], found: list[Script]) -> Any:
    """``value`` with each inline base64 script replaced by its number; the scripts go to ``found``."""
    if isinstance(value, dict):
        return {key: _decoded(item, scripts, found) for key, item in value.items()}
    if isinstance(value, list):
        return [_decoded(item, scripts, found) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        try:
            text = base64.b64decode(match.group(2), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return match.group(0)  # not a script: shown as it is
        repeated = match.group(2) in scripts
        number = scripts.setdefault(match.group(2), len(scripts) + 1)
        if not any(script.number == number for script in found):
            found.append(Script(number, text, repeated))
        return f"{match.group(1)}<base64 of script {number}>{match.group(3)}"

    return INLINE_SCRIPT.sub(replace, value)


def _staged_path(staging: StagingPlan) -> str:
    return f"{staging.target_root.rstrip('/')}/{staging.version}"


def _size(nodes: int, gpus: int) -> str:
    return f"{nodes} node{'s' * (nodes != 1)} x {gpus} GPU{'s' * (gpus != 1)}"


def _bytes(count: int) -> str:
    """A byte count a person reads at a glance, with the exact count."""
    size, unit = float(count), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{count} bytes" if unit == "bytes" else f"{size:.1f} {unit}, {count} bytes"


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``text`` after ``first``, broken at whitespace into lines of ``width``; continued lines start
    with ``rest`` (default: two spaces deeper than ``first``). A single token longer than a line (a
    path, a URI, a digest) is kept whole on a line of its own: split, it would no longer be what the
    reader copies."""
    if len(first) + len(text) <= width:
        return [first + text]
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=" " * len(first) + "  " if rest is None else rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def layout(value: Any, width: int, indent: str = "") -> list[str]:
    """A body key by key, nested blocks indented under their key, list items after ``- `` (as YAML
    writes them); a multi-line string after ``|``, line by line. Strings are shown bare: the JSON
    rendering has each value's exact type."""
    if isinstance(value, dict) and value:
        return [line for key, item in value.items() for line in _entry(f"{key}:", item, width, indent)]
    if isinstance(value, list) and value:
        lines: list[str] = []
        for item in value:
            if isinstance(item, dict) and item:
                block = layout(item, width, indent + "  ")
                lines += [f"{indent}- {block[0].removeprefix(indent + '  ')}", *block[1:]]
            else:
                lines += _entry("-", item, width, indent)
        return lines
    return wrap(_scalar(value), width, indent)


def _entry(label: str, value: Any, width: int, indent: str) -> list[str]:
    if isinstance(value, dict | list) and value:
        return [indent + label, *layout(value, width, indent + "  ")]
    if isinstance(value, str) and "\n" in value:
        lines = value.splitlines()
        return [
            f"{indent}{label} |",
            *(row for line in lines for row in _indented(line, width, indent + "  ")),
        ]
    # The label leads the first line, so a value too long for any line still follows its key.
    return wrap(_scalar(value), width, f"{indent}{label} ", indent + "  ")


def _indented(line: str, width: int, indent: str, hanging: str = "  ") -> list[str]:
    """A line of a multi-line string or script wrapped at ``indent`` plus its own indentation."""
    own = indent + line[: len(line) - len(line.lstrip())]
    return wrap(line.lstrip(), width, own, own + hanging) if line.strip() else [""]


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value or '""'
    if value is None or isinstance(value, bool | int | float | dict | list):
        return json.dumps(value)
    return str(value)


def numbered(text: str, width: int) -> list[str]:
    """A script's lines numbered, so a line wrapped to fit (continued with no number) reads as one."""
    lines = text.splitlines()
    gutter = len(str(len(lines)))
    return [
        (f"{number:>{gutter}} | " if i == 0 else f"{'':>{gutter}} | ") + row
        for number, line in enumerate(lines, 1)
        for i, row in enumerate(_indented(line, width - gutter - 3, "", "    "))
    ]
