"""TrainingJobSpec validation, record validation, deterministic job names and mounts of a job's data."""

from __future__ import annotations

import functools
import re

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.kubernetes.names import job_name
from aliyun_training.spec import Framework, TrainingJobSpec, mounted_output_uri, node_output_path
from aliyun_training.stage_records import BuiltImage, JobResult, StagedDataset, mount_staged
from aliyun_training.validation import SpecError, validate_record

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
#: A Kubernetes Service name: the training-operator names one after every replica of a job.
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def _spec(**fields):
    return {"command": "torchrun train.py", **fields}


def _error(data) -> str:
    with pytest.raises(SpecError) as excinfo:
        TrainingJobSpec.parse(data)
    return str(excinfo.value)


def test_minimal_spec_uses_local_pytorch_defaults():
    spec = TrainingJobSpec.parse(_spec())

    assert spec.backend is Backend.LOCAL
    assert spec.framework is Framework.PYTORCH
    assert spec.nodes == 1
    assert spec.gpus_per_node == 0
    assert spec.env == {}


def test_parse_returns_an_existing_spec_unchanged():
    spec = TrainingJobSpec.parse(_spec(nodes=2))

    assert TrainingJobSpec.parse(spec) is spec


def test_zero_nodes_names_the_field_and_the_allowed_range():
    message = _error(_spec(nodes=0))

    assert message.startswith("Invalid TrainingJobSpec:")
    assert "nodes:" in message
    assert "fix: use between 1 and 128 nodes" in message


def test_negative_gpus_names_the_field_and_the_fix():
    message = _error(_spec(gpus_per_node=-1))

    assert "gpus_per_node:" in message
    assert "fix: use 0 (CPU only) up to 16 GPUs per node" in message


def test_env_with_rendezvous_variables_is_rejected_with_the_reason():
    message = _error(_spec(env={"RANK": "0", "MASTER_ADDR": "10.0.0.1", "OK_VAR": "1"}))

    assert "env:" in message
    assert "'MASTER_ADDR'" in message
    assert "'RANK'" in message
    assert "injected by the platform on every node" in message
    assert "remove them from env" in message
    assert "OK_VAR" not in message


@pytest.mark.parametrize("name", ["WORLD_SIZE", "MASTER_PORT"])
def test_every_injected_variable_is_rejected(name):
    message = _error(_spec(env={name: "1"}))

    assert f"'{name}'" in message


def test_invalid_env_variable_names_are_listed():
    message = _error(_spec(env={"1STARTS_WITH_DIGIT": "x", "HAS-DASH": "y", "GOOD_NAME": "z"}))

    assert "env: invalid variable names" in message
    assert "'1STARTS_WITH_DIGIT'" in message
    assert "'HAS-DASH'" in message
    assert "GOOD_NAME" not in message
    assert "fix: use NAME=value pairs" in message


def test_valid_env_is_kept():
    spec = TrainingJobSpec.parse(_spec(env={"OMP_NUM_THREADS": "1", "_PRIVATE": "x"}))

    assert spec.env == {"OMP_NUM_THREADS": "1", "_PRIVATE": "x"}


def test_relative_working_dir_is_rejected_with_the_fix():
    message = _error(_spec(working_dir="code/train"))

    assert "working_dir:" in message
    assert "fix: use an absolute path or leave it unset" in message


def test_local_backend_rejects_the_mpi_framework():
    message = _error(_spec(backend="local", framework="mpi"))

    assert "framework: the local backend runs torchrun only, not mpi" in message
    assert "use pytorch or elastic, or the dlc or arena backend" in message


def test_local_backend_accepts_elastic():
    spec = TrainingJobSpec.parse(_spec(framework="elastic"))

    assert spec.framework is Framework.ELASTIC


def test_dlc_backend_without_image_is_rejected():
    message = _error(_spec(backend="dlc"))

    assert "image: the dlc backend needs a container image; set image" in message


def test_dlc_backend_with_image_and_mpi_is_accepted():
    spec = TrainingJobSpec.parse(_spec(backend="dlc", framework="mpi", image="registry/repo:tag"))

    assert spec.backend is Backend.DLC
    assert spec.framework is Framework.MPI


def test_unknown_backend_lists_the_choices():
    message = _error(_spec(backend="gcp"))

    assert "backend:" in message
    assert "fix: choose one of: local, dlc, arena" in message


def test_unknown_field_is_rejected_by_name():
    message = _error(_spec(gpu=1))

    assert "gpu:" in message


def test_several_errors_are_reported_at_once():
    message = _error({"command": "", "nodes": 0, "gpus_per_node": 99, "working_dir": "rel"})
    lines = message.splitlines()

    assert lines[0] == "Invalid TrainingJobSpec:"
    bad_fields = {line.strip().removeprefix("- ").split(":")[0] for line in lines[1:]}
    assert bad_fields == {"command", "nodes", "gpus_per_node", "working_dir"}
    assert all("(fix: " in line for line in lines[1:])


def test_dataset_mount_errors_name_the_nested_field():
    message = _error(_spec(datasets=[{"uri": "/data/v1", "mount_path": "mnt/data"}]))

    assert "datasets.0.mount_path:" in message


@pytest.mark.parametrize(("gpus", "expected"), [(0, 1), (1, 1), (4, 4), (8, 8)])
def test_procs_per_node_is_one_per_gpu_or_one_for_cpu(gpus, expected):
    spec = TrainingJobSpec.parse(_spec(gpus_per_node=gpus))

    assert spec.procs_per_node == expected


#: Job names of one installation, as the training operator makes them.
_name = functools.partial(job_name, installation="ml-prod")


def test_job_name_is_deterministic():
    assert _name("train_dag", "manual__2024-01-01", "train", 3) == _name(
        "train_dag", "manual__2024-01-01", "train", 3
    )


@pytest.mark.parametrize(
    "other",
    [
        ("train_dag", "manual__2024-01-02", "train", -1),
        ("train_dag", "manual__2024-01-01", "evaluate", -1),
        ("train_dag", "manual__2024-01-01", "train", 0),
        ("other_dag", "manual__2024-01-01", "train", -1),
    ],
)
def test_job_name_differs_for_a_different_task_instance(other):
    assert _name("train_dag", "manual__2024-01-01", "train", -1) != _name(*other)


def test_job_name_differs_for_another_installation_running_the_same_task_instance():
    scheduled = ("train_dag", "scheduled__2026-11-22T00:00:00+00:00", "train", -1)

    assert _name(*scheduled) != job_name(*scheduled, installation="ml-staging")


def test_job_name_of_the_first_round_of_tries_leaves_the_round_out():
    assert _name("train_dag", "manual__2024-01-01", "train", -1, 1) == _name(
        "train_dag", "manual__2024-01-01", "train"
    )


def test_job_name_differs_for_each_later_round_of_tries():
    names = {_name("train_dag", "manual__2024-01-01", "train", -1, first_try) for first_try in (1, 2, 5)}

    assert len(names) == 3


def test_job_name_keeps_a_readable_prefix():
    name = _name("Train_CIFAR10", "run", "Submit.Job")

    assert name.startswith("train-cifar10-submit-job-")


def test_job_names_that_share_a_truncated_prefix_still_differ():
    long_dag = "d" * 200

    first = _name(long_dag, "run", "task_a")
    second = _name(long_dag, "run", "task_b")

    assert first != second
    assert len(first) <= 63
    assert len(second) <= 63


AWKWARD_DAG_IDS = [
    "simple",
    "UPPER_case_Dag",
    "___leading_and_trailing___",
    "-dash-",
    "dots.and.more.dots",
    "ünïcödé_dåg",
    "数据集",
    "a" * 62,
    "b" * 63,
    "c" * 64,
    "x-" * 80,
    "a" * 52 + "-" + "b" * 30,
    "a" * 51 + "__" + "b" * 30,
    "9starts_with_digit",
    "!!!",
    "",
]


@pytest.mark.parametrize("dag_id", AWKWARD_DAG_IDS)
def test_job_name_is_a_dns_label_for_awkward_dag_ids(dag_id):
    for task_id in ("t", "TASK__ID", "-", "t" * 100):
        for map_index in (-1, 0, 17):
            name = _name(dag_id, "scheduled__2024-01-01T00:00:00+00:00", task_id, map_index)

            assert len(name) <= 63, name
            assert DNS_LABEL.match(name), name
            for replica in (f"{name}-worker-127", f"{name}-master-0", f"{name}-pytorchjob"):
                assert DNS_1035_LABEL.fullmatch(replica), replica


def test_a_digit_first_dag_id_still_names_a_job_that_starts_with_a_letter():
    assert _name("9starts_with_digit", "run", "train").startswith("job-9starts-with-digit-train-")


def test_elastic_training_runs_between_min_and_max_nodes():
    spec = TrainingJobSpec.parse(_spec(framework="elastic", nodes=2, min_nodes=1, max_nodes=4))

    assert (spec.elastic_min_nodes, spec.nodes, spec.elastic_max_nodes) == (1, 2, 4)
    assert TrainingJobSpec.parse(_spec(framework="elastic", nodes=3)).elastic_max_nodes == 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"framework": "elastic", "nodes": 5, "max_nodes": 4},
            "nodes: 5 is outside min_nodes..max_nodes (5..4)",
        ),
        ({"framework": "pytorch", "min_nodes": 1}, "min_nodes: min_nodes and max_nodes apply to elastic"),
        (
            {"framework": "elastic_batch", "backend": "arena", "image": "registry/repo:1"},
            "framework: the arena backend runs Kubeflow's PyTorchJob, TFJob and MPIJob, not elastic_batch; "
            "use pytorch or tensorflow or mpi or elastic, or the dlc backend",
        ),
    ],
)
def test_elastic_settings_that_cannot_run_are_refused(fields, message):
    assert message in _error(_spec(**fields))


def test_validate_record_passes_an_instance_through():
    image = BuiltImage(uri="local", digest="sha256:abc", python="3.11.7")

    assert validate_record(BuiltImage, image) is image


def test_validate_record_builds_a_record_from_a_dict():
    record = {"backend": "local", "job_id": "j1", "display_name": "n", "status": "ok"}

    result = validate_record(JobResult, record)

    assert isinstance(result, JobResult)
    assert result.backend is Backend.LOCAL


def test_validate_record_explains_an_unsafe_dataset_version():
    record = {
        "uri": "/mnt/data/../x",
        "version": "../x",
        "files": 1,
        "bytes": 10,
        "manifest_uri": "/mnt/data/../x/_manifest.json",
        "checksum": "abc",
    }

    with pytest.raises(SpecError) as excinfo:
        validate_record(StagedDataset, record)

    message = str(excinfo.value)
    assert message.startswith("Invalid StagedDataset:")
    assert "version:" in message
    assert "should match pattern" in message


def test_validate_record_reports_every_missing_field():
    with pytest.raises(SpecError) as excinfo:
        validate_record(StagedDataset, {"version": "v1"})

    message = str(excinfo.value)
    for field in ("uri", "files", "bytes", "manifest_uri", "checksum"):
        assert f"{field}: Field required" in message


# -- where a job's data is mounted and where its outputs end up -------------------------------------


@pytest.mark.parametrize(
    ("output_dir", "output_uri", "expected"),
    [
        ("/mnt/output/cifar10/job-1a2b", "oss://bkt/outputs/", "oss://bkt/outputs/job-1a2b/"),
        ("/mnt/output/cifar10/job-1a2b/", "oss://bkt/outputs", "oss://bkt/outputs/job-1a2b/"),
        ("/mnt/output/cifar10/team/job-1a2b", "oss://bkt/o/", "oss://bkt/o/team/job-1a2b/"),
        ("/mnt/output/cifar10", "oss://bkt/outputs/", "oss://bkt/outputs/"),
    ],
)
def test_an_output_dir_under_the_mounted_root_maps_into_oss(output_dir, output_uri, expected):
    assert mounted_output_uri(output_dir, "/mnt/output/cifar10", output_uri) == expected


@pytest.mark.parametrize(
    ("output_dir", "output_root", "output_uri"),
    [
        ("/mnt/output/cifar10-other/job", "/mnt/output/cifar10", "oss://bkt/outputs/"),
        ("/srv/outputs/job", "/mnt/output/cifar10", "oss://bkt/outputs/"),
        ("/mnt/output/cifar10/job", "/mnt/output/cifar10", None),
        ("/mnt/output/cifar10/job", None, "oss://bkt/outputs/"),
    ],
)
def test_an_output_dir_without_a_mapping_is_kept_as_it_is(output_dir, output_root, output_uri):
    assert mounted_output_uri(output_dir, output_root, output_uri) == output_dir


def test_a_missing_output_dir_stays_missing():
    assert mounted_output_uri(None, "/mnt/output", "oss://bkt/outputs/") is None


def test_a_registered_version_is_mounted_beside_the_output_volume():
    output = {"uri": "pvc://oss-outputs", "mount_path": "/mnt/outputs", "read_only": False}
    spec = TrainingJobSpec.parse(_spec(backend="arena", image="i:1", datasets=[output]))
    staged = StagedDataset(
        uri="/mnt/cpfs/cifar10/v1",
        version="v1",
        files=1,
        bytes=1,
        manifest_uri="",
        checksum="c",
        pvc="cifar10-v1",
    )

    mounted = mount_staged(spec, staged, "/mnt/data/cifar10")

    assert [(m.uri, m.read_only) for m in mounted.datasets] == [
        ("pvc://oss-outputs", False),
        ("pvc://cifar10-v1", True),
    ]
    assert mounted.env["DATA_DIR"] == "/mnt/data/cifar10"


@pytest.mark.parametrize(
    "output_dir",
    ["/mnt/output/cifar10/job-1a2b", "/mnt/output/cifar10/team/job-1a2b"],
)
def test_a_recorded_output_location_maps_back_to_where_a_node_of_the_same_mount_sees_it(output_dir):
    recorded = mounted_output_uri(output_dir, "/mnt/output/cifar10", "oss://bkt/outputs/")

    assert node_output_path(recorded, "/mnt/output/cifar10", "oss://bkt/outputs/") == output_dir


@pytest.mark.parametrize(
    ("uri", "output_root", "output_uri"),
    [
        ("oss://bkt/elsewhere/job/", "/mnt/output", "oss://bkt/outputs/"),  # another mount's
        ("oss://bkt/outputs/job/", "/srv/outputs", None),  # no OSS mount on these nodes
        ("/srv/other/job", "/srv/outputs", None),  # a local path outside the outputs
        (None, "/srv/outputs", None),
    ],
)
def test_an_output_location_the_nodes_do_not_mount_has_no_node_path(uri, output_root, output_uri):
    assert node_output_path(uri, output_root, output_uri) is None


def test_a_local_output_directory_is_its_own_node_path():
    assert node_output_path("/srv/outputs/job/", "/srv/outputs", None) == "/srv/outputs/job"
