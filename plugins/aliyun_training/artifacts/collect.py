"""Publish a finished job's checkpoints, metrics and run report as one versioned, self-describing set.

The set lands at ``<artifact_root>/<model>/<dataset version>/<job name>/`` through a partial
directory and a rename, so a consumer triggered by the model Asset never sees half a set. Only a set
this module published (its directory holds manifest.json) is ever replaced; any other directory at
the target is refused before anything is copied (``publish.check_publishable``). The manifest says
what produced it: dataset version, job, runtime, metrics (the per-epoch losses as lists) and timings.

One writer per target: the collected outputs are copied and the set is assembled in the partial
directory only while the target's lock file is held (``publish.publication_lock``). A second publisher of the
same set at the same time does not wait for it: it fails with an ArtifactError naming the holder,
and the first one's set is published whole. Two runs writing one set at once means two runs
believe they own it; waiting and then replacing would silently swap the set under the Asset event
the first one emitted. A later publisher (a retried task) still replaces a set published here.

An ``oss://`` artifact root gets the same set built in a scratch directory and uploaded under a
lock object, refusing foreign objects at the target as the local path does (``oss_publication``).

A cloud job's outputs outlive its nodes only in OSS (``output_uri`` mounted at its output root),
so a job whose ``output_uri`` is ``oss://`` has just the collected names downloaded first, by the
staging engine (parallel, CRC64-verified), into a scratch directory the set is built from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.artifacts.manifest import (
    FIELD,
    MANIFEST_NAME,
    METRICS_NAME,
    REPORT_NAME,
    ArtifactError,
    require_oss,
)
from aliyun_training.artifacts.report import render_report
from aliyun_training.model_registry.base import PublishedFiles
from aliyun_training.promotion import Outcome, manifest_promotion
from aliyun_training.stage_records import (
    ArtifactSet,
    BandwidthCheck,
    BuiltImage,
    FixedDataset,
    JobResult,
    StagedDataset,
)
from aliyun_training.staging.publish import (
    PublicationBusy,
    check_publishable,
    partial_of,
    publication_lock,
    publish_directory,
)
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from aliyun_training.model_registry.base import RegisteredVersion
    from aliyun_training.promotion import Decision
    from aliyun_training.staging.oss import OssClientConfig, OssObjectSource
    from aliyun_training.staging.sources import ChunkSink, SourceObject

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeptOutputs:
    """What of a job's output directory a set keeps (``metrics.json`` always) and which series it reports.

    A pipeline's declaration names them (``artifacts.collect``, ``artifacts.report_metrics``).
    """

    collect: tuple[str, ...] = ("checkpoints", "model.pt")
    report_metrics: tuple[str, ...] = ("train_loss", "test_loss", "test_accuracy")

    def keeps(self, key: str) -> bool:
        """Whether the object ``key`` (relative to the output directory) belongs to the set."""
        return key == METRICS_NAME or any(key == name or key.startswith(f"{name}/") for name in self.collect)


#: What a set keeps when its pipeline declares nothing else.
DEFAULT_KEPT = KeptOutputs()


@dataclass(frozen=True)
class RunInfo:
    """The Airflow run that publishes a set, as its manifest's ``run`` block records it.

    A model found months later must still say what it was asked to do and lead back to the run's
    logs: ``params`` are the trigger form's values as the run used them (only the form's fields:
    the form holds no secrets, and nothing of the connections or environment files is copied);
    ``url`` opens the run in the Airflow UI; ``started`` (when the run began) is where the
    manifest's stage timings start.
    """

    dag_id: str
    run_id: str
    logical_date: str | None
    run_type: str
    params: dict[str, Any]
    url: str
    started: str | None = None


def summarize_metrics(
    metrics: dict[str, Any], series: tuple[str, ...] = KeptOutputs.report_metrics
) -> dict[str, Any]:
    """Per-epoch series as lists plus their final values, from the training script's metrics.json."""
    epochs = metrics.get("epochs") or []
    if not epochs:
        raise ArtifactError("metrics.json lists no epochs; the job finished without training")
    missing = sorted({key for key in series for epoch in epochs if key not in epoch})
    if missing:
        raise ArtifactError(
            f"metrics.json has no {missing} in some epochs (fix: write them every epoch, or change the "
            "declaration's artifacts.report_metrics)"
        )
    values = {key: [e[key] for e in epochs] for key in series}
    return {
        "epochs": len(epochs),
        "series": list(series),
        **values,
        **{f"final_{key}": points[-1] for key, points in values.items()},
        "epoch_seconds": [e.get("seconds") for e in epochs],
    }


def publish_artifacts(
    *,
    model: str,
    artifact_root: str,
    job: JobResult,
    dataset: StagedDataset | FixedDataset,
    runtime: BuiltImage,
    oss: OssClientConfig | None = None,
    bandwidth: BandwidthCheck | None = None,
    kept: KeptOutputs = DEFAULT_KEPT,
    run: RunInfo | None = None,
    gate: Callable[[dict[str, Any]], Decision] | None = None,
    register: Callable[[PublishedFiles, ArtifactSet], RegisteredVersion | None] | None = None,
) -> ArtifactSet:
    """Collect the job's outputs, write manifest.json and report.html, publish atomically.

    ``gate``, given the set's metrics, decides whether the model is promoted; its decision is the
    returned set's, and the manifest and the report record it with what is known of the outcome at
    publication (``promotion.Outcome.at_publication``: a pass waits for approval or for the
    champion to move, which is the caller's once the set is published; ``artifacts.outcome``
    records the final outcome in the set then).

    ``dataset`` is the staged version, or the fixed dataset the job mounted when nothing was staged.
    ``oss`` is required when ``artifact_root`` or the job's ``output_uri`` is an ``oss://`` URI.
    ``run`` is the Airflow run publishing the set; None (a set published outside a DAG run) records
    no run, and the stage before training then has no start.

    ``register``, given the published set's files on this machine (the local set, or the copy a
    cloud set was uploaded from, while it still exists) and the set, registers the model; its
    version is the returned set's ``registered``.
    """
    started = datetime.now(UTC)
    with _job_outputs(job, oss, kept) as output:
        written = read_metrics(job, output)
        metrics = summarize_metrics(written, kept.report_metrics)
        decision = gate(metrics) if gate else None
        manifest: dict[str, Any] = {
            "model": model,
            "version": f"{dataset.version}/{job.display_name}",
            "created": started.isoformat(timespec="seconds"),
            "dataset": dataset.model_dump(mode="json"),
            "job": job.model_dump(mode="json"),
            "runtime": runtime.model_dump(mode="json"),
            "rdma_bandwidth": bandwidth.model_dump(mode="json") if bandwidth else None,
            "run": asdict(run) if run else None,
            "metrics": metrics,
            "attempts": attempt_summary(job, written),
            "timings": {
                "staging_seconds": dataset.seconds if isinstance(dataset, StagedDataset) else None,
                "training_wall_seconds": job.wall_seconds,
                "node_hours": job.node_hours,
                "gpu_hours": job.gpu_hours,
            },
            "stages": stage_timings(run, dataset, job),
            "promotion": (
                manifest_promotion(decision, Outcome.at_publication(decision, run.run_id if run else None))
                if decision
                else None
            ),
        }
        promotion = decision.model_dump(mode="json") if decision else None
        if not artifact_root.startswith("oss://"):
            published = _publish_locally(Path(artifact_root), output, manifest, started, kept)
            return _registered(
                published.model_copy(update={"promotion": promotion}), Path(published.uri), register
            )
        with tempfile.TemporaryDirectory(prefix="artifacts-") as scratch:
            built = Path(scratch) / "set"
            manifest = _assemble(built, output, manifest, started, kept)
            published = _upload(built, manifest, artifact_root, require_oss(oss, FIELD))
            return _registered(published.model_copy(update={"promotion": promotion}), built, register)


def _registered(
    published: ArtifactSet,
    files: Path,
    register: Callable[[PublishedFiles, ArtifactSet], RegisteredVersion | None] | None,
) -> ArtifactSet:
    """``published`` with the version ``register`` made of it from its ``files`` on this machine."""
    if register is None:
        return published
    manifest = json.loads((files / MANIFEST_NAME).read_text())
    documents = tuple(files / name for name in (MANIFEST_NAME, REPORT_NAME))
    registered = register(PublishedFiles(files, manifest, documents), published)
    return published.model_copy(
        update={"registered": registered.model_dump(mode="json") if registered else None}
    )


def _publish_locally(
    root: Path, output: Path, manifest: dict[str, Any], started: datetime, kept: KeptOutputs
) -> ArtifactSet:
    """Assemble the set in the partial directory and publish it by rename, all under the target's lock."""
    target = root / manifest["model"] / manifest["version"]
    check_publishable(target, MANIFEST_NAME, FIELD)  # before the lock file is created beside it
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with publication_lock(target, FIELD, wait=False):
            partial = partial_of(target)
            shutil.rmtree(partial, ignore_errors=True)  # left by a killed try; not a link (checked above)
            manifest = _assemble(partial, output, manifest, started, kept)
            publish_directory(target, MANIFEST_NAME, FIELD)
    except PublicationBusy as busy:
        raise ArtifactError(
            f"{FIELD}: another publisher is writing {target} right now ({busy.lock} is held by "
            f"{busy.holder}); nothing was written by this run and that publisher's set is published whole "
            "(fix: two runs publish the same set — same model, dataset version and job name; let the "
            "other one finish, then run this one again if its set should replace that one)"
        ) from None
    return _record(str(target), str(target / MANIFEST_NAME), str(target / REPORT_NAME), manifest)


def _assemble(
    directory: Path, output: Path, manifest: dict[str, Any], started: datetime, kept: KeptOutputs
) -> dict[str, Any]:
    """Copy the collected outputs into ``directory`` beside the completed manifest and report."""
    directory.mkdir(parents=True)
    for name in (METRICS_NAME, *kept.collect):
        source = output / name
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, directory / name)
        elif source.is_file():
            shutil.copy2(source, directory / name)
    publishing = _stage(
        "Publishing artifacts",
        started.isoformat(),
        datetime.now(UTC).isoformat(),
        "collecting the outputs and writing this set (an upload to OSS not included)",
    )
    manifest = {
        **manifest,
        "timings": {**manifest["timings"], "collect_seconds": publishing["seconds"]},
        "stages": [*manifest["stages"], publishing],
        "files": _describe_files(directory),
        "report": REPORT_NAME,
    }
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    (directory / REPORT_NAME).write_text(render_report(manifest))
    return manifest


def _record(uri: str, manifest_uri: str, report_uri: str, manifest: dict[str, Any]) -> ArtifactSet:
    """The published set as the task returns it, with the summary metrics (the gate's decision is
    the caller's to add)."""
    metrics = manifest["metrics"]
    return ArtifactSet(
        uri=uri,
        manifest_uri=manifest_uri,
        report_uri=report_uri,
        metrics={
            "epochs": metrics["epochs"],
            metrics["series"][0]: metrics[metrics["series"][0]],
            **{f"final_{key}": metrics[f"final_{key}"] for key in metrics["series"]},
        },
    )


def _upload(built: Path, manifest: dict[str, Any], artifact_root: str, oss: OssClientConfig) -> ArtifactSet:
    """Publish the set built in ``built`` under ``<artifact_root><model>/<version>/``."""
    from aliyun_training.artifacts.oss_publication import publish_to_oss
    from aliyun_training.oss_location import parse_oss_uri

    root = parse_oss_uri(artifact_root, field=FIELD)
    target = f"{root.uri}{manifest['model']}/{manifest['version']}/"
    files, size = publish_to_oss(built, target, oss)
    log.info("Uploaded %d artifact files (%.1f MB) to %s", files, size / 1e6, target)
    return _record(target, target + MANIFEST_NAME, target + REPORT_NAME, manifest)


@contextlib.contextmanager
def _job_outputs(job: JobResult, oss: OssClientConfig | None, kept: KeptOutputs) -> Iterator[Path]:
    """The job's output directory on this machine: where it is, or downloaded from OSS for the set."""
    if job.output_uri and job.output_uri.startswith("oss://"):
        with tempfile.TemporaryDirectory(prefix="job-outputs-") as scratch:
            config = require_oss(oss, "the job's output_uri")
            yield _download_outputs(job, job.output_uri, config, Path(scratch), kept)
        return
    if not job.output_uri or not Path(job.output_uri).is_dir():
        raise ArtifactError(
            f"job {job.job_id} has no output directory ({job.output_uri!r}); nothing to collect"
        )
    yield Path(job.output_uri)


def _download_outputs(
    job: JobResult, uri: str, oss: OssClientConfig, scratch: Path, kept: KeptOutputs
) -> Path:
    """The collected names under ``uri``, copied by the staging engine: parallel and CRC64-verified."""
    from aliyun_training.staging.engine import stage_dataset
    from aliyun_training.staging.oss import OssObjectSource
    from aliyun_training.staging.sources import StagingError

    try:
        source = _CollectedOutputs(OssObjectSource(uri, config=oss), job.job_id, kept)
        return Path(stage_dataset(source, scratch, "outputs").uri)
    except (SpecError, StagingError) as exc:
        raise ArtifactError(f"cannot collect the outputs of job {job.job_id} from {uri}: {exc}") from None


class _CollectedOutputs:
    """A job's OSS output prefix as a staging source that lists only what an artifact set keeps.

    Jobs leave more there (logs, resumable temporary files); copying it all would cost time and
    scratch space for nothing. A prefix without metrics.json has no finished training in it.
    """

    def __init__(self, source: OssObjectSource, job_id: str, kept: KeptOutputs) -> None:
        self._source = source
        self._kept = kept
        self._job_id = job_id
        self.uri = source.uri
        self.checksum = source.checksum
        self.ranged_reads = source.ranged_reads

    def folders(self) -> list[str]:
        return self._source.folders()

    def list(self) -> list[SourceObject]:
        objects = [obj for obj in self._source.list() if self._kept.keeps(obj.key)]
        if not any(obj.key == METRICS_NAME for obj in objects):
            raise ArtifactError(
                f"job {self._job_id} wrote no {METRICS_NAME} under {self.uri}; nothing to collect "
                "(did the job write to $OUTPUT_DIR, and is output_uri the location mounted at output_root?)"
            )
        return objects

    def read(self, obj: SourceObject, start: int, end: int, sink: ChunkSink) -> str | None:
        return self._source.read(obj, start, end, sink)

    def is_transient(self, exc: BaseException) -> bool:
        return self._source.is_transient(exc)


def stage_timings(
    run: RunInfo | None, dataset: StagedDataset | FixedDataset, job: JobResult
) -> list[dict[str, Any]]:
    """When the run's stages before publication started and ended, from what the records carry.

    A task cannot read other task instances' times in Airflow 3 (``ti.get_task_states`` gives
    their states only), and the records that configure, the image tasks and the RDMA check pass on
    carry no times: so the run's start and the training job's first start bound everything before
    training, in which the staging record says how long staging took. Each try of the training job
    is timed by its platform's own start and end (a DLC job's start is when it ran, after it queued).
    """
    tries = [(attempt.started, attempt.finished) for attempt in job.attempts] or [(job.started, job.finished)]
    stages = [
        _stage(
            "Until the training job started",
            run.started if run else None,
            tries[0][0],
            "the tasks before training (configure, preflight, dataset, image, RDMA check) and queueing",
        )
    ]
    if isinstance(dataset, StagedDataset):
        stages.append(
            {
                "stage": "of which dataset staging",
                "started": None,
                "finished": None,
                "seconds": dataset.seconds,
                "covers": f"{dataset.transferred_files} of {dataset.files} files copied ({dataset.mode})",
            }
        )
    stages += [
        _stage(
            "Training job" if len(tries) == 1 else f"Training job, try {number}",
            started,
            finished,
            "the job on its platform, from when it ran to its end",
        )
        for number, (started, finished) in enumerate(tries, start=1)
    ]
    return stages


def _stage(name: str, started: str | None, finished: str | None, covers: str) -> dict[str, Any]:
    """One stage's row; its duration when both ends are known and in order (a cleared run restarts
    its clock after its training job ran: that span is no duration)."""
    seconds = None
    if started and finished:
        span = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
        seconds = round(span, 3) if span >= 0 else None
    return {"stage": name, "started": started, "finished": finished, "seconds": seconds, "covers": covers}


def attempt_summary(job: JobResult, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Every try of the round: its job, failure class, evidence, decision and GPU-hours, with the
    epochs it trained and the epoch it resumed after, from what the training script recorded
    (``attempt`` on each epoch of metrics.json, ``resumes``). A try whose epochs were lost with its
    machines (after the last checkpoint) counts only the epochs that were kept."""
    epochs = metrics.get("epochs") or []
    resumes = {item.get("attempt"): item for item in metrics.get("resumes") or []}
    summary = []
    for attempt in job.attempts:
        resumed = resumes.get(attempt.try_number)
        summary.append(
            {
                **attempt.model_dump(mode="json"),
                "epochs_run": sum(1 for epoch in epochs if epoch.get("attempt") == attempt.try_number),
                "resumed_after_epoch": resumed.get("from_epoch") if resumed else None,
            }
        )
    return summary


def read_metrics(job: JobResult, output: Path) -> dict[str, Any]:
    """The job's metrics.json in ``output``, checked as the publisher reads it (ArtifactError naming
    the file, the key and the shape it must have, rather than a crash or a NaN published).

    It is data a job wrote (docs/security.md, boundary 6): every number must be finite
    (``staging.versions.parse_job_json``), and each field the publisher reads must have the shape it
    reads: ``epochs`` a list of objects whose ``attempt`` is a try number, ``resumes`` a list of
    objects with an ``attempt`` and the ``from_epoch`` it resumed after. A metric's own value may be
    anything else (text, null): the report shows it as text and the gate finds no number in it.
    """
    from aliyun_training.staging.versions import parse_job_json

    # Named by the job's output_uri: a downloaded copy's scratch path would mean nothing.
    where = f"{METRICS_NAME} of job {job.job_id} in {job.output_uri}"
    try:
        document = parse_job_json((output / METRICS_NAME).read_bytes(), where)
    except OSError as exc:
        raise ArtifactError(f"cannot read {where}: {exc}") from None
    except SpecError as exc:
        raise ArtifactError(str(exc)) from None
    _check_shape(document, where)
    return document


#: What a field of metrics.json that the publisher reads must be: its JSON type, and the words that
#: say so in an error.
_OBJECT = (dict, "an object")
_LIST = (list, "a list")
_INTEGER = (int, "an integer")


def _check_shape(document: Any, where: str) -> None:
    """Raise ArtifactError for the first field of metrics.json the publisher cannot read."""
    try_number = "the try number the job ran as (TRAINING_ATTEMPT)"
    # (key, value, shape, what it holds, whether it may be absent or null)
    fields: list[tuple[str, Any, tuple[type, str], str, bool]] = [
        ("the document", document, _OBJECT, 'such as {"epochs": [{"train_loss": 0.9}]}', False)
    ]
    if isinstance(document, dict):
        epochs, resumes = document.get("epochs"), document.get("resumes")
        fields.append(("epochs", epochs, _LIST, "of one object per finished epoch", True))
        for i, epoch in enumerate(epochs if isinstance(epochs, list) else []):
            fields.append((f"epochs[{i}]", epoch, _OBJECT, "of the epoch's metrics", False))
            if isinstance(epoch, dict):
                fields.append((f"epochs[{i}].attempt", epoch.get("attempt"), _INTEGER, try_number, True))
        fields.append(("resumes", resumes, _LIST, "of one object per resume", True))
        for i, resume in enumerate(resumes if isinstance(resumes, list) else []):
            fields.append(
                (f"resumes[{i}]", resume, _OBJECT, 'such as {"attempt": 2, "from_epoch": 3}', False)
            )
            if isinstance(resume, dict):
                fields += [
                    (f"resumes[{i}].attempt", resume.get("attempt"), _INTEGER, try_number, False),
                    (
                        f"resumes[{i}].from_epoch",
                        resume.get("from_epoch"),
                        _INTEGER,
                        "the epoch resumed after",
                        True,
                    ),
                ]
    for key, value, (kind, shape), holds, optional in fields:
        if value is None and optional:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ArtifactError(
                f"{where}: {key} is {_json_kind(value)}, expected {shape} {holds} (fix: write that, as "
                "include/training/checkpoints.py does)"
            )


def _json_kind(value: Any) -> str:
    """What a JSON value is, in an error's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), (int | float, "a number"))
    return next(words for kind, words in kinds if isinstance(value, kind))


def _describe_files(root: Path) -> list[dict[str, Any]]:
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files.append(
            {"path": path.relative_to(root).as_posix(), "size": path.stat().st_size, "sha256": digest}
        )
    return files
