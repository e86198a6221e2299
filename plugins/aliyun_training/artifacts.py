"""Publish a finished job's checkpoints, metrics and run report as one versioned, self-describing set.

The set lands at ``<artifact_root>/<model>/<dataset version>/<job name>/`` through a partial
directory and a rename, so a consumer triggered by the model Asset never sees half a set. An
``oss://`` artifact root gets the same set uploaded with the staging engine's uploader, the
manifest last: a reader that waits for manifest.json sees a complete set. The manifest says what
produced it: dataset version, job, runtime, metrics (the per-epoch losses as lists) and timings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.publish import publish_directory
from aliyun_training.report import render_report
from aliyun_training.spec import ArtifactSet, BandwidthCheck, BuiltImage, JobResult, StagedDataset

if TYPE_CHECKING:
    from aliyun_training.staging.oss import OssClientConfig

MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.html"
log = logging.getLogger(__name__)
#: What a job writes into its output directory that is worth keeping.
COLLECTED = ("checkpoints", "metrics.json", "model.pt")


class ArtifactError(RuntimeError):
    """The job's outputs are missing or unreadable; nothing was published."""


def summarize_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Per-epoch series as lists plus the final values, from the training script's metrics.json."""
    epochs = metrics.get("epochs") or []
    if not epochs:
        raise ArtifactError("metrics.json lists no epochs; the job finished without training")
    series = {key: [e[key] for e in epochs] for key in ("train_loss", "test_loss", "test_accuracy")}
    return {
        "epochs": len(epochs),
        **series,
        "final_train_loss": series["train_loss"][-1],
        "final_test_accuracy": series["test_accuracy"][-1],
        "epoch_seconds": [e["seconds"] for e in epochs],
    }


def publish_artifacts(
    *,
    model: str,
    artifact_root: str,
    job: JobResult,
    dataset: StagedDataset,
    runtime: BuiltImage,
    oss: OssClientConfig | None = None,
    bandwidth: BandwidthCheck | None = None,
) -> ArtifactSet:
    """Copy the job's outputs, write manifest.json and report.html, publish atomically.

    ``oss`` is required when ``artifact_root`` is an ``oss://`` URI.
    """
    if artifact_root.startswith("oss://"):
        return _publish_to_oss(model, artifact_root, job, dataset, runtime, oss, bandwidth)
    started = time.monotonic()
    if not job.output_uri or not Path(job.output_uri).is_dir():
        raise ArtifactError(
            f"job {job.job_id} has no output directory ({job.output_uri!r}); nothing to collect"
        )
    output = Path(job.output_uri)
    try:
        metrics = summarize_metrics(json.loads((output / "metrics.json").read_text()))
    except (FileNotFoundError, json.JSONDecodeError, KeyError) as exc:
        raise ArtifactError(f"cannot read metrics.json of job {job.job_id} in {output}: {exc}") from None

    target = Path(artifact_root) / model / dataset.version / job.display_name
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in COLLECTED:
        source = output / name
        if source.is_dir():
            shutil.copytree(source, partial / name)
        elif source.is_file():
            shutil.copy2(source, partial / name)

    manifest = {
        "model": model,
        "version": f"{dataset.version}/{job.display_name}",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "dataset": dataset.model_dump(mode="json"),
        "job": job.model_dump(mode="json"),
        "runtime": runtime.model_dump(mode="json"),
        "rdma_bandwidth": bandwidth.model_dump(mode="json") if bandwidth else None,
        "metrics": metrics,
        "timings": {
            "staging_seconds": dataset.seconds,
            "training_wall_seconds": job.wall_seconds,
            "node_hours": job.node_hours,
            "gpu_hours": job.gpu_hours,
            "collect_seconds": round(time.monotonic() - started, 3),
        },
        "files": _describe_files(partial),
        "report": REPORT_NAME,
    }
    (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    (partial / REPORT_NAME).write_text(render_report(manifest))
    publish_directory(partial, target)
    return ArtifactSet(
        uri=str(target),
        manifest_uri=str(target / MANIFEST_NAME),
        report_uri=str(target / REPORT_NAME),
        metrics={k: metrics[k] for k in ("epochs", "train_loss", "final_train_loss", "final_test_accuracy")},
    )


def _publish_to_oss(
    model: str,
    artifact_root: str,
    job: JobResult,
    dataset: StagedDataset,
    runtime: BuiltImage,
    oss: OssClientConfig | None,
    bandwidth: BandwidthCheck | None,
) -> ArtifactSet:
    """Build the set in a scratch directory, then upload it with the manifest last."""
    from aliyun_training.staging.oss import parse_oss_uri, upload_directory

    if oss is None:
        raise ArtifactError("artifact_root is an oss:// URI but no OSS connection settings were given")
    root = parse_oss_uri(artifact_root, field="artifact_root")
    with tempfile.TemporaryDirectory(prefix="artifacts-") as scratch:
        local = publish_artifacts(
            model=model, artifact_root=scratch, job=job, dataset=dataset, runtime=runtime
        )
        relative = Path(local.uri).relative_to(scratch).as_posix()
        target = f"{root.uri}{relative}/"
        files, size = upload_directory(Path(local.uri), target, oss, last=[MANIFEST_NAME])
    log.info("Uploaded %d artifact files (%.1f MB) to %s", files, size / 1e6, target)
    return ArtifactSet(
        uri=target,
        manifest_uri=target + MANIFEST_NAME,
        report_uri=target + REPORT_NAME,
        metrics=local.metrics,
    )


def _describe_files(root: Path) -> list[dict[str, Any]]:
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files.append(
            {"path": path.relative_to(root).as_posix(), "size": path.stat().st_size, "sha256": digest}
        )
    return files
