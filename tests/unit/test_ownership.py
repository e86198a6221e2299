"""Who owns what: the installation id, owners that name one task instance, outputs within their root."""

from __future__ import annotations

from pathlib import Path

import pytest

from aliyun_training.backends.base import same_owner
from aliyun_training.installation import derived_installation_id, installation_id
from aliyun_training.kubernetes.names import INSTALLATION_LABEL, managed_labels
from aliyun_training.operators.artifacts import check_collectable
from aliyun_training.spec import JobOwner
from aliyun_training.stage_records import JobResult
from aliyun_training.staging.pod import PodStagerSettings, pod_labels, staging_pod_name
from aliyun_training.validation import SpecError

OWNER = JobOwner(installation="ml-prod", dag_id="retrain", run_id="scheduled__2026-11-22", task_id="train")


def test_the_installation_id_is_the_configured_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", "ml-prod")

    assert installation_id() == "ml-prod"


@pytest.mark.parametrize("configured", ["ML_Prod", "prod/eu", "-prod", "x" * 41, "prod id"])
def test_an_installation_id_that_cannot_be_a_label_or_tag_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, configured: str
) -> None:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", configured)

    with pytest.raises(
        SpecError, match=r"^\[aliyun_training\] installation_id: .* \(fix: lower-case letters"
    ):
        installation_id()


def test_without_a_setting_the_id_is_derived_from_the_api_server_every_worker_reaches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID", "")
    monkeypatch.setenv(
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://airflow-prod.internal:8080/execution/"
    )
    # A task process sees this database address in every deployment (Airflow 3 hides the real one).
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "airflow-db-not-allowed:///")

    derived = installation_id()

    assert derived.startswith("af-") and derived == derived_installation_id(
        "HTTP://Airflow-Prod.internal:8080"
    )
    # A component that names only the base URL (the execution API's default) agrees.
    monkeypatch.delenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow-prod.internal:8080/")
    assert installation_id() == derived
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow-staging.internal:8080/")
    assert installation_id() != derived


def test_an_owner_is_the_same_task_instance_whatever_its_try() -> None:
    assert OWNER.is_task(OWNER.model_copy(update={"try_number": 4}))
    for other in (
        OWNER.model_copy(update={"installation": "ml-staging"}),
        OWNER.model_copy(update={"run_id": "manual__x"}),
        OWNER.model_copy(update={"map_index": 0}),
        None,
    ):
        assert not OWNER.is_task(other)
    assert same_owner(None, None), "a job launched for no task instance matches one without owner tags"
    assert not same_owner(None, OWNER) and not same_owner(OWNER, None)


def test_owner_tags_without_the_installation_name_no_owner() -> None:
    tags = OWNER.tags()
    del tags["airflow-installation"]

    assert JobOwner.from_tags(tags) is None, "a job tagged before installation ids is never acted on"
    assert JobOwner.from_tags(OWNER.tags()) == OWNER


def _result(output_uri: str | None) -> JobResult:
    return JobResult(
        backend="dlc", job_id="dlc-1", display_name="job", status="Succeeded", output_uri=output_uri
    )


@pytest.mark.parametrize(
    ("output_uri", "root"),
    [
        ("oss://ml-bucket/outputs/cifar10/job/", "oss://ml-bucket/outputs/cifar10/"),
        ("{tmp}/outputs/job", "{tmp}/outputs"),
    ],
)
def test_outputs_under_the_output_root_may_be_collected(tmp_path: Path, output_uri: str, root: str) -> None:
    check_collectable(_result(output_uri.format(tmp=tmp_path)), root.format(tmp=tmp_path))


@pytest.mark.parametrize(
    ("output_uri", "root"),
    [
        ("oss://other-team/outputs/job/", "oss://ml-bucket/outputs/"),
        ("oss://ml-bucket/outputs-old/job/", "oss://ml-bucket/outputs/"),
        ("oss://ml-bucket/outputs/../models/job/", "oss://ml-bucket/outputs/"),
        ("/mnt/output/job", "oss://ml-bucket/outputs/"),
        ("{tmp}/outputs/../../etc", "{tmp}/outputs"),
        ("/etc", "{tmp}/outputs"),
        (None, "{tmp}/outputs"),
        ("{tmp}/outputs/job", None),
    ],
)
def test_outputs_anywhere_else_are_refused_before_anything_is_read(
    tmp_path: Path, output_uri: str | None, root: str | None
) -> None:
    job = _result(output_uri.format(tmp=tmp_path) if output_uri else None)

    with pytest.raises(
        SpecError, match=r"^output_uri: .*(is not under the environment's output root|contains '\.\.')"
    ):
        check_collectable(job, root.format(tmp=tmp_path) if root else None)


def test_a_staging_pod_carries_its_installation_and_two_installations_never_share_one() -> None:
    settings = {
        "image": "registry.example.com/stager:1",
        "source_uri": "oss://ml-bucket/datasets/cifar10/v1/",
        "target_root": "/mnt/cpfs/datasets/cifar10",
        "version": "v1",
        "staging_pvc": "cpfs-root",
    }
    production = PodStagerSettings(**settings, installation="ml-prod")
    staging = PodStagerSettings(**settings, installation="ml-staging")

    assert pod_labels(production)[INSTALLATION_LABEL] == "ml-prod"
    assert staging_pod_name(production) != staging_pod_name(staging)
    assert INSTALLATION_LABEL not in managed_labels("staging", None), "only a known installation is labelled"


def test_the_compose_file_refuses_to_start_a_deployment_without_its_own_installation_id() -> None:
    """Every deployment built from the file has the API server address http://airflow-apiserver:8080,
    so a derived id would be the same in all of them: compose must require one from .env."""
    import yaml

    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yaml").read_text())
    environment = compose["x-airflow-common"]["environment"]
    required = environment["AIRFLOW__ALIYUN_TRAINING__INSTALLATION_ID"]
    assert required.startswith("${ALIYUN_TRAINING_INSTALLATION_ID:?"), "compose stops without it"
    assert derived_installation_id(environment["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]) == (
        derived_installation_id("http://airflow-apiserver:8080/")
    ), "the address every deployment from the file shares"
