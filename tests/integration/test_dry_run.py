"""The dry run: the README's commands as written, requests the platforms accept, and nothing but reads."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from aliyun_training.cli import main
from aliyun_training.operators.training import TrainingJobOperator
from aliyun_training.plan.models import RunPlan
from aliyun_training.plan.render_html import render_html
from aliyun_training.plan.requests import job_requests, planned_image, predicted_staging, training_spec
from aliyun_training.validation import validate_record
from tests.operator_harness import task_context

PROJECT_DIR = Path(__file__).resolve().parents[2]
README = PROJECT_DIR / "README.md"
COMMAND_PREFIX = "PYTHONPATH=plugins .venv/bin/python -m aliyun_training plan "


#: What the README's local dry run sets first: the local root ``make demo`` filled.
DEMO_LOCAL_ROOT = "ALIYUN_TRAINING_LOCAL_ROOT=.demo "


def readme_dry_runs() -> list[str]:
    """The dry-run command lines of the README as a reader copies them, less the local root the local
    one sets first (each test sets its own)."""
    lines = [line.removeprefix(DEMO_LOCAL_ROOT) for line in README.read_text().splitlines()]
    return [line for line in lines if line.startswith(COMMAND_PREFIX)]


def printed(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, output: str
) -> str:
    """Run a README command line with ``--format output`` in this process, from the project root;
    what it printed on stdout."""
    monkeypatch.chdir(PROJECT_DIR)
    argv = [*shlex.split(command.removeprefix(COMMAND_PREFIX.removesuffix("plan "))), "--format", output]
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def dry_run(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Run a README command line as ``--format json`` and parse its stdout."""
    return json.loads(printed(command, capsys, monkeypatch, "json"))


#: The tasks after training (the evaluation job, the model registry's calls): their own tests
#: (test_dry_run_rendering.py) check them; these tests check the stages up to the training job.
AFTER_TRAINING = frozenset({"evaluate", "publish_artifacts", "promote"})


def up_to_training(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's requests up to the training job's."""
    return [r for r in document["requests"] if r["task"] not in AFTER_TRAINING]


def actions(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["task"], r["service"], r["action"]) for r in up_to_training(document)]


def test_the_readme_shows_a_dry_run_for_every_backend_and_one_that_stages_and_builds() -> None:
    commands = readme_dry_runs()

    backends = [re.search(r"--backend (\w+)", command).group(1) for command in commands]  # type: ignore[union-attr]
    assert set(backends) == {"local", "dlc", "arena"}
    assert all(command.endswith("--no-preflight") for command in commands)
    assert any("staging" in command for command in commands)
    (local,) = [
        line for line in README.read_text().splitlines() if f"{COMMAND_PREFIX}--backend local" in line
    ]
    assert local.startswith(DEMO_LOCAL_ROOT + COMMAND_PREFIX), "the version make demo made is where it looks"


def test_without_a_version_the_dry_run_takes_the_newest_landed_one_and_needs_its_listing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the form's empty field does; without preflight nothing lists the source, so it must be named."""
    for version in ("2026-11-15", "2026-11-22", "2026-11-29"):
        landed = tmp_path / "object-store" / "cifar10" / version
        landed.mkdir(parents=True)
        if version != "2026-11-29":
            (landed / "_SUCCESS").touch()
    monkeypatch.setenv("ALIYUN_TRAINING_LOCAL_ROOT", str(tmp_path))
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]
    unversioned = command.replace(" --dataset-version 2026-11-22", "")

    document = dry_run(unversioned.removesuffix(" --no-preflight"), capsys, monkeypatch)
    assert document["dataset_version"] == "2026-11-22", "the 29th's upload has no marker yet"

    monkeypatch.chdir(PROJECT_DIR)
    assert main(shlex.split(unversioned.removeprefix(COMMAND_PREFIX.removesuffix("plan ")))) == 2
    assert "--dataset-version: the newest landed version is found by listing" in capsys.readouterr().err


@pytest.mark.slow
def test_the_local_dry_run_runs_as_a_module_and_prints_only_its_json(tmp_path: Path) -> None:
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]
    env = {**os.environ, "PYTHONPATH": "plugins", "ALIYUN_TRAINING_LOCAL_ROOT": str(tmp_path)}
    argv = [sys.executable, *shlex.split(command.removeprefix("PYTHONPATH=plugins .venv/bin/python"))]

    done = subprocess.run(
        [*argv, "--format", "json"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert actions(document) == [
        ("stage_dataset", "worker", "copy and publish"),
        ("train", "local", "start processes"),
    ]
    (train,) = [r["body"] for r in up_to_training(document) if r["task"] == "train"]
    assert train["env"]["DATA_DIR"] == f"{tmp_path}/cpfs/datasets/cifar10/2026-11-22"
    assert not (tmp_path / "cpfs").exists(), "a dry run copies nothing"
    assert document["checks"]["preflight"] == {"skipped": "not checked: the dry run ran without preflight"}


@pytest.mark.slow
def test_with_its_preflight_the_local_dry_run_prints_only_its_json_and_logs_to_stderr(tmp_path: Path) -> None:
    (command,) = [c for c in readme_dry_runs() if "--backend local" in c]
    generator = PROJECT_DIR / "include" / "training" / "make_synthetic_cifar10.py"
    version = tmp_path / "object-store" / "cifar10" / "2026-11-22"
    subprocess.run(
        [sys.executable, str(generator), "--out", str(version), "--train", "8", "--test", "4"], check=True
    )
    env = {**os.environ, "PYTHONPATH": "plugins", "ALIYUN_TRAINING_LOCAL_ROOT": str(tmp_path)}
    argv = [sys.executable, *shlex.split(command.removeprefix("PYTHONPATH=plugins .venv/bin/python"))]
    argv.remove("--no-preflight")

    done = subprocess.run(
        [*argv, "--format", "json"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    checks = {f["check"]: f["verdict"] for f in document["checks"]["preflight"]["findings"]}
    assert checks["cpus"] == "PASS"
    assert done.stderr.count("Preflight machine:") == 1, "the preflight's table is printed once, on stderr"
    assert "outside of the Task Runner" not in done.stderr, "no operator is executed outside a task"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("environment", "connection", "checks"),
    [
        ("examples/dlc.json", "alibaba_cloud_default", {"network", "quota", "dlc_access", "ram_role"}),
        ("examples/arena.json", "kubernetes_default", {"pvc"}),
    ],
)
def test_a_dry_run_with_its_preflight_and_no_connection_fails_the_checks_naming_it(
    environment: str,
    connection: str,
    checks: set[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    (command,) = [c for c in readme_dry_runs() if f"{environment} " in c]
    for name in ("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", "AIRFLOW_CONN_KUBERNETES_DEFAULT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config to fall back on

    document = dry_run(command.removesuffix(" --no-preflight"), capsys, monkeypatch)

    failed = {f["check"]: f for f in document["checks"]["preflight"]["findings"] if f["verdict"] == "FAIL"}
    assert set(failed) == checks
    for finding in failed.values():
        assert f"connection '{connection}'" in finding["found"]
        assert (
            f"AIRFLOW_CONN_{connection.upper()}" in finding["fix"] and "Admin > Connections" in finding["fix"]
        )


def test_a_staging_dry_run_with_its_preflight_and_no_connection_exits_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version is looked up in the source before any check: with no connection to list it, the
    dry run stops with the connection and how to define it, not a traceback."""
    (command,) = [c for c in readme_dry_runs() if "examples/dlc-staging.json " in c]
    monkeypatch.delenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", raising=False)
    monkeypatch.chdir(PROJECT_DIR)
    argv = shlex.split(
        command.removeprefix(COMMAND_PREFIX.removesuffix("plan ")).removesuffix(" --no-preflight")
    )

    status = main(argv)

    error = capsys.readouterr().err
    assert status == 2
    assert "alibaba_cloud_conn_id: cannot list the versions in oss://" in error
    assert "AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT" in error and "Traceback" not in error


def test_an_arena_dry_run_renders_the_job_arena_would_create_and_nothing_else(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/arena.json" in c]

    document = dry_run(command, capsys, monkeypatch)

    assert [a for _, _, a in actions(document)] == ["create PyTorchJob", "create ConfigMap"] * 3
    assert [t for t, _, _ in actions(document)][::2] == ["verify_image", "check_rdma", "train"]
    job = up_to_training(document)[-2]["body"]
    assert job["metadata"]["namespace"] == "training"
    assert [job["task"] for job in document["cost"]["jobs"]] == [
        "verify_image",
        "check_rdma",
        "train",
        "evaluate",
    ]
    assert document["gpu_hour_ceiling"] == document["cost"]["gpu_hours"] == 65.5


def test_an_arena_dry_run_with_staging_renders_the_pod_the_volumes_and_the_kaniko_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/arena-staging.json" in c]

    document = dry_run(command, capsys, monkeypatch)

    assert actions(document)[:5] == [
        ("stage_dataset", "kubernetes", "create Pod"),
        ("stage_dataset", "kubernetes", "create PersistentVolume"),
        ("stage_dataset", "kubernetes", "create PersistentVolumeClaim"),
        ("build_image", "kubernetes", "create ConfigMap"),
        ("build_image", "kubernetes", "create Pod"),
    ]
    claim = up_to_training(document)[2]["body"]["metadata"]["name"]
    train = up_to_training(document)[-2]["body"]
    volumes = train["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    assert {"name": claim, "persistentVolumeClaim": {"claimName": claim}} in volumes
    image = document["plan"]["image"]
    containers = train["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert containers[0]["image"] == f"{image['repository']}:{image['tag']}"


@pytest.mark.slow
def test_the_arena_dry_runs_requests_are_accepted_by_the_kubernetes_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every manifest a dry run shows is one the API server admits (schema, names, namespaces)."""
    from kubernetes import client

    from fakes.kube import core, kubernetes_fake

    (command,) = [c for c in readme_dry_runs() if "examples/arena-staging.json" in c]
    document = dry_run(command, capsys, monkeypatch)
    with kubernetes_fake(tmp_path, monkeypatch) as fake:
        api = core()
        custom = client.CustomObjectsApi(api.api_client)
        for request in up_to_training(document):
            body, kind = request["body"], request["action"].removeprefix("create ")
            namespace = body["metadata"].get("namespace", "training")
            if kind == "PyTorchJob":
                group, version = body["apiVersion"].split("/")
                custom.create_namespaced_custom_object(group, version, namespace, "pytorchjobs", body)
            elif kind == "ConfigMap":
                api.create_namespaced_config_map(namespace, body)
            elif kind == "Pod":
                api.create_namespaced_pod(namespace, body)
            elif kind == "PersistentVolume":
                api.create_persistent_volume(body)
            else:
                assert kind == "PersistentVolumeClaim", kind
                api.create_namespaced_persistent_volume_claim(namespace, body)
        created = [r for r in fake.requests if r.method == "POST"]
    assert len(created) == len(up_to_training(document))
    assert all(200 <= r.status < 300 for r in created), [(r.path, r.status) for r in created]


#: The SDK model of each request a DLC dry run shows: its body must be that model's whole map.
SDK_MODELS = {
    "CreateJob": ("alibabacloud_pai_dlc20201203.models", "CreateJobRequest"),
    "CreateDataFlowTask": ("alibabacloud_nas20170626.models", "CreateDataFlowTaskRequest"),
    "CreateDataset": ("alibabacloud_aiworkspace20210204.models", "CreateDatasetRequest"),
    "CreateDatasetVersion": ("alibabacloud_aiworkspace20210204.models", "CreateDatasetVersionRequest"),
    "UpdateRepoBuildRule": ("alibabacloud_cr20181201.models", "UpdateRepoBuildRuleRequest"),
    "CreateBuildRecordByRule": ("alibabacloud_cr20181201.models", "CreateBuildRecordByRuleRequest"),
}


def round_trips(action: str, body: dict[str, Any]) -> bool:
    """Whether the SDK model of ``action`` reads every key of ``body`` back: none unknown, none lost."""
    import importlib

    module, name = SDK_MODELS[action]
    model = getattr(importlib.import_module(module), name)
    return model().from_map(body).to_map() == body


def test_a_dlc_dry_run_shows_createjob_bodies_the_sdk_reads_back_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json" in c]

    document = dry_run(command, capsys, monkeypatch)

    assert actions(document) == [
        ("verify_image", "dlc", "CreateJob"),
        ("check_rdma", "dlc", "CreateJob"),
        ("train", "dlc", "CreateJob"),
    ]
    for request in up_to_training(document):
        assert round_trips("CreateJob", request["body"]), request["task"]
    verify, check, train = (r["body"] for r in up_to_training(document))
    assert [(s["Type"], s["PodCount"]) for s in verify["JobSpecs"]] == [("Master", 1)]
    assert check["JobType"] == "MPIJob" and "all_reduce_perf" in check["UserCommand"]
    assert (
        train["ResourceId"] == "quota-example0001"
        and train["Envs"]["DATA_DIR"] == "/mnt/data/cifar10/2026-11-22"
    )
    assert train["UserVpc"]["ExtendedCIDRs"] == ["192.168.0.0/16"]


def test_the_cost_ceiling_of_a_2x8_gpu_dlc_run_is_the_sum_of_every_try_of_every_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two retries of each task (the pipeline's and recovery's default), the image check (1 GPU,
    30 min), the RDMA bandwidth check (both nodes, 20 min) and the training job (60 min)."""
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json" in c]

    document = dry_run(command, capsys, monkeypatch)

    jobs = {job["task"]: job for job in document["cost"]["jobs"]}
    sizes = {
        task: (j["nodes"], j["gpus_per_node"], j["timeout_minutes"], j["tries"]) for task, j in jobs.items()
    }
    assert sizes == {
        "verify_image": (1, 1, 30, 3),
        "check_rdma": (2, 8, 20, 3),
        "train": (2, 8, 60, 3),
        "evaluate": (1, 0, 60, 3),
    }
    assert {task: j["gpu_hours"] for task, j in jobs.items()} == {
        "verify_image": 1 * 1 * 0.5 * 3,
        "check_rdma": 2 * 8 * 20 / 60 * 3,
        "train": 2 * 8 * 1 * 3,
        "evaluate": 0.0,
    }
    assert document["gpu_hour_ceiling"] == document["cost"]["gpu_hours"] == 1.5 + 16 + 48


def dlc_example_with(tmp_path: Path, **settings: Any) -> str:
    """The README's DLC dry run on a copy of its example environment file with ``settings`` added."""
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json" in c]
    example = "include/config/examples/dlc.json"
    changed = tmp_path / "dlc.json"
    changed.write_text(json.dumps({**json.loads((PROJECT_DIR / example).read_text()), **settings}))
    return command.replace(example, str(changed))


def test_with_a_price_per_gpu_hour_the_ceiling_is_given_in_money_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    command = dlc_example_with(tmp_path, price_per_gpu_hour=30.5, currency="USD")

    document = dry_run(command, capsys, monkeypatch)

    cost = document["cost"]
    assert (cost["gpu_hours"], cost["price_per_gpu_hour"], cost["currency"]) == (65.5, 30.5, "USD")
    assert cost["money"] == round(65.5 * 30.5, 2)
    assert "at most 65.5 GPU-hours, 1997.75 USD at 30.5 per GPU-hour" in render_html(document)


def test_a_price_that_is_not_a_positive_number_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    command = dlc_example_with(tmp_path, price_per_gpu_hour=0)
    monkeypatch.chdir(PROJECT_DIR)

    assert main(shlex.split(command.removeprefix(COMMAND_PREFIX.removesuffix("plan ")))) == 2
    assert "price_per_gpu_hour" in capsys.readouterr().err


def test_the_runs_gpu_hour_budget_caps_the_training_jobs_share_of_the_ceiling(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json" in c]

    document = dry_run(
        command.replace('"gpus_per_node": 8}', '"gpus_per_node": 8, "max_gpu_hours": 20}'),
        capsys,
        monkeypatch,
    )

    (train,) = [job for job in document["cost"]["jobs"] if job["task"] == "train"]
    assert (train["task"], train["gpu_hours"], train["capped_by"]) == ("train", 20, "max_gpu_hours")
    assert document["gpu_hour_ceiling"] == 1.5 + 16 + 20


def test_a_dlc_dry_run_with_staging_and_a_build_shows_each_request_the_sdks_read_back_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (command,) = [c for c in readme_dry_runs() if "examples/dlc-staging.json" in c]

    document = dry_run(command, capsys, monkeypatch)

    assert [a for _, _, a in actions(document)] == [
        "CreateDataFlowTask",
        "CreateDataset",
        "CreateDatasetVersion",
        "UpdateRepoBuildRule",
        "CreateBuildRecordByRule",
        "CreateJob",
        "CreateJob",
        "CreateJob",
    ]
    for request in up_to_training(document):
        assert round_trips(request["action"], request["body"]), request["action"]
    image = document["plan"]["image"]
    train = up_to_training(document)[-1]["body"]
    assert {s["Image"] for s in train["JobSpecs"]} == {f"{image['repository']}:{image['tag']}"}
    assert train["Envs"]["DATA_DIR"] == "/mnt/data/cifar10", (
        "the staged version is mounted as its own dataset"
    )
    assert up_to_training(document)[1]["body"]["Uri"].startswith("bmcpfs://cpfs-example0001-vpc-example.")


@pytest.mark.parametrize(
    ("output", "named"),
    [
        ("json", "<password of connection private_registry>"),
        ("text", "<password of connection private_registry>"),
        ("html", "&lt;password of connection private_registry&gt;"),
    ],
)
def test_a_dry_run_shows_no_secret(
    output: str,
    named: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registry connection's password is named, never read: the dry run has no secret to show."""
    environment = json.loads((PROJECT_DIR / "include/config/examples/dlc.json").read_text())
    path = tmp_path / "dlc.json"
    path.write_text(json.dumps({**environment, "image_registry_conn_id": "private_registry"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_PRIVATE_REGISTRY",
        json.dumps({"conn_type": "generic", "host": "r.example.com", "login": "u", "password": "s3cr3t-pw"}),
    )
    command = f"{COMMAND_PREFIX}--backend dlc --environment {path} --dataset-version v1 --no-preflight"

    out = printed(command, capsys, monkeypatch, output)

    assert "s3cr3t-pw" not in out and named in out


def test_params_that_are_not_a_json_object_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--backend", "local", "--dataset-version", "v1", "--no-preflight", "--params", "[1, 2]"]

    assert main(argv) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: --params: a JSON list, not an object (fix: give the trigger-form")


IMAGENET = "pipelines/imagenet_resnet.yaml"


def _imagenet_dry_run(
    backend: str, environment: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    params = json.dumps({"framework": "mpi", "nodes": 2, "gpus_per_node": 8})
    command = (
        f"{COMMAND_PREFIX}--pipeline {IMAGENET} --backend {backend} --environment {environment} "
        f"--dataset-version 2026-11-01 --params '{params}' --no-preflight"
    )
    return dry_run(command, capsys, monkeypatch)


def test_the_imagenet_dry_run_on_ack_shows_the_prepare_job_then_the_mpijob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = json.loads((PROJECT_DIR / "include/config/examples/arena-staging.json").read_text())
    environment = tmp_path / "arena.json"
    environment.write_text(json.dumps({**shipped, "data_pvc": "cpfs-raw", "mount_path": "/mnt/raw"}))

    document = _imagenet_dry_run("arena", environment, capsys, monkeypatch)

    tasks = [task for task, _, _ in actions(document)]
    assert tasks.index("prepare_dataset") < tasks.index("stage_dataset") < tasks.index("train")
    (prepare,) = [
        r for r in up_to_training(document) if r["task"] == "prepare_dataset" and "Job" in r["action"]
    ]
    assert prepare["action"] == "create PyTorchJob" and "skipped when" in prepare["note"]
    master = prepare["body"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert {"name": "RAW_DIR", "value": "/mnt/raw/2026-11-01"} in master["env"], "on the dataset claim"
    assert "prepare_shards.py" in " ".join(master["command"] + master.get("args", []))
    (train,) = [r for r in up_to_training(document) if r["task"] == "train" and "Job" in r["action"]]
    assert train["action"] == "create MPIJob"
    launcher = train["body"]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "mpirun --allow-run-as-root -np 16 -npernode 8" in " ".join(
        launcher["command"] + launcher.get("args", [])
    )
    staged = document["plan"]["staging"]["source_uri"]
    assert staged.startswith("oss://example-bucket/outputs/cifar10/prepared/imagenet-shards/2026-11-01.")


def test_the_imagenet_dry_run_on_dlc_mounts_the_raw_version_and_submits_an_mpijob(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = PROJECT_DIR / "include/config/examples/dlc-staging.json"

    document = _imagenet_dry_run("dlc", environment, capsys, monkeypatch)

    jobs = {r["task"]: r["body"] for r in up_to_training(document) if r["action"] == "CreateJob"}
    assert jobs["train"]["JobType"] == "MPIJob" and jobs["prepare_dataset"]["JobType"] == "PyTorchJob"
    (raw,) = [s for s in jobs["prepare_dataset"]["DataSources"] if s["MountPath"] == "/mnt/raw"]
    assert raw["Uri"].endswith("/raw/imagenet/2026-11-01/") and raw["MountAccess"] == "RO"
    assert jobs["prepare_dataset"]["Envs"]["RAW_DIR"] == "/mnt/raw"
    for request in up_to_training(document):
        assert round_trips(request["action"], request["body"]), request["action"]


def test_the_train_task_names_its_checkpoints_by_the_version_the_dry_run_shows_for_a_fixed_dataset(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/dlc.json mounts a fixed dataset (no staging task, so no staged record): the train
    task reads the run plan's version, as the dry run does, not "unversioned"."""
    (command,) = [c for c in readme_dry_runs() if "examples/dlc.json" in c]
    document = dry_run(command, capsys, monkeypatch)
    [train] = [r["body"] for r in up_to_training(document) if r["task"] == "train"]
    op = TrainingJobOperator(
        task_id="train", job=document["plan"]["job"], planned_dataset=document["plan"]["dataset"]
    )

    spec, _, _ = op._prepare(task_context(), announce=False)

    planned = PurePosixPath(train["Envs"]["CHECKPOINT_DIR"]).name
    sent = PurePosixPath(spec.env["CHECKPOINT_DIR"]).name
    assert planned.startswith("2026-11-22-") and sent.startswith("2026-11-22-"), (planned, sent)
    assert spec.env["TRAINING_ATTEMPT"] == train["Envs"]["TRAINING_ATTEMPT"] == "1"


@pytest.mark.parametrize(
    "environment", ["examples/dlc.json", "examples/arena.json", "examples/arena-staging.json"]
)
def test_the_dry_run_renders_the_job_the_train_task_sends_on_its_first_try(
    environment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One step makes a try's job (``JobPlan.for_try``) and the backend renders it: the dry run's
    train requests are the operator's first try, but for its owner (tags, annotations) which only a
    task instance has."""
    (command,) = [c for c in readme_dry_runs() if f"{environment} " in c]
    document = dry_run(command, capsys, monkeypatch)
    plan = validate_record(RunPlan, document["plan"])
    image = planned_image(plan.image)
    staged = predicted_staging(plan.staging) if plan.staging else None
    op = TrainingJobOperator(
        task_id="train",
        job=document["plan"]["job"],
        dataset=staged.model_dump(mode="json") if staged else None,
        planned_dataset=document["plan"]["dataset"],
        image=image,
    )

    spec, backend, name = op._prepare(task_context(), announce=False)

    assert spec.owner is not None
    sent = backend.planned_requests(spec.model_copy(update={"owner": None}), name)
    shown = job_requests(plan.job, training_spec(plan, image), name, "train", plan.dataset.version)
    assert [(r.service, r.action, r.body) for r in shown] == [(s.service, s.action, s.body) for s in sent]
    assert len(shown) >= 1 and name in json.dumps(shown[0].body)
