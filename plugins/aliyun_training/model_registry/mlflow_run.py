"""What MLflow keeps of a candidate: a run in the pipeline's experiment, and the model logged from it.

MLflow users find a model version through the run that made it (MLflow 3's model versions are
created from a run's logged model). Each candidate gets:

- a run in the experiment named for the pipeline (its DAG id), named after the Airflow run, with
  the trigger form's parameters as params, the job's metrics as metrics (each series per epoch,
  its step the epoch; the final values; the evaluation job's scores as ``evaluation_<name>``), the
  dataset version as an input, the manifest and report as artifacts, and tags that link back to
  the Airflow run and its lineage; it starts and ends when the training job did (its first try's
  start, its end), so MLflow's duration is the training's, not the registration's;
- a logged model of that run holding the MLflow model the job saved (``mlflow-model/``: loadable
  with ``mlflow.pyfunc.load_model``), or, when the job saved none, the published files as they are.

A retry finds its first try's run by the run key tag: a finished one is reused whole, an unfinished
one (a try killed half way) is deleted and logged again. The run is marked finished last, after its
model, so a finished run always has one.

MLflow's limits are kept (its ``mlflow.utils.validation``): at most 1,000 metrics and 100 params per
batch, a param value of at most 6,000 characters, a dataset digest of at most 36. A metric name
MLflow's own checks refuse, or a value that is no finite number, is left out rather than failing
the registration: the manifest keeps every number the job wrote.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aliyun_training.model_registry.base import MLFLOW_MODEL_DIR, Candidate, PublishedFiles

if TYPE_CHECKING:
    from mlflow.entities import Metric, Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

#: The tag a retry finds its first try's run and version by: a hex digest of the run's identity
#: (installation, DAG, run), since a run id may hold any character and MLflow's filter grammar
#: quotes only some.
RUN_KEY_TAG = "run_key"
#: The run tag naming the model logged from the run, set before the run is marked finished.
MODEL_ID_TAG = "aliyun_training.model_id"
#: What the logged model holds: ``mlflow-model`` (the MLflow model the job saved) or ``files``.
MODEL_FORMAT_TAG = "aliyun_training.model_format"
#: The logged model's name in its run, as ``mlflow.<flavor>.log_model(name="model")`` would call it.
MODEL_NAME = "model"
_BATCH_METRICS, _BATCH_PARAMS, _PARAM_CHARS, _DIGEST_CHARS = 1000, 100, 6000, 36


def experiment_id(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    """The id of the experiment ``name``, created on first use (where ``artifact_location`` says,
    or the server's default root when None); a concurrent creator's experiment is taken as ours."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            found = client.get_experiment_by_name(name)
            assert found is not None, "it exists: another registration created it"
    if found.lifecycle_stage == "deleted":
        raise MlflowException(
            f"the experiment {name!r} is deleted; restore it (mlflow experiments restore "
            f"--experiment-id {found.experiment_id}) or delete it for good, so runs can be logged to it"
        )
    return str(found.experiment_id)


def run_key(candidate: Candidate) -> str:
    """The value of ``candidate``'s :data:`RUN_KEY_TAG`."""
    identity = json.dumps(candidate.identity(), sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def candidate_run(
    client: MlflowClient, experiment: str, candidate: Candidate, files: PublishedFiles
) -> tuple[str, str]:
    """The run of ``candidate`` and the id of the model logged from it: a finished run its first try
    logged, or a new one logged whole."""
    key = run_key(candidate)
    for run in _runs_of(client, experiment, key):
        model_id = run.data.tags.get(MODEL_ID_TAG)
        if run.info.status == "FINISHED" and model_id:
            return run.info.run_id, model_id
        client.delete_run(run.info.run_id)  # a try killed half way: logged again below
    started, finished = _job_times(files.manifest)
    run = client.create_run(
        experiment, start_time=started, run_name=candidate.run_id, tags=_run_tags(candidate, files, key)
    )
    run_id = run.info.run_id
    manifest = files.manifest
    _log_batches(client, run_id, _metrics(manifest), _params(candidate, manifest))
    client.log_inputs(run_id, [_dataset_input(candidate, manifest)])
    for document in files.documents:
        client.log_artifact(run_id, str(document))
    model_id = _log_model(client, experiment, run_id, files)
    client.set_tag(run_id, MODEL_ID_TAG, model_id)
    client.set_terminated(run_id, "FINISHED", end_time=finished)
    return run_id, model_id


def _job_times(manifest: dict[str, Any]) -> tuple[int | None, int | None]:
    """When the training job started (its first try) and finished, in MLflow's epoch milliseconds;
    None where the manifest does not say (MLflow then takes the time of the call)."""
    job = manifest.get("job") or {}
    tries = job.get("attempts") or [job]
    return _epoch_ms(tries[0].get("started") or job.get("started")), _epoch_ms(job.get("finished"))


def _epoch_ms(moment: Any) -> int | None:
    try:
        return round(datetime.fromisoformat(str(moment)).timestamp() * 1000) if moment else None
    except ValueError:
        return None


def _runs_of(client: MlflowClient, experiment: str, key: str) -> list[Run]:
    runs: list[Run] = client.search_runs([experiment], filter_string=f"tags.{RUN_KEY_TAG} = '{key}'")
    return runs


def _run_tags(candidate: Candidate, files: PublishedFiles, key: str) -> dict[str, str]:
    """The lineage, the run key, and where the Airflow run is (its page, in the run's note)."""
    run = files.manifest.get("run") or {}
    airflow = {"airflow.dag_id": candidate.dag_id, "airflow.run_id": candidate.run_id}
    if run.get("url"):
        airflow["airflow.run_url"] = str(run["url"])
    note = f"Trained on {candidate.dataset_version} by Airflow run {candidate.run_id} of {candidate.dag_id}"
    return {
        **{f"lineage.{name}": value for name, value in candidate.lineage().items()},
        **airflow,
        RUN_KEY_TAG: key,
        "mlflow.note.content": note + (f" ({run['url']})" if run.get("url") else ""),
    }


def _params(candidate: Candidate, manifest: dict[str, Any]) -> dict[str, str]:
    """The trigger form's fields as the run had them, and the dataset version."""
    form = (manifest.get("run") or {}).get("params") or {}
    params = {name: value if isinstance(value, str) else json.dumps(value) for name, value in form.items()}
    params["dataset_version"] = candidate.dataset_version
    return {name: value[:_PARAM_CHARS] for name, value in params.items()}


def _metrics(manifest: dict[str, Any]) -> list[Metric]:
    """Each series per epoch (step = epoch), the final values, and the evaluation's scores."""
    from mlflow.entities import Metric
    from mlflow.utils.validation import path_not_unique, validate_param_and_metric_name

    now = int(time.time() * 1000)
    summary = manifest.get("metrics") or {}
    points: list[tuple[str, Any, int]] = [
        (name, value, epoch)
        for name in summary.get("series") or []
        for epoch, value in enumerate(summary.get(name) or [], start=1)
    ]
    last = int(summary.get("epochs") or 0)
    points += [(name, value, last) for name, value in summary.items() if name.startswith("final_")]
    promotion = manifest.get("promotion") or {}
    if promotion.get("basis") == "evaluation":
        points += [
            (f"evaluation_{name}", value, last) for name, value in (promotion.get("metrics") or {}).items()
        ]
    return [
        Metric(name, float(value), now, step)
        for name, value, step in points
        if validate_param_and_metric_name(name) and not path_not_unique(name) and _finite(value)
    ]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _log_batches(client: MlflowClient, run_id: str, metrics: list[Metric], params: dict[str, str]) -> None:
    from mlflow.entities import Param

    pairs = [Param(name, value) for name, value in params.items()]
    for start in range(0, len(pairs), _BATCH_PARAMS):
        client.log_batch(run_id, params=pairs[start : start + _BATCH_PARAMS])
    for start in range(0, len(metrics), _BATCH_METRICS):
        client.log_batch(run_id, metrics=metrics[start : start + _BATCH_METRICS])


def _dataset_input(candidate: Candidate, manifest: dict[str, Any]) -> Any:
    """The dataset version the model was trained on, as MLflow records a run's input: named for
    the dataset, its digest the staged version's checksum, its source where it was staged from."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = manifest.get("dataset") or {}
    source = str(dataset.get("source_uri") or dataset.get("uri") or candidate.artifacts_uri)
    digest = str(
        dataset.get("checksum")
        or hashlib.sha256(f"{source}@{candidate.dataset_version}".encode()).hexdigest()
    )
    name = source.rstrip("/").rsplit("/", 2)[-2] if source.count("/") >= 2 else source
    profile = {key: dataset[key] for key in ("version", "files", "bytes") if key in dataset}
    return DatasetInput(
        Dataset(
            name=name or candidate.dag_id,
            digest=digest[:_DIGEST_CHARS],
            source_type=source.split("://", 1)[0] if "://" in source else "file",
            source=json.dumps({"uri": source, "version": candidate.dataset_version}),
            profile=json.dumps(profile),
        ),
        tags=[InputTag("mlflow.data.context", "training")],
    )


def _log_model(client: MlflowClient, experiment: str, run_id: str, files: PublishedFiles) -> str:
    """Log the job's MLflow model as the run's model (or the set's files, saying so); its id."""
    from mlflow.entities import LoggedModelStatus

    folder, form = files.mlflow_model, MLFLOW_MODEL_DIR
    if folder is None:
        folder, form = files.root, "files"
        log.warning(
            "The published set holds no MLflow model (%s/MLmodel): its files are registered as they "
            "are, and mlflow.pyfunc.load_model cannot load this version (save one with "
            "mlflow.<flavor>.save_model into OUTPUT_DIR/%s and collect it to make it loadable)",
            MLFLOW_MODEL_DIR,
            MLFLOW_MODEL_DIR,
        )
    model = client.create_logged_model(
        experiment, name=MODEL_NAME, source_run_id=run_id, tags={MODEL_FORMAT_TAG: form}
    )
    client.log_model_artifacts(model.model_id, str(folder))
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    return str(model.model_id)
