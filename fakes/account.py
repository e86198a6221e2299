"""The emulated cloud an end-to-end deployment runs against: one Alibaba Cloud account and one ACK cluster.

Every emulator serves HTTP on 127.0.0.1 from the test process, so the Airflow services (separate
processes) reach them exactly as they would reach the cloud, and the tests count what arrived.
The account holds what the guides set up by hand: a Lingjun network, quota and RAM role, a PAI
workspace, an OSS bucket with weekly dataset versions, an ACR Enterprise instance whose builds push
into the registry the image check asks, and a cluster with a bound CPFS claim.

Training jobs do not run code here, so a job "writes" its outputs when it is created: metrics and a
checkpoint appear under the job's directory in the OSS location mounted at its output root.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakes.acr import AcrEmulator, EmulatedRepository, EmulatedTag
from fakes.aiworkspace import AIWorkspaceEmulator
from fakes.base import FaultPlan
from fakes.cloud import POLICY_FILE, QUOTA, ROLE, job_env, write_evaluation, write_job_outputs
from fakes.cms import CloudMonitorEmulator
from fakes.dlc import DlcEmulator, EmulatedJob, JobScript
from fakes.environment_files import write_environment
from fakes.kube import bound_claim, cpfs_volume, kube_configuration, oss_volume
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from fakes.network import NetworkEmulator, StandardNetwork
from fakes.oss import OssEmulator, OssFaultPlan
from fakes.paistudio import PaiStudioEmulator
from fakes.ram import RamEmulator
from fakes.registry import RegistryEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
AK, SK = "LTAI-e2e-deployment", "e2e-deployment-secret-never-logged"
REGISTRY_LOGIN, REGISTRY_PASSWORD = "robot$ml-push", "Reg1stry-e2e-Pa55word"
REGISTRY_CONN = "image_registry"
REGION = "cn-wulanchabu"
BUCKET = "ml-e2e"
WORKSPACE = "ws-e2e"
NAMESPACE = "training"
DATA_PVC = "cpfs-train"
OUTPUT_PVC = "oss-outputs"
OUTPUT_URI = f"oss://{BUCKET}/outputs/cifar10/"
ARTIFACT_ROOT = f"oss://{BUCKET}/artifacts/"
#: Secrets that must never appear in any log the deployment writes.
SECRETS = (SK, REGISTRY_PASSWORD)
TRAIN_PREFIX = "cifar10-retrain-train"
EVALUATE_PREFIX = "cifar10-retrain-evaluate"
GOOD_PROBE = (DATA / "probe" / "verify_pod.log").read_text().splitlines()
ALL_REDUCE_2X8 = (DATA / "rdma" / "all_reduce_perf_2x8.txt").read_text().splitlines()
IB_WRITE_BW_SERVER = (DATA / "rdma" / "ib_write_bw_server.txt").read_text().splitlines()


def dlc_lifetime(running: float) -> JobScript:
    """A DLC job that queues briefly, then runs ``running`` seconds and succeeds.

    The jobs of a run that nothing holds up are over within a second: done by the time their
    trigger first looks, instead of waiting out the DAG's poll intervals (5 to 15 s) once more.
    """
    return JobScript(
        phases=[("Creating", 0.1), ("Queuing", 0.2), ("EnvPreparing", 0.1), ("Running", running)]
    )


def kube_lifetime(running: float, lines: list[str] | None = None) -> TrainingScript:
    script = TrainingScript(phases=[("Created", 0.2), ("Running", running)])
    return TrainingScript(phases=script.phases, log_lines=lines) if lines else script


@dataclass
class Account:
    network: NetworkEmulator
    studio: PaiStudioEmulator
    ram: RamEmulator
    dlc: DlcEmulator
    workspace: AIWorkspaceEmulator
    oss: OssEmulator
    acr: AcrEmulator
    registry: RegistryEmulator
    kube: KubernetesFake
    ids: StandardNetwork
    root: Path
    cms: CloudMonitorEmulator
    repositories: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Set by a test to keep the answer to one create request back.
    hold: Hold | None = None

    # -- what the deployment is given ----------------------------------------------------------------

    def connections(self) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` variables: each cloud service at its emulator, the cluster, the registry."""
        endpoints = {
            "vpc": self.network.endpoint,
            "ecs": self.network.endpoint,
            "paistudio": self.studio.endpoint,
            "ram": self.ram.endpoint,
            "dlc": self.dlc.endpoint,
            "aiworkspace": self.workspace.endpoint,
            "cr": self.acr.endpoint,
            "cms": self.cms.endpoint,
            "oss": self.oss.endpoint.removeprefix("http://"),
        }
        extra = {
            "access_key_id": AK,
            "access_key_secret": SK,
            "region": REGION,
            "protocol": "http",
            "endpoints": endpoints,
            "retry": {"max_attempts": 12, "base_delay": 0.05, "max_delay": 0.5},
        }
        kubeconfig = self.kube.write_kubeconfig(self.root / "kubeconfig.yaml")
        host, _, port = self.registry.host.partition(":")
        registry = {
            "conn_type": "generic",
            "host": host,
            "port": int(port),
            "login": REGISTRY_LOGIN,
            "password": REGISTRY_PASSWORD,
        }
        return {
            "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT": json.dumps({"conn_type": "alibaba_cloud", "extra": extra}),
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
            ),
            f"AIRFLOW_CONN_{REGISTRY_CONN.upper()}": json.dumps(registry),
        }

    def image_build(self, repository: str) -> dict[str, Any]:
        """An ``image_build`` block building with ACR into ``repository`` (one per test counting builds)."""
        if repository not in self.repositories:
            repo = self.acr.add_repository("ml", repository)
            rule = self.acr.add_build_rule(repo.repo_id, image_tag="latest")
            self.repositories[repository] = (repo.repo_id, rule.rule_id)
        repo_id, rule_id = self.repositories[repository]
        return {
            "mode": "acr",
            "repository": f"{self.registry.host}/ml/{repository}",
            "registry_conn_id": REGISTRY_CONN,
            "base_image": "",
            "acr": {"instance_id": self.acr.instance_id, "repo_id": repo_id, "build_rule_id": rule_id},
        }

    def builds(self, repository: str) -> int:
        """Image builds of ``repository`` that ran (a duplicate canceled by its own run is not one)."""
        repo_id = self.repositories[repository][0]
        return sum(
            1 for build in self.acr.builds.values() if build.repo_id == repo_id and build.status != "CANCELED"
        )

    @property
    def environment_dir(self) -> Path:
        """Where the deployment reads its environment files (ALIYUN_TRAINING_ENVIRONMENT_DIR)."""
        return self.root / "config"

    def write_environments(self, repository: str = "train") -> None:
        """The administrator's environment files: both backends build into ``repository``.

        Files are read when a run is configured, so a test may rewrite them between runs.
        """
        write_environment(self.environment_dir, "dlc", self.dlc_environment(repository))
        write_environment(self.environment_dir, "arena", self.arena_environment(repository))

    def dlc_environment(self, repository: str = "train") -> dict[str, Any]:
        """The DLC environment: staging from OSS, an ACR image build, artifacts to OSS."""
        return {
            "quota_id": QUOTA,
            "gpu_type": "GU8TF",
            "zone_id": self.ids.zone_id,
            "role_name": ROLE,
            "workspace_id": WORKSPACE,
            "vpc": {
                "vpc_id": self.ids.vpc_id,
                "switch_id": self.ids.vswitch_id,
                "security_group_id": self.ids.security_group_id,
            },
            "staging": {
                "mode": "direct",
                "source_uri": f"oss://{BUCKET}/datasets/{{dataset}}/{{version}}/",
                "target_root": str(self.cpfs / "datasets" / "cifar10"),
                "cpfs_path": "/datasets/cifar10",
                "file_system_id": "bmcpfs-0123abcd",
                "uri_kind": "bmcpfs",
                "mount_target": "cpfs-0123abcd-vpc-1.cn-wulanchabu.cpfs.aliyuncs.com",
            },
            "image_build": self.image_build(repository),
            # configure validates the spec with the environment's image; the build replaces it.
            "image": f"{self.registry.host}/ml/{repository}:latest",
            "output_uri": OUTPUT_URI,
            "artifact_root": ARTIFACT_ROOT,
        }

    def arena_environment(self, repository: str = "train") -> dict[str, Any]:
        """The ACK environment: the bound CPFS claim, an ACR image, artifacts to OSS."""
        return {
            "namespace": NAMESPACE,
            "data_pvc": DATA_PVC,
            "image_build": self.image_build(repository),
            "image": f"{self.registry.host}/ml/{repository}:latest",
            "output_pvc": OUTPUT_PVC,
            "output_uri": OUTPUT_URI,
            "artifact_root": ARTIFACT_ROOT,
        }

    @property
    def cpfs(self) -> Path:
        return self.root / "cpfs"

    # -- the emulators' hooks ----------------------------------------------------------------------

    def pushed(self, repo: EmulatedRepository, tag: EmulatedTag) -> None:
        """An ACR build's push lands in the instance's registry, where the next run's tag check looks."""
        self.registry.put_manifest(f"{repo.namespace}/{repo.name}", tag.tag, f"sha256:{tag.digest}")

    def dlc_job_created(self, body: dict[str, Any]) -> None:
        self._job_created(body["DisplayName"], body)

    def kube_job_created(self, body: dict[str, Any]) -> None:
        self._job_created(body["metadata"]["name"], body)

    def _job_created(self, name: str, job: dict[str, Any]) -> None:
        if name.startswith(TRAIN_PREFIX):
            write_job_outputs(self.oss, OUTPUT_URI, name)
        elif name.startswith(EVALUATE_PREFIX):
            write_evaluation(self.oss, OUTPUT_URI, name, job_env(job))
        if self.hold is not None:
            self.hold.wait_here(name)

    # -- state the tests set up ----------------------------------------------------------------------

    def put_dataset(self, version: str) -> None:
        """A tiny dataset version in OSS, the layout the training script reads, with its marker."""
        prefix = f"datasets/cifar10/{version}/"
        self.oss.put(BUCKET, prefix + "train.npz", f"train images of {version}".encode() * 64)
        self.oss.put(BUCKET, prefix + "test.npz", f"test images of {version}".encode() * 16)
        self.oss.put(BUCKET, prefix + "_SUCCESS", b"")  # written last: scheduled runs wait for it

    def scripts(self, train: float = 0.5) -> None:
        """How long each kind of job runs; the image and RDMA checks print what real ones print."""
        self.dlc.script_for("cifar10-retrain", dlc_lifetime(0.5))
        self.dlc.script_for(TRAIN_PREFIX, dlc_lifetime(train))
        self.dlc.script_for("cifar10-retrain-verify-image", _with_log(dlc_lifetime(0.2), GOOD_PROBE))
        self.dlc.script_for("cifar10-retrain-check-rdma", _with_log(dlc_lifetime(0.2), ALL_REDUCE_2X8))
        self.kube.script_for("cifar10-retrain", kube_lifetime(0.5))
        self.kube.script_for(TRAIN_PREFIX, kube_lifetime(train))
        self.kube.script_for("cifar10-retrain-verify-image", kube_lifetime(0.2, GOOD_PROBE))
        self.kube.script_for("cifar10-retrain-check-rdma", kube_lifetime(0.2, IB_WRITE_BW_SERVER))

    def faults(self, rate: float, seed: int = 7) -> None:
        """``rate`` of every Alibaba Cloud API answer is a throttling or 5xx error (0 turns them off)."""
        half = rate / 2
        for seed_offset, emulator in enumerate(
            (self.network, self.studio, self.ram, self.dlc, self.workspace, self.acr)
        ):
            emulator.faults = FaultPlan(throttle_rate=half, unavailable_rate=half, seed=seed + seed_offset)
        self.oss.faults = OssFaultPlan(unavailable_rate=rate, seed=seed)

    def creates(self, prefix: str = TRAIN_PREFIX) -> list[dict[str, Any]]:
        """CreateJob bodies (answered or not) whose DisplayName starts with ``prefix``."""
        return [
            r.body
            for r in self.dlc.requests_for("CreateJob")
            if not r.fault and r.body["DisplayName"].startswith(prefix)
        ]

    def kube_creates(self, prefix: str = TRAIN_PREFIX) -> list[dict[str, Any]]:
        return [
            r.body
            for r in self.kube.requests
            if r.method == "POST"
            and r.path.endswith("/pytorchjobs")
            and r.body["metadata"]["name"].startswith(prefix)
        ]

    def dlc_job(self, display_name: str) -> EmulatedJob:
        return next(job for job in self.dlc.jobs.values() if job.display_name == display_name)

    def finish_soon(self, display_name: str) -> None:
        """The DLC job under ``display_name`` stops running a few seconds from now, successfully."""
        job = self.dlc_job(display_name)
        queued = sum(seconds for status, seconds in job.script.phases if status != "Running")
        job.script = dlc_lifetime(running=self.dlc.clock() - job.created_at - queued + 3.0)

    def polls(self, job_id: str) -> int:
        """Answered GetJob requests for ``job_id``: the operator's before it defers, then the trigger's."""
        return sum(
            1 for r in self.dlc.requests_for("GetJob") if not r.fault and r.path.endswith(f"/{job_id}")
        )

    def stops(self) -> int:
        return sum(1 for r in self.dlc.requests_for("StopJob") if not r.fault)

    def artifact_manifests(self) -> list[dict[str, Any]]:
        prefix = ARTIFACT_ROOT.removeprefix(f"oss://{BUCKET}/")
        keys = [key for key in self.oss.keys(BUCKET, prefix) if key.endswith("/manifest.json")]
        return [json.loads(self.oss.get(BUCKET, key)) for key in keys]


class Hold:
    """Keeps the answer to one create request back until released: the caller sees a lost answer."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.arrived = threading.Event()
        self.release = threading.Event()

    def wait_here(self, name: str) -> None:
        if name.startswith(self.prefix) and not self.arrived.is_set():
            self.arrived.set()
            self.release.wait(timeout=300)


def _with_log(script: JobScript, lines: list[str]) -> JobScript:
    return JobScript(phases=script.phases, log_lines=lines)


@contextlib.contextmanager
def emulated_account(root: Path) -> Iterator[Account]:
    keys = {AK: SK}
    with (
        NetworkEmulator(keys) as network,
        PaiStudioEmulator(keys) as studio,
        RamEmulator(keys) as ram,
        DlcEmulator(keys) as dlc,
        AIWorkspaceEmulator(keys) as workspace,
        OssEmulator(keys, region=REGION) as oss,
        RegistryEmulator(users={REGISTRY_LOGIN: REGISTRY_PASSWORD}) as registry,
        KubernetesFake() as kube,
        CloudMonitorEmulator(keys, region=REGION) as cms,
        AcrEmulator(
            keys, registry=registry.host, pending_seconds=0.1, step_seconds=0.02, push_seconds=0.1
        ) as acr,
    ):
        ids = network.standard()
        studio.add_quota(QUOTA, resource_type="Lingjun", gpu_type="GU8TF", allocatable_gpus=64)
        ram.add_role(ROLE)
        policy = json.loads(POLICY_FILE.read_text())["policy"]
        ram.attach_policy(ROLE, "AliyunPAIDLCDefaultRolePolicy", policy)
        oss.create_bucket(BUCKET)
        account = Account(network, studio, ram, dlc, workspace, oss, acr, registry, kube, ids, root, cms)
        acr.on_push = account.pushed
        dlc.on_create = account.dlc_job_created
        kube.on_create = account.kube_job_created
        _claims(kube, root / "setup-kubeconfig.yaml")
        account.scripts()
        yield account


def _claims(kube: KubernetesFake, kubeconfig: Path) -> None:
    """The dataset claim (CPFS) and the output claim (OSS), each bound to its static PV."""
    from kubernetes import client

    core = client.CoreV1Api(client.ApiClient(kube_configuration(kube.write_kubeconfig(kubeconfig))))
    core.create_persistent_volume(cpfs_volume(DATA_PVC))
    core.create_persistent_volume(oss_volume(OUTPUT_PVC, OUTPUT_URI, REGION))
    for claim in (DATA_PVC, OUTPUT_PVC):
        core.create_namespaced_persistent_volume_claim(NAMESPACE, bound_claim(claim))
