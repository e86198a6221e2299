"""An emulated Alibaba Cloud account: DLC, VPC/ECS, PAI Studio, RAM, OSS, CloudMonitor behind one connection.

The ``alibaba_cloud_default`` connection points every service at its emulator over HTTP, and the
account holds a complete Lingjun setup: a network every preflight check passes, a quota with room,
a RAM role with the reference DLC policy and an empty bucket. Tests then break one piece at a time.

Also the training job specs the tests submit to DLC (with DLC's own settings of the job) and to ACK
(arena), each test adding its own fields, and :class:`JobOutputs`, which plays a training job
writing its outputs to OSS.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aliyun_training.oss_location import parse_oss_uri
from fakes.aiworkspace import AIWorkspaceEmulator
from fakes.base import ManualClock
from fakes.cms import CloudMonitorEmulator
from fakes.dlc import DlcEmulator
from fakes.network import NetworkEmulator, StandardNetwork
from fakes.oss import OssEmulator
from fakes.paistudio import PaiStudioEmulator
from fakes.ram import RamEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pytest

    from aliyun_training.backends.dlc.backend import DlcBackend

AK, SK = "LTAI-preflight", "preflight-secret-value"
POLICY_FILE = (
    Path(__file__).resolve().parents[1] / "plugins" / "aliyun_training" / "preflight" / "dlc_role_policy.json"
)
ROLE = "pai-dlc-runner"
QUOTA = "quota1"
#: The image the training job specs run.
TRAIN_IMAGE = "registry.example.com/train/pytorch:2.13-rdma"
REGION = "cn-wulanchabu"
#: The emulated account's bucket, for job outputs and artifact sets.
BUCKET = "pai-training"


@dataclass
class Cloud:
    network: NetworkEmulator
    studio: PaiStudioEmulator
    ram: RamEmulator
    dlc: DlcEmulator
    oss: OssEmulator
    ids: StandardNetwork
    #: The jobs' GPU metrics (``acs_pai_dlc``): a test sets each job's series.
    cms: CloudMonitorEmulator


@contextlib.contextmanager
def emulated_cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    keys = {AK: SK}
    with (
        NetworkEmulator(keys) as network,
        PaiStudioEmulator(keys) as studio,
        RamEmulator(keys) as ram,
        DlcEmulator(keys) as dlc,
        OssEmulator(keys, region=REGION) as oss,
        CloudMonitorEmulator(keys, region=REGION) as cms,
    ):
        ids = network.standard()
        oss.create_bucket(BUCKET)
        studio.add_quota(QUOTA, resource_type="Lingjun", gpu_type="GU8TF", allocatable_gpus=64)
        ram.add_role(ROLE)
        ram.attach_policy(
            ROLE, "AliyunPAIDLCDefaultRolePolicy", json.loads(POLICY_FILE.read_text())["policy"]
        )
        endpoints = {
            "vpc": network.endpoint,
            "ecs": network.endpoint,
            "paistudio": studio.endpoint,
            "ram": ram.endpoint,
            "dlc": dlc.endpoint,
            "oss": oss.endpoint.removeprefix("http://"),
            "cms": cms.endpoint,
        }
        use_alibaba_connection(
            monkeypatch, endpoints, AK, SK, retry={"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.02}
        )
        yield Cloud(network, studio, ram, dlc, oss, ids, cms)


@contextlib.contextmanager
def emulated_workspace(
    monkeypatch: pytest.MonkeyPatch, access_key_id: str = AK, secret: str = SK
) -> Iterator[AIWorkspaceEmulator]:
    """An AIWorkspace emulator on a manual clock, reached through ``alibaba_cloud_default``; it must
    end without an error of its own."""
    with AIWorkspaceEmulator({access_key_id: secret}) as emulator:
        emulator.clock = ManualClock(1_800_000_000.0)
        use_alibaba_connection(monkeypatch, {"aiworkspace": emulator.endpoint}, access_key_id, secret)
        yield emulator
        assert emulator.internal_errors == []


@contextlib.contextmanager
def emulated_oss(
    monkeypatch: pytest.MonkeyPatch, access_key_id: str = AK, secret: str = SK, bucket: str = BUCKET
) -> Iterator[OssEmulator]:
    """An OSS emulator holding ``bucket``, reached through ``alibaba_cloud_default``; it must end
    without an error of its own."""
    with OssEmulator({access_key_id: secret}, region=REGION) as emulator:
        emulator.create_bucket(bucket)
        use_alibaba_connection(
            monkeypatch, {"oss": emulator.endpoint.removeprefix("http://")}, access_key_id, secret
        )
        yield emulator
        assert emulator.internal_errors == []


def use_alibaba_connection(
    monkeypatch: pytest.MonkeyPatch,
    endpoints: dict[str, str],
    access_key_id: str,
    secret: str,
    conn_id: str = "alibaba_cloud_default",
    **extra: object,
) -> None:
    """Point ``conn_id`` at emulators: plain HTTP, short backoff so retries are quick."""
    extras = {
        "access_key_id": access_key_id,
        "access_key_secret": secret,
        "region": REGION,
        "protocol": "http",
        "endpoints": endpoints,
        "retry": {"max_attempts": 10, "base_delay": 0.01, "max_delay": 0.05},
        **extra,
    }
    connection = json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection)


# -- training job specs ----------------------------------------------------------------------------


#: DLC's own settings of the jobs ``dlc_job`` describes: Lingjun nodes of GU8TF GPUs in quota12345.
DLC_JOB_SETTINGS: dict[str, Any] = {"resource_type": "lingjun", "quota_id": "quota12345", "gpu_type": "GU8TF"}


def dlc_job(**fields: Any) -> dict[str, Any]:
    """A DLC job spec on two nodes of eight GPUs (in the quota of ``DLC_JOB_SETTINGS``), with
    ``fields`` added."""
    return {
        "backend": "dlc",
        "nodes": 2,
        "gpus_per_node": 8,
        "cpu": 96,
        "memory_gib": 800,
        "image": TRAIN_IMAGE,
        **fields,
    }


def dlc_backend(job_settings: dict[str, Any] | None = None, **config: Any) -> DlcBackend:
    """A ``DlcBackend`` with ``config`` that runs ``dlc_job``'s jobs: with ``DLC_JOB_SETTINGS``, and
    ``job_settings`` changing some of them."""
    from aliyun_training.backends.dlc.backend import DlcBackend

    return DlcBackend(job_settings={**DLC_JOB_SETTINGS, **(job_settings or {})}, **config)


def arena_job(**fields: Any) -> dict[str, Any]:
    """An ACK (arena) job spec on two nodes of eight GPUs, with ``fields`` added."""
    return {
        "backend": "arena",
        "nodes": 2,
        "gpus_per_node": 8,
        "cpu": 16,
        "memory_gib": 64,
        "image": TRAIN_IMAGE,
        **fields,
    }


# -- what a training job leaves behind -------------------------------------------------------------

#: The identity a job's OSS mount writes with: the job's own (its RAM role), never Airflow's.
JOB_AK, JOB_SK = "LTAI-training-job", "training-job-secret"


def write_job_outputs(oss: OssEmulator, output_uri: str, name: str, epochs: int = 1) -> None:
    """Write what a finished training job leaves under ``<output_uri>/<name>/``, through oss2.

    Neither the DLC emulator nor the Kubernetes fake runs code; called from their ``on_create``
    hooks, this plays the job's rank 0 writing ``metrics.json`` (the schema
    include/training/cifar10_ddp.py writes) and ``checkpoints/epoch-NNNN.pt`` into the OSS location
    mounted at its output root.
    """
    import oss2

    oss.accept_access_key(JOB_AK, JOB_SK)
    location = parse_oss_uri(output_uri, field="output_uri")
    bucket = oss2.Bucket(oss2.AuthV4(JOB_AK, JOB_SK), oss.endpoint, location.bucket, region=oss.region)
    history = [
        {
            "epoch": epoch,
            "train_loss": round(2.3 / epoch, 4),
            "test_loss": round(2.1 / epoch, 4),
            "test_accuracy": round(0.2 * epoch, 4),
            "seconds": 12.5,
        }
        for epoch in range(1, epochs + 1)
    ]
    prefix = f"{location.prefix}{name}/"
    metrics = {"world_size": 2, "backend": "nccl", "epochs": history}
    files = {prefix + "metrics.json": (json.dumps(metrics, indent=2) + "\n").encode()}
    files |= {
        f"{prefix}checkpoints/epoch-{n:04d}.pt": f"checkpoint {n}".encode() for n in range(1, epochs + 1)
    }
    for key, data in files.items():
        # The job's mount (ossfs) retries a failed write; so does its stand-in, under injected faults.
        for attempt in range(10):
            try:
                bucket.put_object(key, data)
                break
            except (oss2.exceptions.ServerError, oss2.exceptions.RequestError):
                if attempt == 9:
                    raise


def write_evaluation(oss: OssEmulator, output_uri: str, name: str, env: dict[str, str]) -> None:
    """Write what a finished evaluation job leaves: ``<output_uri>/<name>/evaluation.json``.

    Played like :func:`write_job_outputs` (no code runs in the emulators): the schema
    include/training/evaluate_cifar10.py writes, the champion scored only when the job was given a
    ``CHAMPION_DIR``, both models scoring alike on the same data.
    """
    scores = {"test_loss": 1.05, "test_accuracy": 0.6}
    body = {"candidate": scores, "champion": scores if env.get("CHAMPION_DIR") else None}
    location = parse_oss_uri(output_uri, field="output_uri")
    oss.put(location.bucket, f"{location.prefix}{name}/evaluation.json", json.dumps(body).encode())


def job_env(job: dict[str, Any]) -> dict[str, str]:
    """The environment a created job gives its nodes: a DLC CreateJob body's ``Envs``, or the first
    container's ``env`` of a PyTorchJob's first replica."""
    if "Envs" in job or "DisplayName" in job:
        return dict(job.get("Envs") or {})
    replica = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))
    container = replica["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value", "") for item in container.get("env") or []}


@dataclass
class JobOutputs:
    """``on_create`` hooks that write outputs (:func:`write_job_outputs`) for jobs named ``name_prefix*``.

    Pass ``on_dlc_create`` to a DlcEmulator (DisplayName) or ``on_cr_create`` to a KubernetesFake
    (the CR's metadata.name); ``written`` lists the jobs that got outputs.
    """

    oss: OssEmulator
    output_uri: str
    name_prefix: str
    epochs: int = 1
    written: list[str] = field(default_factory=list)

    def on_dlc_create(self, body: dict[str, Any]) -> None:
        self._created(body["DisplayName"], body)

    def on_cr_create(self, job: dict[str, Any]) -> None:
        self._created(job["metadata"]["name"], job)

    def _created(self, name: str, job: dict[str, Any]) -> None:
        if name.startswith(self.name_prefix):
            write_job_outputs(self.oss, self.output_uri, name, self.epochs)
            self.written.append(name)
        elif name.startswith(self.name_prefix.replace("-train", "-evaluate")):
            write_evaluation(self.oss, self.output_uri, name, job_env(job))


# -- preflight against the emulated cloud ------------------------------------------------------------


def preflight_job(
    backend_config: dict[str, Any] | None = None, job_settings: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """A 2 x 8-GPU Lingjun DLC job in ``quota1`` (a ``JobPlan``'s dict), as the cloud preflight
    scenarios check it: ``spec`` changes its spec, ``job_settings`` DLC's own settings (the quota,
    its resource type and GPU model) and ``backend_config`` adds the backend's other settings."""
    return {
        "spec": {
            "backend": "dlc",
            "nodes": 2,
            "gpus_per_node": 8,
            "image": "registry.example.com/train:1",
            "command": "torchrun train.py",
            **spec,
        },
        "backend_config": {
            **(backend_config or {}),
            "job_settings": {**DLC_JOB_SETTINGS, "quota_id": QUOTA, **(job_settings or {})},
        },
    }


def run_check(
    cloud: Cloud,
    group: str,
    vpc: dict[str, str] | None = None,
    job_settings: dict[str, Any] | None = None,
    **spec: Any,
) -> list[dict]:
    """Run one preflight check group against ``cloud`` as the DAG's task does, for ``preflight_job``
    with ``job_settings`` and ``spec``; return its findings."""
    from aliyun_training.operators.preflight import PreflightCheckOperator

    ids = cloud.ids
    network = vpc or {
        "vpc_id": ids.vpc_id,
        "switch_id": ids.vswitch_id,
        "security_group_id": ids.security_group_id,
    }
    operator = PreflightCheckOperator(
        task_id=f"check_{group}",
        group=group,
        job=preflight_job({"workspace_id": "ws-1", "vpc": network}, job_settings, **spec),
        preflight={
            "lingjun_regions": ["cn-wulanchabu"],
            "zone_id": ids.zone_id,
            "role_name": ROLE,
            "policy_file": str(POLICY_FILE),
        },
    )
    return operator.execute({})


def publisher_outputs(
    root: Path, publisher: str, checkpoints: tuple[int, ...] = (1,), size: int = 64 * 1024
) -> dict[str, bytes]:
    """Write a job output directory under ``root`` whose every collected file is ``publisher``'s own
    bytes (``model.pt``, ``metrics.json``, ``checkpoints/epoch-NNNN.pt`` of each epoch in
    ``checkpoints``); return the files by key.

    Publication race tests give each publisher such a directory: a published set that mixes two
    publishers' files is then visible byte for byte.
    """
    epochs = [{"epoch": 1, "train_loss": 0.5, "test_loss": 0.6, "test_accuracy": 0.7, "seconds": 1.0}]
    files = {
        "model.pt": _seeded_bytes(f"{publisher}/model", size),
        "metrics.json": json.dumps({"publisher": publisher, "epochs": epochs}).encode(),
        **{
            f"checkpoints/epoch-{index:04d}.pt": _seeded_bytes(f"{publisher}/checkpoint-{index}", 2 * size)
            for index in checkpoints
        },
    }
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return files


def _seeded_bytes(seed: str, size: int) -> bytes:
    """``size`` bytes that differ for every ``seed``."""
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]
