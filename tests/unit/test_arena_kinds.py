"""Each job kind's CR and ConfigMap as arena's source writes them (see tests/golden/README.md)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aliyun_training.backends.ack.request import AckSettings, build_configmap, build_job
from aliyun_training.spec import TrainingJobSpec


def job(**fields: Any) -> TrainingJobSpec:
    base = {"backend": "arena", "nodes": 3, "gpus_per_node": 8, "image": "IMG", "command": "python train.py"}
    return TrainingJobSpec(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "settings", "chart", "workers"),
    [
        ({}, {}, ("pytorchjob", "0.5.2"), 2),  # arena counts the master among --workers
        ({"framework": "elastic", "min_nodes": 2, "max_nodes": 4}, {}, ("pytorchjob", "0.5.2"), 3),
        ({"framework": "tensorflow"}, {}, ("tfjob", "0.39.1"), 3),
        ({"framework": "mpi"}, {}, ("mpijob", "0.28.0"), 3),
        ({"framework": "mpi"}, {"mpi_api_version": "v1alpha1"}, ("mpijob", "0.28.0"), 3),
    ],
)
def test_the_configmap_holds_arenas_app_list_chart_version_and_worker_count(
    fields: dict[str, Any], settings: dict[str, Any], chart: tuple[str, str], workers: int
) -> None:
    spec, cluster = job(**fields), AckSettings(**settings)

    configmap = build_configmap(spec, "demo", cluster, "uid-1")
    body = build_job(spec, "demo", cluster)

    arena_type = body["kind"].lower()
    assert configmap["metadata"]["name"] == f"demo-{arena_type}"
    assert configmap["data"]["app"] == f"{arena_type}.kubeflow.org/demo"  # no trailing newline
    assert configmap["data"][chart[0]] == chart[1]
    assert body["metadata"]["labels"]["chart"] == f"{chart[0]}-{chart[1]}"
    assert yaml.safe_load(configmap["data"]["values"])["workers"] == workers


def test_mpijob_v2beta1_workers_have_no_command_the_launcher_runs_it() -> None:
    replicas = build_job(job(framework="mpi"), "demo", AckSettings())["spec"]["mpiReplicaSpecs"]

    (launcher,) = replicas["Launcher"]["template"]["spec"]["containers"]
    (worker,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert launcher["command"] == ["sh", "-c", "python train.py"]
    assert "command" not in worker and "args" not in worker
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "nvidia.com/gpu" not in launcher["resources"]["limits"]


def test_mpijob_v1alpha1_keeps_arenas_one_template_with_the_command() -> None:
    body = build_job(job(framework="mpi"), "demo", AckSettings(mpi_api_version="v1alpha1"))

    assert body["spec"]["replicas"] == 3
    assert body["spec"]["template"]["spec"]["containers"][0]["command"] == ["sh", "-c", "python train.py"]


def test_an_elastic_job_is_workers_only_with_the_training_operators_elastic_policy() -> None:
    spec = job(framework="elastic", nodes=2, min_nodes=1, max_nodes=6, gpus_per_node=4)

    body = build_job(spec, "demo", AckSettings())

    assert body["apiVersion"] == "kubeflow.org/v1" and body["kind"] == "PyTorchJob"
    assert body["spec"]["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 6,
        "rdzvBackend": "c10d",
        "nProcPerNode": 4,
    }
    assert "nprocPerNode" not in body["spec"]  # the webhook forbids it beside elasticPolicy.nProcPerNode
    (role,) = body["spec"]["pytorchReplicaSpecs"].items()
    assert role[0] == "Worker" and role[1]["replicas"] == 2 and role[1]["restartPolicy"] == "OnFailure"
    assert role[1]["template"]["spec"]["containers"][0]["name"] == "pytorch"
