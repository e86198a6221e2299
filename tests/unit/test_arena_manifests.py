"""Jobs this pipeline submits to ACK look to arena exactly like its own (golden file + fact-sheet rules)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aliyun_training.backends.ack.request import (
    AckSettings,
    build_configmap,
    build_job,
    check,
    claim_name,
)
from aliyun_training.kubernetes.names import INSTALLATION_LABEL, OWNED, OWNED_LABEL, owner_tags
from aliyun_training.spec import JobOwner, TrainingJobSpec
from aliyun_training.validation import SpecError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "arena_submit_pytorch_demo.json"


def demo_spec(**overrides: Any) -> TrainingJobSpec:
    """`arena submit pytorch --name demo --workers 2 --gpus 8 --image IMG --data cpfs-pvc:/mnt/data --rdma
    --env K=V "python train.py"` as a TrainingJobSpec."""
    fields = {
        "backend": "arena",
        "nodes": 2,
        "gpus_per_node": 8,
        "cpu": 8,
        "memory_gib": 32,
        "image": "IMG",
        "command": "python train.py",
        "env": {"K": "V"},
        "rdma": True,
        "datasets": [{"uri": "pvc://cpfs-pvc", "mount_path": "/mnt/data", "read_only": False}],
        "timeout_minutes": 60,
        **overrides,
    }
    return TrainingJobSpec(**fields)


def test_the_demo_submit_matches_the_golden_objects() -> None:
    golden = json.loads(GOLDEN.read_text())

    job = build_job(demo_spec(), "demo", AckSettings())
    configmap = build_configmap(demo_spec(), "demo", AckSettings(), "UID-OF-THE-PYTORCHJOB")

    assert job == golden["job"]
    assert configmap == golden["configmap"]


def test_every_label_and_annotation_arena_relies_on_is_on_the_cr_and_each_pod_template() -> None:
    job = build_job(demo_spec(), "demo", AckSettings(username="ml-team"))
    expected_labels = {
        "app": "pytorchjob",
        "release": "demo",
        "chart": "pytorchjob-0.5.2",
        "heritage": "Helm",
        "createdBy": "PyTorchJob",
        "arena.kubeflow.org/uid": hashlib.md5(b"ml-team", usedforsecurity=False).hexdigest(),
    }
    expected_annotations = {"arena.kubeflow.org/username": "ml-team", "requestGPUsOfJobOwner": "16"}
    templates = [r["template"]["metadata"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    for metadata in (job["metadata"], *templates):
        assert expected_labels.items() <= metadata["labels"].items()
        assert expected_annotations.items() <= metadata["annotations"].items()


def test_the_pytorch_roles_containers_and_rdma_follow_the_training_operator_and_arena_flags() -> None:
    replicas = build_job(demo_spec(), "demo", AckSettings())["spec"]["pytorchReplicaSpecs"]

    assert (replicas["Master"]["replicas"], replicas["Master"]["restartPolicy"]) == (1, "Never")
    assert (replicas["Worker"]["replicas"], replicas["Worker"]["restartPolicy"]) == (1, "OnFailure")
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["resources"]["limits"]["rdma/hca"] == "1"
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_the_configmap_lets_arena_delete_find_the_job() -> None:
    configmap = build_configmap(demo_spec(), "demo", AckSettings(), "uid-1")

    assert configmap["metadata"]["name"] == "demo-pytorchjob"
    assert configmap["metadata"]["labels"] == {"createdBy": "arena"}
    assert configmap["data"]["app"].splitlines() == ["pytorchjob.kubeflow.org/demo"]
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    values = yaml.safe_load(configmap["data"]["values"])
    assert (
        values["workers"] == 1 and values["gpuCount"] == 8 and values["dataset"] == {"cpfs-pvc": "/mnt/data"}
    )


def test_erdma_host_network_nccl_env_and_pull_secrets_come_from_the_cluster_settings() -> None:
    settings = AckSettings(
        rdma_resource="aliyun/erdma",
        host_network=True,
        nccl_env={"NCCL_IB_GID_INDEX": "3"},
        image_pull_secrets=["acr-pull"],
        ttl_seconds_after_finished=600,
    )

    job = build_job(demo_spec(), "demo", settings)

    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["imagePullSecrets"] == [{"name": "acr-pull"}]
    assert pod["containers"][0]["resources"]["limits"]["aliyun/erdma"] == "1"
    assert {"name": "NCCL_IB_GID_INDEX", "value": "3"} in pod["containers"][0]["env"]
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 600


@pytest.mark.parametrize(
    ("framework", "version", "key", "roles"),
    [
        ("tensorflow", "v1", "tfReplicaSpecs", {"Worker": 2}),
        ("mpi", "v2beta1", "mpiReplicaSpecs", {"Launcher": 1, "Worker": 2}),
    ],
)
def test_tfjob_and_mpijob_get_their_own_kinds_and_replica_specs(
    framework: str, version: str, key: str, roles: dict[str, int]
) -> None:
    job = build_job(demo_spec(framework=framework), "demo", AckSettings())

    assert job["apiVersion"] == f"kubeflow.org/{version}"
    assert {role: spec["replicas"] for role, spec in job["spec"][key].items()} == roles
    assert job["metadata"]["labels"]["app"] == job["kind"].lower()


def test_arena_old_mpi_operator_gets_v1alpha1() -> None:
    job = build_job(demo_spec(framework="mpi"), "demo", AckSettings(mpi_api_version="v1alpha1"))

    assert job["apiVersion"] == "kubeflow.org/v1alpha1"


def test_more_gpus_per_node_than_the_node_type_has_is_rejected_before_creation() -> None:
    with pytest.raises(
        SpecError, match="gpus_per_node: 16 GPUs per node, but the cluster's GPU nodes have 8"
    ):
        check(demo_spec(gpus_per_node=16), "demo", AckSettings())


def test_a_dataset_without_a_pvc_name_is_rejected_unless_a_default_pvc_is_set() -> None:
    with pytest.raises(SpecError, match=r"datasets: mount '/mnt/cpfs/v1' names no PVC \(fix: use pvc://"):
        claim_name("/mnt/cpfs/v1", AckSettings())

    assert claim_name("/mnt/cpfs/v1", AckSettings(default_pvc="cpfs-data")) == "cpfs-data"
    assert claim_name("pvc://cpfs-data/imagenet", AckSettings()) == "cpfs-data"


def test_an_owner_only_adds_its_labels_and_exact_annotations_beside_arenas() -> None:
    owner = JobOwner(
        installation="ml-prod",
        dag_id="retrain",
        run_id="manual__2026-11-30T00:00:00+00:00",
        task_id="train",
        map_index=3,
    )
    plain = build_job(demo_spec(), "demo", AckSettings())
    built = build_job(demo_spec(owner=owner), "demo", AckSettings())
    owned = json.loads(json.dumps(built))  # the CR and its templates share the label dicts

    expected = {
        "aliyun-training/airflow-installation": "ml-prod",
        "aliyun-training/airflow-dag-id": "retrain",
        "aliyun-training/airflow-run-id": "manual__2026-11-30T00:00:00+00:00",
        "aliyun-training/airflow-task-id": "train",
        "aliyun-training/airflow-map-index": "3",
        "aliyun-training/airflow-try-number": "1",
    }
    templates = [r["template"]["metadata"] for r in owned["spec"]["pytorchReplicaSpecs"].values()]
    for metadata in (owned["metadata"], *templates):
        assert metadata["labels"].pop(OWNED_LABEL) == OWNED
        assert metadata["labels"].pop(INSTALLATION_LABEL) == "ml-prod"
        assert {key: metadata["annotations"].pop(key) for key in expected} == expected
    assert owned == plain, "arena's own fields are as arena renders them"
    assert JobOwner.from_tags(owner_tags(built["metadata"]["annotations"])) == owner
