"""resolve_run: one typed plan of a run, per backend, from the form and the environment file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aliyun_training.environments import load_environment
from aliyun_training.plan.models import RunPlan
from aliyun_training.plan.requests import training_spec
from aliyun_training.validation import SpecError
from fakes.environment_files import INSTALLATION, resolve_configured

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONFIGURED = {
    "quota_id": "quota1ab2",
    "gpu_type": "GU8TF",
    "image": "registry.example.com/train:1",
    "workspace_id": "ws-9",
    "dataset": {"dataset_id": "d-cifar", "uri": "", "mount_path": "/mnt/data/cifar10"},
}


def resolve(tmp_path: Path, environment: dict[str, Any] | None = None, **form: Any) -> RunPlan:
    return resolve_configured(tmp_path, environment, **form)


def test_a_local_run_trains_on_the_version_named_after_its_date(tmp_path: Path) -> None:
    run = resolve(tmp_path)

    assert run.dataset.version == run.staging.version == "2026-11-22"
    assert (
        run.dataset.source_uri
        == run.staging.source_uri
        == f"file://{tmp_path}/object-store/cifar10/2026-11-22/"
    )
    assert "DATA_DIR" not in run.job.spec.env, "DATA_DIR is set once, when the staged version is mounted"
    assert training_spec(run, None).env["DATA_DIR"] == f"{tmp_path}/cpfs/datasets/cifar10/2026-11-22"
    assert run.job.spec.working_dir == str(PROJECT_DIR / "include" / "training"), "the declared code_dir"
    assert (
        "--nproc_per_node=1 " in run.job.spec.command and "--epochs 1 --batch-size 32" in run.job.spec.command
    )
    assert run.job.output_root == str(tmp_path / "outputs")
    assert RunPlan.model_validate(run.model_dump(mode="json")) == run, (
        "the plan round-trips through XCom JSON"
    )


def test_a_named_version_wins_over_the_run_date(tmp_path: Path) -> None:
    assert resolve(tmp_path, dataset_version="v7").dataset.version == "v7"


def test_a_dlc_run_takes_its_settings_from_the_environment_file_and_the_overrides(tmp_path: Path) -> None:
    run = resolve(tmp_path, backend="dlc", gpus_per_node=8, environment=CONFIGURED)

    spec, dlc_settings = run.job.spec, run.job.backend_config["job_settings"]
    assert (
        dlc_settings["quota_id"] == "quota1ab2" and dlc_settings["gpu_type"] == "GU8TF" and spec.rdma is True
    )
    assert dlc_settings["resource_type"] == "lingjun" and spec.image == "registry.example.com/train:1"
    assert spec.env["DATA_DIR"] == "/mnt/data/cifar10/2026-11-22"
    assert spec.datasets[0].dataset_id == "d-cifar" and spec.datasets[0].uri is None
    assert "--nproc_per_node=8 " in spec.command
    assert run.job.backend_config["workspace_id"] == "ws-9"
    assert run.job.backend_config["vpc"] is None, "an unconfigured VPC is left out, not sent half-empty"
    assert run.job.output_root == "/mnt/output/cifar10"


def test_a_dlc_run_without_a_quota_fails_naming_the_field(tmp_path: Path) -> None:
    overrides = {k: v for k, v in CONFIGURED.items() if k != "quota_id"}

    with pytest.raises(SpecError, match=r"blank: quota_id \(Lingjun resources are used through a quota\)"):
        resolve(tmp_path, backend="dlc", gpus_per_node=8, environment=overrides)


def test_every_blank_required_setting_is_named_at_once(tmp_path: Path) -> None:
    blank = {k: v for k, v in CONFIGURED.items() if k not in ("quota_id", "image")}

    with pytest.raises(SpecError) as dlc:
        resolve(tmp_path, backend="dlc", gpus_per_node=8, environment=blank)
    with pytest.raises(SpecError) as arena:
        resolve(tmp_path, backend="arena", environment={"image": ""})

    assert "blank: image (or an image_build block), quota_id (Lingjun resources" in str(dlc.value)
    assert "blank: image (or an image_build block), data_pvc (or a staging block)" in str(arena.value)


def test_environment_files_report_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_environment(tmp_path / "missing.json", "dlc")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SpecError, match="is not valid JSON"):
        load_environment(broken, "dlc")


def test_blank_values_in_the_environment_mean_not_configured(tmp_path: Path) -> None:
    environment = tmp_path / "dlc.json"
    environment.write_text(
        json.dumps({"quota_id": "", "vpc": {"vpc_id": ""}, "rdma": True, "cpu_per_node": ""})
    )

    loaded = load_environment(environment, "dlc")

    assert (loaded.quota_id, loaded.vpc.vpc_id, loaded.rdma) == (None, None, True)
    assert loaded.cpu_per_node == 8, "a blank setting takes its default"


def test_an_arena_run_mounts_the_configured_pvc_and_takes_cluster_settings(tmp_path: Path) -> None:
    overrides = {"data_pvc": "cpfs-train", "image": "registry.example.com/train:1", "namespace": "ml"}

    run = resolve(tmp_path, backend="arena", gpus_per_node=8, environment=overrides)

    spec = run.job.spec
    assert spec.datasets[0].uri == "pvc://cpfs-train" and spec.datasets[0].mount_path == "/mnt/data/cifar10"
    assert spec.env["DATA_DIR"] == "/mnt/data/cifar10/2026-11-22"
    assert run.job.backend_config["namespace"] == "ml"
    assert (
        run.job.backend_config["rdma_resource"] == "rdma/hca"
        and run.job.backend_config["host_network"] is True
    )


def test_an_arena_run_without_a_pvc_fails_naming_data_pvc(tmp_path: Path) -> None:
    with pytest.raises(
        SpecError, match=r"arena.json leaves required settings blank: data_pvc \(or a staging"
    ):
        resolve(tmp_path, backend="arena", environment={"image": "registry.example.com/train:1"})


REPOSITORY = "ml-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train"
ACR_BUILD = {"instance_id": "cri-abc123", "repo_id": "crr-def456", "build_rule_id": "crbr-789"}


def test_a_cloud_run_carries_the_image_build_and_rdma_check_settings(tmp_path: Path) -> None:
    image_build = {"mode": "acr", "repository": REPOSITORY, "acr": ACR_BUILD}
    overrides = {**CONFIGURED, "image_build": image_build, "rdma_check": {"line_rate_gbps": 400}}

    run = resolve(tmp_path, backend="dlc", gpus_per_node=8, environment=overrides, force_rebuild=True)

    image, check = run.image, run.rdma_check
    assert image is not None and check is not None
    assert (image.mode, image.repository) == ("acr", REPOSITORY)
    assert image.tag and len(image.tag) == 16, "the content-addressed tag is known when the run is planned"
    assert image.builder == {**ACR_BUILD, "alibaba_cloud_conn_id": "alibaba_cloud_default"}
    assert image.build_args == {}
    assert image.fixed == "registry.example.com/train:1" and image.pinned is None
    assert image.force_rebuild is True
    assert (check.line_rate_gbps, check.pass_ratio, check.skip) == (400.0, 0.9, False)


def test_a_local_run_has_no_image_stages(tmp_path: Path) -> None:
    run = resolve(tmp_path)
    assert run.image is None and run.rdma_check is None


@pytest.mark.parametrize(
    ("backend", "image_build", "message"),
    [
        (
            "dlc",
            {"mode": "kaniko", "repository": REPOSITORY},
            r"image_build.mode: Input should be 'acr' \(fix: use acr \(kaniko builds run on ACK\)",
        ),
        (
            "dlc",
            {"mode": "acr", "repository": REPOSITORY + ":1", "acr": ACR_BUILD},
            r"^image_build.repository:",
        ),
        ("dlc", {"mode": "acr", "repository": REPOSITORY, "acr": {}}, r"instance_id"),
        ("arena", {"mode": "kaniko", "repository": REPOSITORY, "kaniko": {}}, r"registry_secret"),
        (
            "arena",
            {"mode": "docker", "repository": REPOSITORY},
            r"image_build.mode: Input should be 'kaniko' or",
        ),
        (
            "dlc",
            {"mode": "acr", "repository": REPOSITORY, "base_image": "base:1", "acr": ACR_BUILD},
            r"^image_build.base_image: ACR builds with its build rule's own BuildArgs",
        ),
    ],
)
def test_bad_image_build_settings_fail_at_configure_naming_the_field(
    tmp_path: Path, backend: str, image_build: dict[str, Any], message: str
) -> None:
    overrides = (
        {**CONFIGURED, "image_build": image_build}
        if backend == "dlc"
        else {
            "image": "registry.example.com/train:1",
            "data_pvc": "cpfs-train",
            "image_build": image_build,
        }
    )
    with pytest.raises(SpecError, match=message):
        resolve(tmp_path, backend=backend, gpus_per_node=8, environment=overrides)


def test_a_pinned_image_needs_no_build_settings(tmp_path: Path) -> None:
    overrides = {**CONFIGURED, "image_build": {"mode": "acr", "repository": "", "acr": {}}}

    run = resolve(tmp_path, backend="dlc", environment=overrides, image="registry.example.com/train:7")

    assert run.image is not None and run.image.pinned == "registry.example.com/train:7"


def test_a_kaniko_build_runs_in_the_environments_cluster_and_namespace(tmp_path: Path) -> None:
    kaniko = {"registry_secret": "acr-push", "builder_image": ""}  # blank: the builder's default image
    image_build = {"mode": "kaniko", "repository": REPOSITORY, "base_image": "base:1", "kaniko": kaniko}
    overrides = {
        "image": "registry.example.com/train:1",
        "data_pvc": "cpfs-train",
        "namespace": "training",
        "kubernetes_conn_id": "ack_prod",
        "image_pull_secrets": ["acr-pull"],
        "image_build": image_build,
    }

    run = resolve(tmp_path, backend="arena", gpus_per_node=8, environment=overrides)

    assert run.image is not None
    assert run.image.builder == {
        "kubernetes_conn_id": "ack_prod",
        "namespace": "training",
        "image_pull_secrets": ["acr-pull"],
        "installation": INSTALLATION,
        "registry_secret": "acr-push",
    }
    assert run.image.build_args == {"BASE_IMAGE": "base:1"}


# -- job outputs and artifacts of cloud runs ----------------------------------------------------------

OUTPUTS = {"output_uri": "oss://ml-bucket/outputs/cifar10/", "artifact_root": "oss://ml-bucket/models/"}
ARENA = {"data_pvc": "cpfs-train", "image": "registry.example.com/train:1"}


def test_a_dlc_run_mounts_output_uri_read_write_at_output_root_and_records_the_fixed_dataset(
    tmp_path: Path,
) -> None:
    run = resolve(tmp_path, backend="dlc", gpus_per_node=8, environment={**CONFIGURED, **OUTPUTS})

    spec = run.job.spec
    assert [(m.dataset_id, m.uri, m.mount_path, m.read_only) for m in spec.datasets] == [
        ("d-cifar", None, "/mnt/data/cifar10", True),
        (None, "oss://ml-bucket/outputs/cifar10/", "/mnt/output/cifar10", False),
    ]
    assert (run.job.output_uri, run.artifacts.artifact_root) == (
        OUTPUTS["output_uri"],
        OUTPUTS["artifact_root"],
    )
    assert (
        run.artifacts.unavailable is None and run.artifacts.alibaba_cloud_conn_id == "alibaba_cloud_default"
    )
    assert run.dataset.fixed is not None and run.dataset.fixed.model_dump() == {
        "version": "2026-11-22",
        "uri": None,
        "dataset_id": "d-cifar",
        "mount_path": "/mnt/data/cifar10",
    }


def test_a_dlc_mount_may_name_the_buckets_endpoint_and_artifacts_read_the_bucket(tmp_path: Path) -> None:
    mounted = "oss://ml-bucket.oss-cn-wulanchabu-internal.aliyuncs.com/outputs/cifar10/"
    overrides = {**CONFIGURED, **OUTPUTS, "output_uri": mounted}

    run = resolve(tmp_path, backend="dlc", gpus_per_node=8, environment=overrides)

    assert run.job.spec.datasets[-1].uri == mounted
    assert run.job.output_uri == "oss://ml-bucket/outputs/cifar10/"


def test_an_arena_run_mounts_its_oss_backed_output_claim_read_write(tmp_path: Path) -> None:
    overrides = {**ARENA, **OUTPUTS, "output_pvc": "oss-outputs"}

    run = resolve(tmp_path, backend="arena", gpus_per_node=8, environment=overrides)

    spec = run.job.spec
    assert [(m.uri, m.mount_path, m.read_only) for m in spec.datasets] == [
        ("pvc://cpfs-train", "/mnt/data/cifar10", True),
        ("pvc://oss-outputs", "/mnt/data/outputs/cifar10", False),
    ]
    assert run.job.output_uri == OUTPUTS["output_uri"]
    assert run.dataset.fixed is not None and run.dataset.fixed.uri == "pvc://cpfs-train"


@pytest.mark.parametrize(
    ("backend", "overrides", "message"),
    [
        ("dlc", {"output_uri": "/mnt/outputs"}, r"output_uri: '/mnt/outputs' is not an OSS URI"),
        ("dlc", {"artifact_root": "/srv/artifacts"}, r"artifact_root: '/srv/artifacts' is not an OSS URI"),
        ("dlc", {"output_root": "outputs"}, r"output_root: 'outputs' is not an absolute path"),
        (
            "arena",
            {"output_uri": "oss://ml-bucket/out/"},
            r"output_pvc: output_uri is set but no claim mounts it",
        ),
        ("arena", {"output_pvc": "oss-out"}, r"output_uri: output_pvc 'oss-out' is set but not which OSS"),
        (
            "arena",
            {"output_uri": "oss://ml-bucket/out/", "output_pvc": "cpfs-train"},
            r"output_pvc: 'cpfs-train' is also data_pvc",
        ),
    ],
)
def test_bad_output_settings_fail_at_configure_naming_the_field_and_fix(
    tmp_path: Path, backend: str, overrides: dict[str, str], message: str
) -> None:
    base = CONFIGURED if backend == "dlc" else ARENA

    with pytest.raises(SpecError, match=message) as rejected:
        resolve(tmp_path, backend=backend, gpus_per_node=8, environment={**base, **overrides})

    assert "fix:" in str(rejected.value)


def test_a_cloud_run_with_blank_output_settings_trains_and_says_what_to_set(tmp_path: Path) -> None:
    overrides = {**ARENA, "artifact_root": OUTPUTS["artifact_root"]}

    run = resolve(tmp_path, backend="arena", gpus_per_node=8, environment=overrides)

    mounts = run.job.spec.datasets
    assert [(m.uri, m.read_only) for m in mounts] == [("pvc://cpfs-train", True)], "no output mount"
    assert run.job.output_uri is None
    unavailable = run.artifacts.unavailable or ""
    assert "output_uri left blank in arena.json" in unavailable and "output_pvc" in unavailable
    assert "artifact_root" not in unavailable


def test_a_local_run_publishes_under_the_local_root_with_nothing_to_map(tmp_path: Path) -> None:
    run = resolve(tmp_path)

    assert run.artifacts.artifact_root == str(tmp_path / "artifacts")
    assert run.job.output_uri is run.artifacts.unavailable is run.dataset.fixed is None
