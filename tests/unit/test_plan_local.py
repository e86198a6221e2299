"""plan.local, called directly: torchrun on this machine, reading a version staged under the local root.

Covers what the plans made through ``resolve_run`` (tests/unit/test_pipeline.py) leave out: the
optional ``local.json`` becoming the backend's settings (without its use policy) or its defaults
when absent, the staging and disk check of the chosen version, where outputs may be collected
from, a prepare stage's job reading and writing plain paths of the local object store, and the
form's image settings, which a local run refuses unless left at their defaults.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backend_catalog import Backend
from aliyun_training.form import TriggerFormError, parse_form
from aliyun_training.params import param_defaults
from aliyun_training.plan import local
from aliyun_training.settings import LocalPaths
from fakes.environment_files import cifar10
from tests.plan_requests import VERSION, cifar10_request, imagenet_prepare_request

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.plan.inputs import PlanRequest


def store(tmp_path: Path) -> str:
    """The local object store's versions, as ``resolve.dataset_sources`` names them."""
    return f"file://{LocalPaths(tmp_path).object_store}/{{dataset}}/{{version}}/"


def request(tmp_path: Path, environment: Path, **form: Any) -> PlanRequest:
    """A two-process CIFAR-10 run of VERSION on this machine, with ``environment`` as its local.json
    (``form`` adds to the form)."""
    return cifar10_request(
        tmp_path,
        environment,
        Backend.LOCAL,
        template=store(tmp_path),
        parameters={"epochs": 1, "batch_size": 32},
        timeout_minutes=30,
        **form,
    )


def test_local_json_becomes_the_backends_settings_without_its_use_policy(tmp_path: Path) -> None:
    environment = tmp_path / "local.json"
    environment.write_text(
        json.dumps({"master_port": 29600, "stop_grace_seconds": 3, "allowed_owners": ["ml-platform"]})
    )

    run = local.plan_run(request(tmp_path, environment))

    assert run.job.backend_config == {"master_port": 29600, "stop_grace_seconds": 3.0}


def test_without_local_json_a_free_port_is_picked_and_processes_get_the_default_grace(tmp_path: Path) -> None:
    run = local.plan_run(request(tmp_path, tmp_path / "absent" / "local.json"))

    assert "master_port" not in run.job.backend_config, "no fixed rendezvous port"
    assert run.job.backend_config["stop_grace_seconds"] == 10.0


def test_the_chosen_version_is_staged_from_the_object_store_and_its_size_checked_against_the_root(
    tmp_path: Path,
) -> None:
    run = local.plan_run(request(tmp_path, tmp_path / "local.json"))

    staging = run.staging
    assert staging is not None
    root = str(tmp_path / "cpfs" / "datasets" / "cifar10")
    assert (staging.mode, staging.source_uri, staging.target_root, staging.version) == (
        "direct",
        f"file://{tmp_path}/object-store/cifar10/{VERSION}/",
        root,
        VERSION,
    )
    assert staging.registration is None and staging.remote == {}, "nothing to register or run remotely"
    assert (run.preflight.source_uri, run.preflight.target_root) == (staging.source_uri, root)
    assert run.prepare is None, "the declaration has no prepare stage"


def test_a_local_job_writes_under_the_local_outputs_and_artifacts_are_collected_only_from_there(
    tmp_path: Path,
) -> None:
    run = local.plan_run(request(tmp_path, tmp_path / "local.json"))

    outputs = str(tmp_path / "outputs")
    assert run.job.output_root == run.artifacts.outputs_root == outputs
    assert run.artifacts.artifact_root == str(tmp_path / "artifacts")
    assert run.job.spec.backend is Backend.LOCAL and run.job.spec.nodes == 2
    assert (run.image, run.rdma_check, run.job.spec.image) == (None, None, None), "the worker's own runtime"


def test_a_prepare_job_reads_and_writes_plain_paths_of_the_object_store(tmp_path: Path) -> None:
    environment = tmp_path / "local.json"
    environment.write_text(json.dumps({"stop_grace_seconds": 5}))
    prepared = imagenet_prepare_request(
        tmp_path, environment, Backend.LOCAL, store(tmp_path), store(tmp_path)
    )
    chosen, declaration = prepared.chosen, prepared.declaration

    run = local.plan_run(prepared)

    assert run.prepare is not None
    objects = tmp_path / "object-store"
    assert run.prepare.job.spec.env["RAW_DIR"] == f"{objects}/imagenet/2026-11-01/", "no file:// scheme"
    assert run.prepare.job.spec.output_dir == f"{objects}/imagenet-shards/{chosen.version}/"
    assert run.prepare.job.spec.working_dir == str(declaration.code_dir)
    assert run.prepare.job.backend_config == run.job.backend_config == {"stop_grace_seconds": 5.0}
    assert run.preflight.source_uri == f"file://{objects}/imagenet/2026-11-01/", (
        "the disk check sizes the raw version, about as large as the one it becomes"
    )
    assert (
        run.staging is not None
        and run.staging.source_uri == f"file://{objects}/imagenet-shards/{chosen.version}/"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "image",
            "registry.example.com/team/train:v3",
            "image: the local backend runs no image, so 'registry.example.com/team/train:v3' would be "
            "ignored (fix: leave image empty, or choose a cloud backend)",
        ),
        (
            "force_rebuild",
            True,
            "force_rebuild: the local backend builds no image, so force_rebuild would be ignored "
            "(fix: leave force_rebuild off, or choose a cloud backend)",
        ),
    ],
)
def test_a_local_run_refuses_an_image_setting_naming_the_field_why_and_the_fix(
    field: str, value: Any, message: str
) -> None:
    """The worker's own Python runs the job: an image to run or rebuild would be silently ignored."""
    declaration = cifar10()

    with pytest.raises(TriggerFormError) as excinfo:
        parse_form({**param_defaults(declaration), "backend": "local", field: value}, declaration)

    assert message in str(excinfo.value)


def test_the_forms_defaults_plan_a_local_run_with_the_workers_runtime(tmp_path: Path) -> None:
    """What a run that sets nothing sends (the DAG's Params, the CLI's dry run) is never refused."""
    declaration = cifar10()
    defaults = {**param_defaults(declaration), "backend": "local"}

    form = parse_form(defaults, declaration)
    run = local.plan_run(
        request(tmp_path, tmp_path / "local.json", image=form.image, force_rebuild=form.force_rebuild)
    )

    assert (form.image, form.force_rebuild) == (None, False)
    assert (run.image, run.job.spec.image) == (None, None)
