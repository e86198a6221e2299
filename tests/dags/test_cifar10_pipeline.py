"""The whole retraining DAG through dag.test(): real torchrun locally, emulated DLC, ACK and OSS."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pendulum
import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamValidationError

from aliyun_training.image.jobs import check_command
from aliyun_training.pages.urls import pipeline_page, plan_page, report_page
from aliyun_training.plan.render_html import render_html
from fakes.cloud import (
    AK,
    BUCKET,
    QUOTA,
    REGION,
    ROLE,
    SK,
    JobOutputs,
    emulated_cloud,
    use_alibaba_connection,
)
from fakes.dlc import JobScript
from fakes.environment_files import use_environments
from fakes.kube import bound_claim, cpfs_volume, kube_configuration, oss_volume
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from fakes.oss import OssEmulator
from tests.dags.asset_events import asset_event_extras
from tests.pages_client import pages_client

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.slow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "training_pipelines.py"
VERSION = "2026-11-22"
DATA = Path(__file__).resolve().parents[1] / "data"
GOOD_PROBE = (DATA / "probe" / "verify_pod.log").read_text().splitlines()
ALL_REDUCE_2X8 = (DATA / "rdma" / "all_reduce_perf_2x8.txt").read_text().splitlines()
IB_WRITE_BW_SERVER = (DATA / "rdma" / "ib_write_bw_server.txt").read_text().splitlines()
#: The OSS location cloud jobs see mounted at output_root, and where artifact sets go.
OUTPUT_URI = f"oss://{BUCKET}/outputs/cifar10/"
ARTIFACT_ROOT = f"oss://{BUCKET}/models/"


@pytest.fixture
def dag(airflow_db: Path):
    dag = DagBag(dag_folder=str(DAG_FILE)).get_dag("cifar10_retrain")
    # The emulated jobs end within a second: poll them that often, not at the DAG's cloud pace.
    polling = [task for task in dag.tasks if hasattr(task, "poll_interval")]
    assert polling, "the DAG's deferring tasks no longer take poll_interval"
    for task in polling:
        task.poll_interval = 0.1
    return dag


def test_a_tiny_run_trains_on_two_nodes_and_publishes_a_manifest_and_asset_event(
    dag, local_root: Path, make_dataset: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    make_dataset(VERSION)

    run = dag.test(
        logical_date=pendulum.datetime(2026, 11, 22, tz="UTC"),
        run_conf={"nodes": 2, "gpus_per_node": 0, "epochs": 1, "batch_size": 32},
    )

    assert run.state == "success"
    # Records of the branches a local run skips (image checks, staging) are never asked for.
    assert "XCom not found" not in capfd.readouterr().out
    manifests = list((local_root / "artifacts" / "cifar10" / VERSION).glob("*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["dataset"]["version"] == VERSION
    assert manifest["job"]["status"] == "Succeeded" and manifest["job"]["node_hours"] > 0
    assert manifest["runtime"]["torch"].startswith("2.13.0")
    assert len(manifest["metrics"]["train_loss"]) == 1
    [checkpoint] = (manifests[0].parent / "checkpoints").glob(f"{VERSION}-*/epoch-0001")
    assert {path.name for path in checkpoint.iterdir()} == {"state.pt", "COMPLETE"}
    assert [a["decision"] for a in manifest["attempts"]] == ["succeeded"]
    assert "<polyline" in (manifests[0].parent / "report.html").read_text()
    assert asset_event_extras("cifar10_model")[-1]["manifest_uri"] == str(manifests[0])
    # The provider's pages: the pipeline lists the run, whose report is the published file.
    pages = pages_client()
    listing = pages.get(pipeline_page("cifar10_retrain"))
    assert listing.status_code == 200 and run.run_id in listing.text and f"dataset {VERSION}<" in listing.text
    assert report_page("cifar10_retrain", run.run_id).replace("&", "&amp;") in listing.text
    answer = pages.get(report_page("cifar10_retrain", run.run_id))
    assert answer.status_code == 200
    assert answer.text == (manifests[0].parent / "report.html").read_text()


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"epochs": -1}, "epochs"),
        ({"dataset_version": "../x"}, "dataset_version"),
        ({"dataset_version": "v1\n"}, "dataset_version"),
        ({"image": "registry.example.com/train:1\n"}, "image"),
        ({"backend_overrides": {"namespace": "kube-system"}}, "backend_overrides"),
        ({"backend_overrides": {"priority": 10}}, "backend_overrides"),
    ],
)
def test_invalid_params_fail_the_run_before_any_stage(dag, local_root: Path, conf: dict, field: str) -> None:
    with pytest.raises(ParamValidationError) as rejected:
        dag.test(logical_date=pendulum.datetime(2026, 11, 29, tz="UTC"), run_conf=conf)

    assert field in str(rejected.value)
    assert not (local_root / "cpfs").exists() and not (local_root / "runs").exists()


def test_a_failed_configure_fails_the_report_naming_it_and_nothing_after_runs(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A DLC run on the shipped environment file, whose settings are left blank: configure fails, so the
    checks never run, and the report says so instead of calling them unfinished."""
    use_environments(monkeypatch, local_root / "config")

    run = dag.test(
        logical_date=pendulum.datetime(2026, 11, 29, tz="UTC"),
        run_conf={"backend": "dlc", "nodes": 1, "gpus_per_node": 8},
    )

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    checks = [task for task in states if task.startswith("preflight.check_")]
    assert states["configure"] == "failed" and len(checks) == 5
    assert {states[task] for task in checks} == {"upstream_failed"}
    assert states["preflight.report"] == "failed" and states["route"] == "upstream_failed"
    log = capfd.readouterr().out
    assert "No preflight check ran because configure failed: read the log of configure for the error" in log
    assert "did not finish" not in log


@pytest.mark.parametrize("skip_preflight", [False, True])
def test_checks_that_do_not_run_are_skipped_with_their_reason_and_the_run_goes_on(
    dag, local_root: Path, make_dataset: Callable[..., Path], skip_preflight: bool
) -> None:
    """A local dry run: the cloud groups do not apply, or (skip_preflight) no group runs; the report
    lists them as not applicable, passes, and route runs the dry run's branch."""
    make_dataset(VERSION)

    run = dag.test(
        logical_date=pendulum.datetime(2026, 11, 22, tz="UTC"),
        run_conf={"nodes": 2, "gpus_per_node": 0, "dry_run": True, "skip_preflight": skip_preflight},
    )

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    report = run.get_task_instance("preflight.report").xcom_pull(task_ids="preflight.report")
    document = run.get_task_instance("show_plan").xcom_pull(task_ids="show_plan")
    applies_to = {
        "machine": "local",
        "network": "dlc",
        "quota": "dlc",
        "permissions": "dlc",
        "cluster": "arena",
    }
    skipped = [group for group in applies_to if skip_preflight or group != "machine"]
    assert {group: states[f"preflight.check_{group}"] for group in applies_to} == {
        group: "skipped" if group in skipped else "success" for group in applies_to
    }
    assert states["preflight.report"] == states["route"] == states["show_plan"] == "success"
    assert states["train"] == "skipped"
    assert report["not_applicable"] == [
        {
            "check": f"preflight.check_{group}",
            "reason": f"skipped on request: the run sets skip_preflight, so no {group} check ran"
            if skip_preflight
            else f"{group} checks apply to the {applies_to[group]} backend; this run uses local",
        }
        for group in skipped
    ]
    assert bool(report["findings"]) is not skip_preflight, "the machine checks ran unless skipped"
    assert document["checks"]["preflight"] == report
    # The "Run plan" page is the readable plan of the document show_plan returned.
    page = pages_client().get(plan_page("cifar10_retrain", run.run_id))
    assert page.status_code == 200 and page.text == render_html(document)


def _dlc_settings(ids: Any) -> dict[str, Any]:
    return {
        "quota_id": QUOTA,
        "gpu_type": "GU8TF",
        "image": "registry.example.com/train:1",
        "zone_id": ids.zone_id,
        "role_name": ROLE,
        "vpc": {
            "vpc_id": ids.vpc_id,
            "switch_id": ids.vswitch_id,
            "security_group_id": ids.security_group_id,
        },
        "dataset": {"dataset_id": "d-cifar10", "uri": "", "mount_path": "/mnt/data/cifar10"},
        "output_uri": OUTPUT_URI,
        "artifact_root": ARTIFACT_ROOT,
    }


def _script_dlc_jobs(cloud: Any) -> JobOutputs:
    """The image check jobs print a good probe and all_reduce_perf; the training job writes outputs."""
    cloud.dlc.script_for("cifar10-retrain-verify-image", JobScript(log_lines=GOOD_PROBE))
    cloud.dlc.script_for("cifar10-retrain-check-rdma", JobScript(log_lines=ALL_REDUCE_2X8))
    outputs = JobOutputs(cloud.oss, OUTPUT_URI, "cifar10-retrain-train")
    cloud.dlc.on_create = outputs.on_dlc_create
    return outputs


def test_a_dlc_run_passes_the_preflight_group_waits_for_capacity_submits_and_publishes_from_oss(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cloud(monkeypatch) as cloud:
        ids = cloud.ids
        use_environments(monkeypatch, local_root / "config", dlc=_dlc_settings(ids))
        outputs = _script_dlc_jobs(cloud)

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 15, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 2, "gpus_per_node": 8},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        report = run.get_task_instance("preflight.report").xcom_pull(task_ids="preflight.report")
        verified = run.get_task_instance("verify_image").xcom_pull(task_ids="verify_image")
        bandwidth = run.get_task_instance("check_rdma").xcom_pull(task_ids="check_rdma")
        trained = run.get_task_instance("train").xcom_pull(task_ids="train")
        promoted = run.get_task_instance("promote").xcom_pull(task_ids="promote")
        creates = {
            r.body["DisplayName"].rsplit("-", 1)[0]: r.body for r in cloud.dlc.requests_for("CreateJob")
        }
        manifest_key = f"models/cifar10/2026-11-15/{trained['display_name']}/manifest.json"
        manifest = json.loads(cloud.oss.get(BUCKET, manifest_key))
        # The report on OSS, read by the page through the run's connection, never from the browser.
        report_page_answer = pages_client().get(report_page("cifar10_retrain", run.run_id))
        published_report = cloud.oss.get(BUCKET, manifest_key.replace("manifest.json", "report.html"))
    assert report_page_answer.status_code == 200
    assert report_page_answer.content == published_report and AK not in report_page_answer.text
    # The set on OSS says what promote decided (it was published before), whichever it was: the
    # session's champion may be another test's.
    assert manifest["promotion"]["promoted"] is promoted["promoted"]
    assert manifest["promotion"]["outcome"]["state"] == ("promoted" if promoted["promoted"] else "held")
    verify, check, create = (
        creates[f"cifar10-retrain-{task}"] for task in ("verify-image", "check-rdma", "train")
    )
    assert states == {
        "configure": "success",
        "wait_for_version": "success",
        "preflight.check_machine": "skipped",
        "preflight.check_network": "success",
        "preflight.check_quota": "success",
        "preflight.check_permissions": "success",
        "preflight.check_cluster": "skipped",
        "preflight.report": "success",
        "route": "success",
        "wait_for_capacity": "success",
        "build_image": "success",
        "verify_image": "success",
        "check_rdma": "success",
        "train": "success",
        "stage_dataset": "skipped",
        "training_runtime": "skipped",
        "show_plan": "skipped",
        "evaluate": "success",
        "publish_artifacts": "success",
        "promote": "success",
    }
    assert {f["check"] for f in report["findings"]} >= {"vpc", "snat_entry", "quota_capacity", "ram_role"}
    assert all(f["verdict"] == "PASS" for f in report["findings"])
    assert report["not_applicable"] == [
        {
            "check": "preflight.check_machine",
            "reason": "machine checks apply to the local backend; this run uses dlc",
        },
        {
            "check": "preflight.check_cluster",
            "reason": "cluster checks apply to the arena backend; this run uses dlc",
        },
    ]
    assert create["ResourceId"] == QUOTA and create["JobType"] == "PyTorchJob"
    assert create["UserVpc"]["VpcId"] == ids.vpc_id
    assert create["Envs"]["DATA_DIR"] == "/mnt/data/cifar10/2026-11-15"
    assert create["JobSpecs"][0]["Image"] == "registry.example.com/train:1"
    assert create["UserVpc"]["ExtendedCIDRs"] == ["172.16.0.0/12"], "every CIDR block of the VPC"
    mounted_output = f"oss://{BUCKET}.oss-{REGION}-internal.aliyuncs.com/outputs/cifar10/"
    assert {"Uri": mounted_output, "MountPath": "/mnt/output/cifar10", "MountAccess": "RW"} in create[
        "DataSources"
    ]
    assert verify["UserCommand"].endswith(check_command()) and "base64 -d" in verify["UserCommand"]
    assert [(s["Type"], s["PodCount"]) for s in verify["JobSpecs"]] == [("Master", 1)]
    assert verified["verified"] is True and verified["nccl"] == "2.21.5" and verified["cuda"] == "12.4"
    assert check["JobType"] == "MPIJob" and "all_reduce_perf" in check["UserCommand"]
    assert bandwidth["tool"] == "all_reduce_perf" and bandwidth["transport"] == "ib"
    assert bandwidth["verdict"] in ("PASS", "WARN") and bandwidth["measured_gbps"] > 0
    assert outputs.written == [trained["display_name"]]
    assert trained["output_uri"] == f"{OUTPUT_URI}{trained['display_name']}/"
    assert manifest["job"]["job_id"] == trained["job_id"] and manifest["job"]["backend"] == "dlc"
    assert manifest["dataset"] == {
        "version": "2026-11-15",
        "uri": None,
        "dataset_id": "d-cifar10",
        "mount_path": "/mnt/data/cifar10",
    }
    assert manifest["runtime"]["verified"] is True and manifest["runtime"]["nccl"] == "2.21.5"
    assert manifest["rdma_bandwidth"]["tool"] == "all_reduce_perf"
    assert {f["path"] for f in manifest["files"]} == {"metrics.json", "checkpoints/epoch-0001.pt"}
    event = asset_event_extras("cifar10_model")[-1]
    assert event["job_id"] == trained["job_id"]
    assert event["manifest_uri"] == f"oss://{BUCKET}/{manifest_key}"


def test_a_failing_preflight_stops_the_run_before_staging_or_submitting(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cloud(monkeypatch) as cloud:
        settings = {
            "quota_id": "quota-missing",
            "gpu_type": "GU8TF",
            "image": "registry.example.com/train:1",
        }

        use_environments(monkeypatch, local_root / "config", dlc=settings)

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 15, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 2, "gpus_per_node": 8},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        created = cloud.dlc.count("CreateJob")
    assert states["preflight.report"] == "failed"
    assert states["preflight.check_quota"] == states["preflight.check_network"] == "success"
    assert states["train"] == states["publish_artifacts"] == "upstream_failed" and created == 0


def test_an_arena_run_creates_the_job_on_the_cluster_and_publishes_its_outputs_from_oss(
    dag, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes import client

    with KubernetesFake() as cluster, OssEmulator({AK: SK}, region=REGION) as oss:
        oss.create_bucket(BUCKET)
        use_alibaba_connection(monkeypatch, {"oss": oss.endpoint.removeprefix("http://")}, AK, SK)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
        monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
        core = client.CoreV1Api(client.ApiClient(kube_configuration(kubeconfig)))
        core.create_persistent_volume(cpfs_volume("cpfs-train"))
        core.create_namespaced_persistent_volume_claim("training", bound_claim("cpfs-train"))
        core.create_persistent_volume(oss_volume("oss-outputs", OUTPUT_URI))
        core.create_namespaced_persistent_volume_claim("training", bound_claim("oss-outputs"))
        settings = {
            "image": "registry.example.com/train:1",
            "data_pvc": "cpfs-train",
            "namespace": "training",
            "output_uri": OUTPUT_URI,
            "output_pvc": "oss-outputs",
            "artifact_root": ARTIFACT_ROOT,
        }
        use_environments(monkeypatch, local_root / "config", arena=settings)
        cluster.script_for("cifar10-retrain-verify-image", TrainingScript(log_lines=GOOD_PROBE))
        cluster.script_for("cifar10-retrain-check-rdma", TrainingScript(log_lines=IB_WRITE_BW_SERVER))
        outputs = JobOutputs(oss, OUTPUT_URI, "cifar10-retrain-train", epochs=2)
        cluster.on_create = outputs.on_cr_create

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 8, tz="UTC"),
            run_conf={"backend": "arena", "nodes": 2, "gpus_per_node": 8},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        bandwidth = run.get_task_instance("check_rdma").xcom_pull(task_ids="check_rdma")
        trained = run.get_task_instance("train").xcom_pull(task_ids="train")
        created = [r for r in cluster.requests if r.method == "POST" and r.path.endswith("/pytorchjobs")]
        manifest_key = f"models/cifar10/2026-11-08/{trained['display_name']}/manifest.json"
        manifest = json.loads(oss.get(BUCKET, manifest_key))
    assert states["train"] == "success" and states["preflight.check_cluster"] == "success"
    assert states["preflight.report"] == "success"
    assert states["build_image"] == states["verify_image"] == states["check_rdma"] == "success"
    assert states["stage_dataset"] == states["training_runtime"] == "skipped"
    assert states["publish_artifacts"] == "success"
    assert bandwidth["tool"] == "ib_write_bw" and bandwidth["measured_gbps"] > 0
    jobs = {r.body["metadata"]["name"].rsplit("-", 1)[0]: r.body for r in created}
    check = jobs["cifar10-retrain-check-rdma"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert "ib_write_bw -d mlx5_0 -x 3 -F --report_gbits" in " ".join(check["containers"][0]["command"])
    job = jobs["cifar10-retrain-train"]
    assert job["metadata"]["labels"]["createdBy"] == "PyTorchJob"
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert {"name": "DATA_DIR", "value": "/mnt/data/cifar10/2026-11-08"} in container["env"]
    output_mount = {"name": "oss-outputs", "mountPath": "/mnt/data/outputs/cifar10", "readOnly": False}
    assert output_mount in container["volumeMounts"]
    assert outputs.written == [trained["display_name"]] == [job["metadata"]["name"]]
    assert manifest["job"]["job_id"] == trained["job_id"] and manifest["job"]["backend"] == "arena"
    assert manifest["job"]["output_uri"] == f"{OUTPUT_URI}{trained['display_name']}/"
    assert manifest["dataset"]["version"] == "2026-11-08"
    assert manifest["dataset"]["uri"] == "pvc://cpfs-train"
    assert manifest["metrics"]["epochs"] == 2 and manifest["rdma_bandwidth"]["tool"] == "ib_write_bw"
    assert asset_event_extras("cifar10_model")[-1]["job_id"] == trained["job_id"]


def test_a_cloud_run_without_output_settings_trains_and_skips_publishing_naming_them(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cloud(monkeypatch) as cloud:
        settings = {
            "quota_id": QUOTA,
            "gpu_type": "GU8TF",
            "image": "registry.example.com/train:1",
            "artifact_root": ARTIFACT_ROOT,
        }
        use_environments(monkeypatch, local_root / "config", dlc=settings)
        cloud.dlc.script_for("cifar10-retrain-verify-image", JobScript(log_lines=GOOD_PROBE))

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 1, "gpus_per_node": 8, "skip_preflight": True},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        uploaded = cloud.oss.keys(BUCKET)
    assert states["train"] == "success" and states["publish_artifacts"] == "skipped"
    assert states["evaluate"] == states["promote"] == "skipped", "nothing kept to score or promote"
    assert uploaded == []


def test_a_dry_run_on_ack_shows_its_plan_and_makes_only_read_calls(
    dag, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes import client

    with KubernetesFake() as cluster, OssEmulator({AK: SK}, region=REGION) as oss:
        oss.create_bucket(BUCKET)
        oss.put(BUCKET, f"datasets/cifar10/{VERSION}/train.bin", b"0" * 64)
        oss.put(BUCKET, f"datasets/cifar10/{VERSION}/_SUCCESS", b"")  # landed: a run takes no other
        use_alibaba_connection(monkeypatch, {"oss": oss.endpoint.removeprefix("http://")}, AK, SK)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig.yaml")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
        monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
        core = client.CoreV1Api(client.ApiClient(kube_configuration(kubeconfig)))
        core.create_persistent_volume(cpfs_volume("cpfs-train"))
        core.create_namespaced_persistent_volume_claim("training", bound_claim("cpfs-train"))
        staging = {
            "mode": "direct",
            "source_uri": f"oss://{BUCKET}/datasets/{{dataset}}/{{version}}/",
            "target_root": str(local_root / "cpfs" / "datasets" / "cifar10"),
            "cpfs_path": "/share/datasets/cifar10",
            "server": "cpfs-0123.cn-wulanchabu.cpfs.aliyuncs.com",
        }
        settings = {"image": "registry.example.com/train:1", "namespace": "training", "staging": staging}
        use_environments(monkeypatch, local_root / "config", arena=settings)
        setup_writes = len([r for r in cluster.requests if r.method != "GET"])
        oss_setup = len(oss.records())

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 22, tz="UTC"),
            run_conf={"backend": "arena", "nodes": 2, "gpus_per_node": 8, "dry_run": True},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        document = run.get_task_instance("show_plan").xcom_pull(task_ids="show_plan")
        writes = [(r.method, r.path) for r in cluster.requests if r.method != "GET"][setup_writes:]
        oss_calls = {r.operation for r in oss.records()[oss_setup:]}
    assert states["show_plan"] == "success" and states["preflight.report"] == "success"
    assert {t: states[t] for t in ("stage_dataset", "build_image", "verify_image", "train")} == dict.fromkeys(
        ("stage_dataset", "build_image", "verify_image", "train"), "skipped"
    )
    assert writes == [], "a dry run only reads"
    assert oss_calls <= OSS_READS, oss_calls
    staging_check = document["checks"]["staging"]
    assert staging_check["files_to_copy"] == 2 and staging_check["bytes"] == 64, (
        "train.bin and the empty marker"
    )
    assert [r["action"] for r in document["requests"]][:3] == [
        "copy and publish",
        "create PersistentVolume",
        "create PersistentVolumeClaim",
    ]
    written = list((local_root / "dry-runs" / "cifar10").glob("*/plan.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["requests"] == document["requests"]
    page = (written[0].parent / "plan.html").read_text()
    assert "Nothing was created" in page
    assert f"at most {document['gpu_hour_ceiling']} GPU-hours" in page and "<td>check_rdma</td>" in page
    assert not (local_root / "cpfs" / "datasets" / "cifar10" / VERSION).exists()


def test_a_dry_run_on_dlc_without_its_connection_shows_its_plan_beside_the_failures_and_fails(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form's dry run is how a team sees what a backend would do before its connection exists."""
    with emulated_cloud(monkeypatch) as cloud:
        use_environments(monkeypatch, local_root / "config", dlc=_dlc_settings(cloud.ids))
        monkeypatch.delenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", raising=False)

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 15, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 2, "gpus_per_node": 8, "dry_run": True},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        dlc_calls = list(cloud.dlc.requests)
    assert (states["preflight.report"], states["route"], states["show_plan"]) == (
        "success",
        "success",
        "failed",
    )
    assert run.state == "failed", "the checks failed, so the run did"
    (written,) = (local_root / "dry-runs" / "cifar10").glob("*/plan.json")
    document = json.loads(written.read_text())
    failed = [f for f in document["checks"]["preflight"]["findings"] if f["verdict"] == "FAIL"]
    assert failed and all("connection 'alibaba_cloud_default'" in f["found"] for f in failed)
    assert [r["action"] for r in document["requests"] if r["service"] == "dlc"] == ["CreateJob"] * 4
    page = (written.parent / "plan.html").read_text()
    assert "FAIL" in page and "Nothing was created" in page
    assert dlc_calls == [], "nothing reached the platform without a connection"


#: What a read is, per API style: RPC/ROA actions that describe, get, list or check, and OSS reads.
READ_ACTIONS = ("Describe", "Get", "List", "Check")
OSS_READS = {"ListObjectsV2", "ListObjects", "HeadObject", "GetObject", "GetObjectMeta", "GetBucketInfo"}


def test_a_dry_run_on_dlc_runs_preflight_shows_its_plan_and_makes_only_read_calls(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cloud(monkeypatch) as cloud:
        use_environments(monkeypatch, local_root / "config", dlc=_dlc_settings(cloud.ids))

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 15, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 2, "gpus_per_node": 8, "dry_run": True},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        document = run.get_task_instance("show_plan").xcom_pull(task_ids="show_plan")
        calls = {
            name: {r.action for r in emulator.requests}
            for name, emulator in (
                ("vpc", cloud.network),
                ("paistudio", cloud.studio),
                ("ram", cloud.ram),
                ("dlc", cloud.dlc),
            )
        }
        oss_calls = {r.operation for r in cloud.oss.records()}
    assert states["show_plan"] == states["preflight.report"] == "success"
    skipped = (
        "wait_for_capacity",
        "build_image",
        "verify_image",
        "check_rdma",
        "train",
        "evaluate",
        "publish_artifacts",
        "promote",
    )
    assert {task: states[task] for task in skipped} == dict.fromkeys(skipped, "skipped")
    assert calls["paistudio"] and calls["vpc"] and calls["ram"], "preflight asked every service"
    writes = {
        name: sorted(a for a in actions if not a.startswith(READ_ACTIONS)) for name, actions in calls.items()
    }
    assert writes == {name: [] for name in calls}, "a dry run only reads"
    assert oss_calls <= OSS_READS, oss_calls
    assert [r["action"] for r in document["requests"] if r["service"] == "dlc"] == ["CreateJob"] * 4
    assert {r["service"] for r in document["requests"]} == {"dlc", "mlflow"}, "and the model registry's calls"
    findings = {f["check"]: f["verdict"] for f in document["checks"]["preflight"]["findings"]}
    assert findings["quota_capacity"] == "PASS"
    assert [j["task"] for j in document["cost"]["jobs"]] == [
        "verify_image",
        "check_rdma",
        "train",
        "evaluate",
    ]
    assert document["gpu_hour_ceiling"] == sum(j["gpu_hours"] for j in document["cost"]["jobs"]) == 65.5


def test_every_stage_of_a_dlc_run_uses_the_environments_connection(
    dag, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment whose Alibaba Cloud connection is not the default one: no stage may fall back to it."""
    from fakes.aiworkspace import AIWorkspaceEmulator

    with emulated_cloud(monkeypatch) as cloud, AIWorkspaceEmulator({AK: SK}) as workspace:
        default = json.loads(os.environ.pop("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT"))
        default["extra"]["endpoints"]["aiworkspace"] = workspace.endpoint
        monkeypatch.delenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", raising=False)
        monkeypatch.setenv("AIRFLOW_CONN_ALIYUN_PROD", json.dumps(default))
        for key, data in {"train/0.bin": b"a" * 32, "test/0.bin": b"b" * 16, "_SUCCESS": b""}.items():
            cloud.oss.put(BUCKET, f"datasets/cifar10/2026-11-15/{key}", data)
        staging = {
            "mode": "direct",
            "source_uri": f"oss://{BUCKET}/datasets/{{dataset}}/{{version}}/",
            "target_root": str(local_root / "cpfs" / "datasets" / "cifar10"),
            "cpfs_path": "/datasets/cifar10",
            "uri_kind": "bmcpfs",
            "mount_target": "cpfs-0123abcd-vpc-abcd.cn-wulanchabu.cpfs.aliyuncs.com",
        }
        settings = {
            **_dlc_settings(cloud.ids),
            "alibaba_cloud_conn_id": "aliyun_prod",
            "workspace_id": workspace.default_workspace_id,
            "staging": staging,
        }
        use_environments(monkeypatch, local_root / "config", dlc=settings)
        outputs = _script_dlc_jobs(cloud)

        run = dag.test(
            logical_date=pendulum.datetime(2026, 11, 15, tz="UTC"),
            run_conf={"backend": "dlc", "nodes": 2, "gpus_per_node": 8},
        )

        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        staged = run.get_task_instance("stage_dataset").xcom_pull(task_ids="stage_dataset")
        dataset = workspace.dataset_named("cifar10")
    ran = {task for task, state in states.items() if state == "success"}
    assert ran >= {
        "preflight.check_network",
        "preflight.check_quota",
        "preflight.check_permissions",
        "wait_for_capacity",
        "stage_dataset",
        "verify_image",
        "check_rdma",
        "train",
        "publish_artifacts",
    }, states
    assert dataset is not None and staged["pai_dataset_id"] == dataset.dataset_id
    assert staged["files"] == 3 and outputs.written  # the two files and the completion marker
