"""plan.cloud, called directly: what the DLC and ACK planners plan alike.

Covers the environment a run plans with (the form's overrides laid over the file, a file of another
backend refused, a pinned image checked against the environment's repositories, registry ports and
digests included), the job's ``DATA_DIR`` and node resources, the image stage (a build without a
context refused, the content-addressed tag, which connection a build and the registry use), the
bandwidth check, the output mount and bucket, why artifacts are unavailable, and the remote stager's
settings check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from aliyun_training.backend_catalog import Backend
from aliyun_training.declaration import PipelineDeclaration, declare
from aliyun_training.environments import AckEnvironment, DlcEnvironment
from aliyun_training.form import RunForm
from aliyun_training.plan import cloud
from aliyun_training.plan.models import StagingPlan
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.environment_files import CIFAR10, write_environment
from tests.plan_requests import VERSION, cifar10_request

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.plan.inputs import PlanRequest

DLC: dict[str, Any] = {"quota_id": "quota1ab2", "gpu_type": "GU8TF", "image": "registry.example.com/train:1"}
ARENA: dict[str, Any] = {"data_pvc": "cpfs-train", "image": "registry.example.com/train:1"}
REPOSITORY = "ml-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train"
ACR = {"instance_id": "cri-abc123", "repo_id": "crr-def456", "build_rule_id": "crbr-789"}


def declaration(**sections: dict[str, Any]) -> PipelineDeclaration:
    """The CIFAR-10 declaration with ``sections`` replacing its top-level blocks."""
    data = yaml.safe_load(CIFAR10.read_text())
    return declare({**data, **sections}, base_dir=CIFAR10.parent)


def request(
    environment: Path,
    backend: Backend = Backend.DLC,
    declared: PipelineDeclaration | None = None,
    **form: Any,
) -> PlanRequest:
    """A two-node CIFAR-10 run of VERSION on ``backend``, its settings in the file ``environment``."""
    return cifar10_request(
        environment.parent, environment, backend, declaration=declared, **{"gpus_per_node": 8, **form}
    )


# -- the environment a run plans with ----------------------------------------------------------------


def test_the_forms_overrides_replace_the_files_values_and_leave_the_rest(tmp_path: Path) -> None:
    path = write_environment(tmp_path, "dlc", {**DLC, "priority": 2})
    form = RunForm(backend=Backend.DLC, backend_overrides={"cpu_per_node": 16, "rdma": False})

    environment = cloud.environment_for_run(path, DlcEnvironment, form)

    assert isinstance(environment, DlcEnvironment)
    assert (environment.cpu_per_node, environment.rdma) == (16, False)
    assert (environment.priority, environment.quota_id) == (2, "quota1ab2"), "not overridden: the file's"


def test_a_file_of_another_backend_is_refused_naming_the_backend(tmp_path: Path) -> None:
    path = write_environment(tmp_path, "arena", ARENA)

    with pytest.raises(SpecError, match=r"^backend: 'arena' is not a backend the DlcEnvironment file"):
        cloud.environment_for_run(path, DlcEnvironment, RunForm(backend=Backend.ACK))


@pytest.mark.parametrize(
    "pinned",
    [f"{REPOSITORY}:v7", f"{REPOSITORY}@sha256:{'a' * 64}", "registry.example.com:5000/ml/train:3"],
)
def test_a_pinned_image_of_the_build_repository_or_an_allowed_one_is_accepted(
    tmp_path: Path, pinned: str
) -> None:
    settings = {
        **DLC,
        "image_build": {"mode": "acr", "repository": REPOSITORY, "acr": ACR},
        "allowed_image_repositories": ["registry.example.com:5000/ml/train"],
    }
    path = write_environment(tmp_path, "dlc", settings)

    environment = cloud.environment_for_run(path, DlcEnvironment, RunForm(backend=Backend.DLC, image=pinned))

    assert environment.image == DLC["image"], "the pinned image is the image stage's, not the environment's"


def test_a_registry_port_does_not_make_another_repository_of_that_registry_trusted(tmp_path: Path) -> None:
    settings = {**DLC, "allowed_image_repositories": ["registry.example.com:5000/ml/train"]}
    path = write_environment(tmp_path, "dlc", settings)
    form = RunForm(backend=Backend.DLC, image="registry.example.com:5000/ml/other:3")

    with pytest.raises(SpecError) as refused:
        cloud.environment_for_run(path, DlcEnvironment, form)

    message = str(refused.value)
    assert message.startswith("image: 'registry.example.com:5000/ml/other:3' is not from a repository")
    assert "['registry.example.com/train', 'registry.example.com:5000/ml/train']" in message, "sorted"
    assert "allowed_image_repositories in dlc.json" in message, "the fix names the file to edit"


# -- the job's environment and resources -------------------------------------------------------------


def test_data_dir_is_the_versions_folder_of_a_fixed_mount_and_left_to_the_stage_when_staged(
    tmp_path: Path,
) -> None:
    training = {**yaml.safe_load(CIFAR10.read_text())["training"], "env": {"OMP_NUM_THREADS": "4"}}
    run = request(write_environment(tmp_path, "dlc", DLC), declared=declaration(training=training))

    fixed = cloud.job_env(run, staged=False, mount_path="/mnt/data/cifar10/")
    staged = cloud.job_env(run, staged=True, mount_path="/mnt/data/cifar10/")

    assert fixed == {"OMP_NUM_THREADS": "4", "DATA_DIR": f"/mnt/data/cifar10/{VERSION}"}
    assert staged == {"OMP_NUM_THREADS": "4"}


def test_node_resources_name_the_environments_settings_as_the_job_spec_does() -> None:
    environment = AckEnvironment(
        image="registry.example.com/train:2",
        cpu_per_node=48,
        memory_gib_per_node=384,
        shared_memory_gib_per_node=32,
        rdma=True,
        code_dir="/opt/code",
    )

    spec = TrainingJobSpec.parse(
        {"backend": "arena", "command": "train", **cloud.node_resources(environment)}
    )

    assert (spec.image, spec.cpu, spec.memory_gib, spec.shared_memory_gib, spec.rdma, spec.working_dir) == (
        "registry.example.com/train:2",
        48,
        384,
        32,
        True,
        "/opt/code",
    )


# -- the image stage -----------------------------------------------------------------------------------


def test_a_build_without_a_declared_build_context_fails_naming_image_context_dir(tmp_path: Path) -> None:
    settings = {**DLC, "image_build": {"mode": "acr", "repository": REPOSITORY, "acr": ACR}}
    path = write_environment(tmp_path, "dlc", settings)
    run = request(path, declared=declaration(image={}))

    with pytest.raises(SpecError) as refused:
        cloud.image_plan(run, DlcEnvironment.model_validate(settings), {})

    message = str(refused.value)
    assert message.startswith("image.context_dir: dlc.json builds images (acr) but the declaration")
    assert "(fix: set image.context_dir" in message


def test_a_build_without_a_context_is_not_needed_when_the_form_pins_an_image(tmp_path: Path) -> None:
    settings = {**DLC, "image_build": {"mode": "acr", "repository": REPOSITORY, "acr": ACR}}
    run = request(
        write_environment(tmp_path, "dlc", settings), declared=declaration(image={}), image=f"{REPOSITORY}:v2"
    )

    image = cloud.image_plan(run, DlcEnvironment.model_validate(settings), {})

    assert (image.pinned, image.tag, image.builder, image.context_dir) == (f"{REPOSITORY}:v2", None, {}, None)


def test_the_build_tag_is_stable_for_the_same_inputs_and_changes_with_code_or_build_args(
    tmp_path: Path,
) -> None:
    context, code = tmp_path / "context", tmp_path / "code"
    context.mkdir()
    code.mkdir()
    (context / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM $BASE_IMAGE\n")
    (code / "train.py").write_text("print('epoch 1')\n")

    tag = cloud.build_tag(context, code, {"BASE_IMAGE": "base:1"})
    again = cloud.build_tag(context, code, {"BASE_IMAGE": "base:1"})
    other_base = cloud.build_tag(context, code, {"BASE_IMAGE": "base:2"})
    (code / "train.py").write_text("print('epoch 2')\n")
    other_code = cloud.build_tag(context, code, {"BASE_IMAGE": "base:1"})

    assert tag == again
    assert len({tag, other_base, other_code}) == 3


def test_the_registry_connection_is_the_build_blocks_else_the_dlc_environments(tmp_path: Path) -> None:
    build = {"mode": "acr", "repository": REPOSITORY, "acr": ACR}
    own = {
        **DLC,
        "image_registry_conn_id": "acr_ee",
        "image_build": {**build, "registry_conn_id": "acr_push"},
    }
    inherited = {**DLC, "image_registry_conn_id": "acr_ee", "image_build": build}
    run = request(write_environment(tmp_path, "dlc", DLC))

    assert cloud.image_plan(run, DlcEnvironment.model_validate(own), {}).registry_conn_id == "acr_push"
    assert cloud.image_plan(run, DlcEnvironment.model_validate(inherited), {}).registry_conn_id == "acr_ee"


def test_an_acr_build_on_ack_runs_through_the_alibaba_cloud_connection_not_the_cluster(
    tmp_path: Path,
) -> None:
    settings = {
        **ARENA,
        "kubernetes_conn_id": "ack_prod",
        "alibaba_cloud_conn_id": "aliyun_prod",
        "image_build": {"mode": "acr", "repository": REPOSITORY, "acr": ACR},
    }
    run = request(write_environment(tmp_path, "arena", settings), Backend.ACK)
    cluster = {"kubernetes_conn_id": "ack_prod", "namespace": "default"}

    image = cloud.image_plan(run, AckEnvironment.model_validate(settings), cluster)

    assert image.builder == {**ACR, "alibaba_cloud_conn_id": "aliyun_prod"}, "no kaniko cluster settings"
    assert image.tag is not None and image.mode == "acr"


# -- the bandwidth check, outputs and artifacts --------------------------------------------------------


def test_the_bandwidth_check_takes_the_environments_block_and_the_forms_skip() -> None:
    environment = AckEnvironment(rdma_check={"line_rate_gbps": 400, "device": "mlx5_2", "gid_index": 1})

    check = cloud.rdma_check_plan(RunForm(backend=Backend.ACK, skip_bandwidth_check=True), environment)

    assert (check.line_rate_gbps, check.device, check.gid_index, check.skip) == (400.0, "mlx5_2", 1, True)


def test_no_output_mount_is_planned_while_output_uri_is_blank() -> None:
    assert cloud.output_mount(DlcEnvironment(), "oss://ignored/x/", "/mnt/output") == []
    assert cloud.output_bucket_uri(DlcEnvironment()) is None


def test_the_output_mount_is_read_write_at_output_root_and_its_bucket_uri_is_normalised() -> None:
    mounted = "oss://ml-bucket.oss-cn-wulanchabu-internal.aliyuncs.com/outputs/cifar10"
    environment = DlcEnvironment(output_uri=mounted)

    (mount,) = cloud.output_mount(environment, mounted, "/mnt/output/cifar10")

    assert (mount.uri, mount.mount_path, mount.read_only) == (mounted, "/mnt/output/cifar10", False)
    assert cloud.output_bucket_uri(environment) == "oss://ml-bucket/outputs/cifar10/", (
        "the bucket alone, and a trailing / so outputs/cifar10 never matches outputs/cifar100"
    )


def test_artifacts_of_a_run_without_outputs_are_unavailable_naming_each_blank_setting_and_its_fix(
    tmp_path: Path,
) -> None:
    run = request(write_environment(tmp_path, "dlc", DLC))

    artifacts = cloud.artifacts_plan(run, DlcEnvironment(alibaba_cloud_conn_id="aliyun_prod"))

    unavailable = artifacts.unavailable or ""
    assert unavailable.startswith("artifacts of dlc runs are not collected: output_uri and artifact_root")
    assert "left blank in dlc.json" in unavailable
    assert "set output_uri to the OSS location" in unavailable and "set artifact_root to" in unavailable
    assert "output_pvc" not in unavailable, "a claim is an ACK setting"
    assert (artifacts.alibaba_cloud_conn_id, artifacts.model) == ("aliyun_prod", "cifar10")


# -- the remote stager ---------------------------------------------------------------------------------


def staging(mode: str, remote: dict[str, Any]) -> StagingPlan:
    return StagingPlan(
        mode=mode,
        source_uri="oss://ml-datasets/cifar10/v1/",
        target_root="/datasets",
        version="v1",
        remote=remote,
    )


def test_a_direct_copy_is_not_checked_as_a_remote_stager() -> None:
    cloud.check_remote_staging(staging("direct", {}))  # no settings, and nothing to refuse


@pytest.mark.parametrize(
    ("mode", "remote", "fields"),
    [
        ("pod", {}, ["image: Field required", "staging_pvc: Field required"]),
        ("dataflow", {"file_system_id": "bmcpfs-1"}, ["data_flow_id: Field required"]),
    ],
)
def test_a_remote_stager_missing_settings_fails_naming_each_and_its_fix(
    mode: str, remote: dict[str, Any], fields: list[str]
) -> None:
    with pytest.raises(SpecError) as refused:
        cloud.check_remote_staging(staging(mode, remote))

    for field in fields:
        assert field in str(refused.value)
    assert "(fix: " in str(refused.value)
