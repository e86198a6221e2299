"""A registered candidate as MLflow users find it, on a real MLflow tracking server over its REST API.

Behind every version is a run of the pipeline's experiment with its params, its metrics per epoch,
its dataset version as an input and its manifest and report as artifacts; the version is made from
the model logged from that run, the MLflow model the training script saved, so
``mlflow.pyfunc.load_model("models:/<model>@<alias>")`` loads it and predicts what the network does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import requests
import torch

from aliyun_training.model_registry import open_registry
from aliyun_training.model_registry.base import Candidate, PublishedFiles, RegistrySettings
from aliyun_training.model_registry.mlflow import embedded_tracking_uri
from aliyun_training.model_registry.mlflow_run import MODEL_ID_TAG, RUN_KEY_TAG, run_key

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

TRAINING_DIR = Path(__file__).resolve().parents[2] / "include" / "training"
INSTALLATION = "team-a"
RUN_ID = "scheduled__2026-11-29T00:00:00+00:00"


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on a free port: a SQLite store, artifacts served by the server itself."""
    root = tmp_path_factory.mktemp("mlflow-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        f"--backend-store-uri=sqlite:///{root / 'mlflow.db'}",
        f"--artifacts-destination={root / 'artifacts'}",
        "--host=127.0.0.1",
        f"--port={port}",
        "--workers=1",
    ]
    log = (root / "server.log").open("w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert server.poll() is None, (root / "server.log").read_text()[-3000:]
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.5)
        else:
            pytest.fail(f"mlflow server did not answer: {(root / 'server.log').read_text()[-3000:]}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _network() -> torch.nn.Module:
    """The CIFAR-10 example's network, as its training script builds it."""
    sys.path.insert(0, str(TRAINING_DIR))
    try:
        import cifar10_model
    finally:
        sys.path.remove(str(TRAINING_DIR))
    torch.manual_seed(0)
    return cifar10_model.build_model(torch.full((3,), 0.5), torch.full((3,), 0.25)).eval()


def _published(folder: Path, network: torch.nn.Module | None) -> PublishedFiles:
    """A published set as the publishing task leaves it: the job's outputs, manifest and report;
    with ``network``, the MLflow model the training script saves."""
    root = folder / "set"
    root.mkdir(parents=True)
    (root / "model.pt").write_bytes(b"state")
    if network is not None:
        sys.path.insert(0, str(TRAINING_DIR))
        try:
            from mlflow_model import save_mlflow_model
        finally:
            sys.path.remove(str(TRAINING_DIR))
        save_mlflow_model(network, root, np.random.default_rng(0).random((4, 3, 32, 32), dtype=np.float32))
    manifest: dict[str, Any] = {
        "run": {
            "params": {"epochs": 2, "nodes": 2, "backend": "local", "backend_overrides": {}},
            "url": "/dags/cifar10_retrain/runs/scheduled__2026-11-29",
        },
        "metrics": {
            "epochs": 2,
            "series": ["train_loss", "test_accuracy"],
            "train_loss": [0.9, 0.4],
            "test_accuracy": [0.7, 0.85],
            "final_train_loss": 0.4,
            "final_test_accuracy": 0.85,
        },
        "promotion": {"basis": "evaluation", "metrics": {"test_accuracy": 0.84}},
        "job": {
            "started": "2026-11-29T03:10:00+00:00",
            "finished": "2026-11-29T04:25:30.5+00:00",
            "attempts": [{"started": "2026-11-29T03:00:00+00:00"}, {"started": "2026-11-29T03:10:00+00:00"}],
        },
        "dataset": {
            "uri": "/cpfs/datasets/cifar10/2026-11-29",
            "source_uri": "oss://team-bucket/datasets/cifar10/2026-11-29/",
            "version": "2026-11-29",
            "files": 7,
            "checksum": "c0ffee" * 10,
        },
    }
    documents = (root / "manifest.json", root / "report.html")
    documents[0].write_text(json.dumps(manifest))
    documents[1].write_text("<html><body>report</body></html>")
    return PublishedFiles(root, manifest, documents)


def _candidate(run_id: str = RUN_ID) -> Candidate:
    return Candidate(
        installation=INSTALLATION,
        run_id=run_id,
        dag_id="cifar10_retrain",
        dataset_version="2026-11-29",
        metrics={"test_accuracy": 0.84},
        artifacts_uri="oss://team-bucket/artifacts/cifar10/2026-11-29/job/",
        manifest_uri="oss://team-bucket/artifacts/cifar10/2026-11-29/job/manifest.json",
        job_id="dlc-1",
        image="registry.example/train@sha256:0",
        code_digest="0123456789ab",
    )


def test_a_version_has_a_run_with_its_metrics_and_a_model_that_loads_and_predicts(
    tracking_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    network = _network()
    # The team's production deployment: it keeps the plain aliases its serving loads by.
    settings = RegistrySettings(
        kind="mlflow", model="cifar10", tracking_uri=tracking_server, plain_aliases=True
    )
    registry = open_registry(settings, INSTALLATION)
    registered = registry.register(_candidate(), _published(tmp_path, network))
    registry.promote(registered)

    client = MlflowClient(tracking_uri=tracking_server)
    version = client.get_model_version("cifar10", registered.version)
    run = client.get_run(version.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == RUN_ID
    # From the training job's first try to its end, as MLflow shows the run's duration.
    assert (run.info.start_time, run.info.end_time) == (1_795_921_200_000, 1_795_926_330_500)
    assert client.get_experiment(run.info.experiment_id).name == "cifar10_retrain"
    assert run.data.metrics == {
        "train_loss": 0.4,
        "test_accuracy": 0.85,
        "final_train_loss": 0.4,
        "final_test_accuracy": 0.85,
        "evaluation_test_accuracy": 0.84,
    }
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.7), (2, 0.85)]
    assert run.data.params == {
        "epochs": "2",
        "nodes": "2",
        "backend": "local",
        "backend_overrides": "{}",
        "dataset_version": "2026-11-29",
    }
    assert run.data.tags["airflow.run_id"] == RUN_ID and run.data.tags["lineage.job_id"] == "dlc-1"
    assert run.data.tags["airflow.run_url"] == "/dags/cifar10_retrain/runs/scheduled__2026-11-29"
    (dataset,) = run.inputs.dataset_inputs
    assert (dataset.dataset.name, dataset.dataset.digest) == ("cifar10", ("c0ffee" * 10)[:36])
    assert json.loads(dataset.dataset.source)["uri"] == "oss://team-bucket/datasets/cifar10/2026-11-29/"
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["manifest.json", "report.html"]
    assert version.source == f"models:/{run.data.tags[MODEL_ID_TAG]}", "made from the run's logged model"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_server)
    import mlflow.pyfunc

    loaded = mlflow.pyfunc.load_model("models:/cifar10@champion")
    batch = np.random.default_rng(1).random((6, 3, 32, 32), dtype=np.float32)
    predicted = loaded.predict(batch)
    with torch.no_grad():
        expected = network(torch.from_numpy(batch)).numpy()
    assert predicted.shape == (6, 10) and np.allclose(predicted, expected, atol=1e-5)
    assert loaded.metadata.get_input_schema().inputs[0].shape == (-1, 3, 32, 32)

    # What a team's tools read over the REST API: the model with its aliases, and the run.
    models = requests.get(f"{tracking_server}/api/2.0/mlflow/registered-models/search", timeout=10).json()
    (model,) = models["registered_models"]
    aliases = {alias["alias"]: alias["version"] for alias in model["aliases"]}
    assert aliases == {
        "champion": "1",
        "challenger": "1",
        f"champion-{INSTALLATION}": "1",
        f"challenger-{INSTALLATION}": "1",
    }
    runs = requests.post(
        f"{tracking_server}/api/2.0/mlflow/runs/search",
        json={"experiment_ids": [run.info.experiment_id]},
        timeout=10,
    ).json()["runs"]
    assert [r["info"]["run_id"] for r in runs] == [run.info.run_id]
    metrics = {m["key"]: m["value"] for m in runs[0]["data"]["metrics"]}
    assert metrics["evaluation_test_accuracy"] == 0.84


def test_a_set_without_an_mlflow_model_registers_its_files_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow.tracking import MlflowClient

    uri = embedded_tracking_uri(tmp_path / "store")
    registry = open_registry(RegistrySettings(kind="mlflow", model="cifar10", tracking_uri=uri), INSTALLATION)
    registered = registry.register(_candidate(), _published(tmp_path, None))

    client = MlflowClient(tracking_uri=uri)
    version = client.get_model_version("cifar10", registered.version)
    model = client.get_logged_model(client.get_run(version.run_id).data.tags[MODEL_ID_TAG])
    assert model.tags["aliyun_training.model_format"] == "files"
    assert version.source.startswith(model.artifact_location), "the run's logged model"
    files = {a.path for a in client.list_logged_model_artifacts(model.model_id)}
    assert "model.pt" in files and "MLmodel" not in files
    assert "holds no MLflow model" in caplog.text and "cannot load this version" in caplog.text
    # The store keeps its files beside its database, not in the worker's working directory.
    assert model.artifact_location.startswith((tmp_path / "store" / "artifacts").as_uri())
    assert not Path("mlruns").exists()


def test_numbers_mlflow_would_refuse_are_left_out_and_the_registration_goes_on(tmp_path: Path) -> None:
    """A job's metrics.json names its series: one MLflow refuses, or a value that is no number, stays
    in the manifest only."""
    from mlflow.tracking import MlflowClient

    files = _published(tmp_path, None)
    files.manifest["metrics"] |= {
        "series": ["test_accuracy", "../escape", "loss;drop"],
        "../escape": [1.0, 2.0],
        "loss;drop": [0.5, 0.4],
        "test_accuracy": [0.7, float("nan")],
        "final_note": "n/a",
    }
    uri = embedded_tracking_uri(tmp_path / "store")
    registry = open_registry(RegistrySettings(kind="mlflow", model="cifar10", tracking_uri=uri), INSTALLATION)
    registered = registry.register(_candidate(), files)

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(client.get_model_version("cifar10", registered.version).run_id)
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    assert [(m.step, m.value) for m in history] == [(1, 0.7)]
    assert not {"../escape", "loss;drop", "final_note"} & set(run.data.metrics)


def test_a_retry_reuses_a_finished_run_and_logs_again_over_one_killed_half_way(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = embedded_tracking_uri(tmp_path / "store")
    client = MlflowClient(tracking_uri=uri)
    registry = open_registry(RegistrySettings(kind="mlflow", model="cifar10", tracking_uri=uri), INSTALLATION)
    first = registry.register(_candidate("manual__1"), _published(tmp_path / "a", None))
    experiment = client.get_experiment_by_name("cifar10_retrain").experiment_id
    # A try of manual__2 killed half way left an unfinished run with its key and no model.
    killed = client.create_run(experiment, tags={RUN_KEY_TAG: run_key(_candidate("manual__2"))})

    second = registry.register(_candidate("manual__2"), _published(tmp_path / "b", None))
    again = registry.register(_candidate("manual__1"), _published(tmp_path / "c", None))

    assert again == first, "the version its first try registered"
    assert client.get_run(killed.info.run_id).info.lifecycle_stage == "deleted"
    runs = client.search_runs([experiment])
    assert sorted(run.info.run_name for run in runs) == ["manual__1", "manual__2"]
    assert all(run.info.status == "FINISHED" for run in runs)
    assert client.get_model_version("cifar10", second.version).run_id != killed.info.run_id


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in its own directory: a store writing to ``./mlruns`` would show there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert os.getcwd() == str(tmp_path)
