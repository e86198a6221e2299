"""PAI's model registry (model_registry/pai.py) through AIWorkspaceHook and the real SDK, against the
AIWorkspace emulator."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from alibabacloud_aiworkspace20210204 import models as ws_models
from alibabacloud_tea_openapi.exceptions import ClientException

from aliyun_training.hooks.aiworkspace import AIWorkspaceHook
from aliyun_training.model_registry import open_registry, planned_registry_calls
from aliyun_training.model_registry.base import (
    MLFLOW_MODEL_DIR,
    Candidate,
    PublishedFiles,
    RegisteredVersion,
    RegistryError,
    RegistrySettings,
)
from aliyun_training.model_registry.pai import HELD_REASON, LABEL_MAX_BYTES, PaiRegistry, label_value
from fakes.aiworkspace import AIWorkspaceEmulator, EmulatedModel, EmulatedModelVersion
from fakes.cloud import BUCKET, REGION, emulated_workspace

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

AK, SK = "LTAI-registry-test", "registry-secret-value"
WS = "ws-train"
MODEL = "cifar10-resnet"
SETTINGS = RegistrySettings(kind="pai", model=MODEL, workspace_id=WS)
INSTALLATION = "test-deployment"
JOB_ID = "dlc1a2b3c4d5e6"
WRITES = (
    "CreateModel",
    "CreateModelVersion",
    "CreateModelVersionLabels",
    "DeleteModelVersionLabels",
    "UpdateModelVersion",
)


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[AIWorkspaceEmulator]:
    with emulated_workspace(monkeypatch, AK, SK) as emulator:
        yield emulator


def published(root: Path, backend: str = "local", flavors: tuple[str, ...] = ()) -> PublishedFiles:
    """A published set under ``root`` of a job on ``backend``: its state file, its manifest and, with
    ``flavors``, the MLflow model the job saved (an MLmodel file naming them, as MLflow writes it)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.pt").write_bytes(b"state")
    manifest: dict[str, Any] = {"job": {"backend": backend, "job_id": JOB_ID, "status": "Succeeded"}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    if flavors:
        model = root / MLFLOW_MODEL_DIR
        model.mkdir()
        lines = ["artifact_path: null", "flavors:"]
        for flavor in flavors:
            lines += [f"  {flavor}:", "    model_data: data"]
        lines += ["mlflow_version: 3.1.0", "model_uuid: 0123456789abcdef"]
        (model / "MLmodel").write_text("\n".join(lines) + "\n")
    return PublishedFiles(root, manifest, (root / "manifest.json",))


@pytest.fixture
def plain(tmp_path: Path) -> PublishedFiles:
    """A local job's set of plain files: no MLflow model."""
    return published(tmp_path / "plain")


def candidate(run_id: str, accuracy: float = 0.9, installation: str = INSTALLATION) -> Candidate:
    folder = f"oss://{BUCKET}/artifacts/cifar10/2026-11-22/{run_id}/"
    return Candidate(
        installation=installation,
        run_id=run_id,
        dag_id="train_cifar10",
        dataset_version="2026-11-22",
        metrics={"final_test_accuracy": accuracy},
        artifacts_uri=folder,
        manifest_uri=f"{folder}manifest.json",
        job_id=JOB_ID,
        image="registry.example.com/train/pytorch:2.13-rdma",
        code_digest="sha256:0123abcd",
        declaration="pipelines/cifar10.yaml",
    )


def registry(installation: str = INSTALLATION) -> PaiRegistry:
    """A registry as a (retried) task opens it: nothing carried over from an earlier one."""
    opened = open_registry(SETTINGS, installation)
    assert isinstance(opened, PaiRegistry)
    return opened


def the_model(workspace: AIWorkspaceEmulator) -> EmulatedModel:
    model = workspace.model_named(MODEL, WS)
    assert model is not None
    return model


def champions(workspace: AIWorkspaceEmulator) -> list[str]:
    return [
        v.version_name
        for v in the_model(workspace).versions
        if {"Key": "champion", "Value": "true"} in v.labels
    ]


def writes(workspace: AIWorkspaceEmulator) -> int:
    return sum(workspace.count(action) for action in WRITES)


@pytest.mark.slow
def test_a_candidate_becomes_a_pending_version_labelled_with_its_lineage(workspace, plain):
    run = candidate("manual__2026-11-22T00:00:00+00:00")
    registered = registry().register(run, plain)

    model = the_model(workspace)
    assert registered == RegisteredVersion(
        registry="pai",
        model=MODEL,
        version="0.1.0",
        uri=f"pai://{REGION}/{WS}/models/{model.model_id}/versions/0.1.0",
        run_id=run.run_id,
        metrics={"final_test_accuracy": 0.9},
    )
    (version,) = model.versions
    assert version.fields["Uri"] == (
        f"oss://{BUCKET}.oss-{REGION}.aliyuncs.com/artifacts/cifar10/2026-11-22/{run.run_id}/"
    )
    assert version.fields["ApprovalStatus"] == "Pending"
    assert version.fields["Metrics"] == {"final_test_accuracy": 0.9}
    assert version.fields["ExtraInfo"] == {"lineage": run.lineage()}
    assert version.labels == [{"Key": key, "Value": value} for key, value in run.lineage().items()]
    # A local job's plain files: the DAG run is the source, and no framework is claimed for them.
    assert (version.fields["SourceType"], version.fields["SourceId"]) == (
        "Custom",
        f"train_cifar10/{run.run_id}",
    )
    assert not {"FrameworkType", "FormatType", "InferenceSpec"} & version.fields.keys()


def test_registering_a_run_again_gives_its_version_and_creates_nothing(workspace, plain):
    run = candidate("scheduled__2026-11-22T00:00:00+00:00")
    first = registry().register(run, plain)
    before = writes(workspace)

    assert registry().register(run, plain) == first
    assert writes(workspace) == before == 2  # CreateModel, CreateModelVersion
    assert len(the_model(workspace).versions) == 1


@pytest.mark.slow
def test_two_candidates_are_two_versions_of_one_model(workspace, plain):
    first = registry().register(candidate("run-a"), plain)
    second = registry().register(candidate("run-b", accuracy=0.95), plain)

    assert (first.version, second.version) == ("0.1.0", "0.2.0")
    assert (second.run_id, second.metrics) == ("run-b", {"final_test_accuracy": 0.95})
    assert workspace.count("CreateModel") == 1 and len(workspace.models) == 1


def test_another_deployments_run_of_the_same_id_gets_its_own_version(workspace, plain):
    """Deployments share the workspace; the same DAG and run ids elsewhere are not this run's."""
    ours = registry().register(candidate("scheduled__2026-11-22"), plain)
    theirs = registry().register(
        candidate("scheduled__2026-11-22").model_copy(update={"installation": "team-b"}), plain
    )

    assert (ours.version, theirs.version) == ("0.1.0", "0.2.0")


def test_the_model_is_found_by_its_exact_name_although_listmodels_filters_fuzzily(workspace, plain):
    longer = RegistrySettings(kind="pai", model=f"{MODEL}-v2", workspace_id=WS)
    PaiRegistry(longer, INSTALLATION).register(candidate("run-a"), plain)
    registry().register(candidate("run-a"), plain)

    assert sorted(m.name for m in workspace.models.values()) == [MODEL, f"{MODEL}-v2"]


def test_there_is_no_champion_at_first(workspace, plain):
    assert registry().champion() is None  # no model yet: nothing is created to answer
    registry().register(candidate("run-a"), plain)
    assert registry().champion() is None
    assert workspace.count("CreateModel") == 1


def test_promotion_moves_the_champion_label_and_approves(workspace, plain):
    first = registry().register(candidate("run-a"), plain)
    second = registry().register(candidate("run-b", accuracy=0.95), plain)

    registry().promote(first)
    assert registry().champion() == first
    registry().promote(second)

    assert registry().champion() == second
    assert champions(workspace) == ["0.2.0"]
    assert [v.fields["ApprovalStatus"] for v in the_model(workspace).versions] == ["Approved", "Approved"]


def test_promoting_the_champion_again_writes_nothing(workspace, plain):
    version = registry().register(candidate("run-a"), plain)
    registry().promote(version)
    before = writes(workspace)

    registry().promote(version)

    assert writes(workspace) == before
    assert champions(workspace) == ["0.1.0"]


def test_an_interrupted_promotion_is_completed_by_its_retry(workspace, plain):
    """Labelled, the old champion not yet unlabelled: the newest is answered, the retry finishes."""
    first = registry().register(candidate("run-a"), plain)
    second = registry().register(candidate("run-b"), plain)
    registry().promote(first)
    workspace.deny("DeleteModelVersionLabels")

    with pytest.raises(RegistryError):
        registry().promote(second)
    assert champions(workspace) == ["0.1.0", "0.2.0"]
    assert registry().champion() == second

    workspace.allow("DeleteModelVersionLabels")
    registry().promote(second)
    assert champions(workspace) == ["0.2.0"]
    assert the_model(workspace).versions[1].fields["ApprovalStatus"] == "Approved"


def test_a_run_version_and_the_champion_are_found_beyond_the_first_page(workspace, plain):
    registry().register(candidate("run-0"), plain)
    model = the_model(workspace)
    start = model.versions[0].created_at
    for n in range(1, 130):
        identity = {"installation": "test-deployment", "dag_id": "train_cifar10", "run_id": f"run-{n}"}
        labels = [{"Key": key, "Value": value} for key, value in identity.items()]
        fields = {"Uri": f"oss://{BUCKET}.oss-{REGION}.aliyuncs.com/m/{n}/", "ApprovalStatus": "Pending"}
        model.versions.append(EmulatedModelVersion(f"0.{n + 1}.0", start + n, start + n, labels, fields))
    before = writes(workspace)
    pages_before = workspace.count("ListModelVersions")

    found = registry().register(candidate("run-120"), plain)
    assert found.version == "0.121.0" and found.run_id == "run-120"
    assert workspace.count("ListModelVersions") - pages_before == 2  # 100 + 30: every page was read
    registry().promote(found)
    assert registry().champion() == found
    assert writes(workspace) == before + 2  # the label and the approval; no version created


def test_lost_answers_to_the_creates_do_not_make_a_second_model_or_version(workspace, plain):
    workspace.lose_answer_after_commit("CreateModel")
    workspace.lose_answer_after_commit("CreateModelVersion", times=2)

    registered = registry().register(candidate("run-a"), plain)

    assert registered.version == "0.1.0"
    assert (workspace.count("CreateModel"), workspace.count("CreateModelVersion")) == (1, 1)
    assert len(workspace.models) == 1 and len(the_model(workspace).versions) == 1


@pytest.mark.slow
def test_a_long_run_id_is_shortened_in_its_label_and_kept_whole(workspace, plain):
    run_id = "manual__" + "x" * 150 + ",retry=1"
    label = label_value(run_id)
    assert len(label.encode()) == LABEL_MAX_BYTES and "=" not in label and "," not in label
    assert label != label_value(run_id + "2")

    first = registry().register(candidate(run_id), plain)
    assert registry().register(candidate(run_id), plain) == first
    registry().promote(first)
    champion = registry().champion()
    assert champion is not None and champion.run_id == run_id
    assert workspace.count("CreateModelVersion") == 1


def test_a_refused_call_names_the_workspace_the_model_and_the_permission(workspace, plain):
    workspace.deny("CreateModelVersion")

    with pytest.raises(RegistryError) as caught:
        registry().register(candidate("run-a"), plain)

    message = str(caught.value)
    assert f"PAI model {MODEL!r} in workspace {WS}" in message and "Forbidden.RAM" in message
    assert (
        "(fix: grant the RAM identity of connection alibaba_cloud_default paiworkspace:CreateModelVersion"
        in (message)
    )


@pytest.mark.slow
def test_artifacts_outside_oss_are_refused_before_any_call(workspace, plain):
    local = candidate("run-a").model_copy(update={"artifacts_uri": "/srv/artifacts/cifar10/run-a/"})

    with pytest.raises(RegistryError, match=r"OSS locations only.*\(fix: publish the artifact sets"):
        registry().register(local, plain)
    assert workspace.requests == []


def test_a_registry_without_a_workspace_says_where_to_set_it():
    with pytest.raises(RegistryError, match=r"names no workspace \(fix: set workspace_id"):
        PaiRegistry(RegistrySettings(kind="pai", model=MODEL), INSTALLATION)


@pytest.mark.slow
def test_deployments_sharing_a_workspace_each_label_only_their_own_champion(
    workspace: AIWorkspaceEmulator,
    plain: PublishedFiles,
) -> None:
    """Production's champion keeps its label when staging, sharing the workspace and the model
    name, promotes its own; and staging may not label production's version."""
    good = registry("ml-prod").register(candidate("scheduled__1", 0.9, installation="ml-prod"), plain)
    registry("ml-prod").promote(good)
    bad = registry("ml-staging").register(candidate("scheduled__1", 0.1, installation="ml-staging"), plain)
    registry("ml-staging").promote(bad)

    assert registry("ml-prod").champion() == good and registry("ml-staging").champion() == bad
    assert sorted(champions(workspace)) == sorted([good.version, bad.version]), "one label each"
    with pytest.raises(RegistryError, match="is not one installation ml-staging registered"):
        registry("ml-staging").promote(good)


@pytest.mark.parametrize(
    ("flavors", "framework"),
    [
        (("python_function", "pytorch"), "Pytorch"),
        (("python_function", "xgboost"), "XGBoost"),
        (("python_function", "sklearn"), None),  # a framework PAI has no name for
    ],
)
def test_an_mlflow_models_flavour_gives_the_versions_framework_and_never_a_format(
    workspace: AIWorkspaceEmulator, tmp_path: Path, flavors: tuple[str, ...], framework: str | None
) -> None:
    """PAI's FrameworkType names the model's framework; none of its FormatTypes is an MLflow model
    folder, and no EAS processor serves one, so FormatType and InferenceSpec stay unset."""
    registry().register(candidate("run-a"), published(tmp_path / "set", flavors=flavors))

    (version,) = the_model(workspace).versions
    assert version.fields.get("FrameworkType") == framework
    assert not {"FormatType", "InferenceSpec"} & version.fields.keys()
    listed = AIWorkspaceHook().model_versions(the_model(workspace).model_id)
    assert [v.framework_type for v in listed] == [framework], "as PAI's console reads it"


def test_a_dlc_job_is_the_versions_source(workspace: AIWorkspaceEmulator, tmp_path: Path) -> None:
    registry().register(candidate("run-a"), published(tmp_path / "set", backend="dlc", flavors=("pytorch",)))

    (version,) = the_model(workspace).versions
    assert version.fields["SourceType"] == "Custom"  # PAI documents no source type for a DLC job
    assert version.fields["SourceId"] == f"region={REGION},workspaceId={WS},kind=DlcJob,id={JOB_ID}"


def test_a_held_candidate_is_registered_rejected_and_a_promotion_approves_it(
    workspace: AIWorkspaceEmulator, plain: PublishedFiles
) -> None:
    run = candidate("run-a").model_copy(update={"passed_gate": False, "held": True})
    held = registry().register(run, plain)

    (version,) = the_model(workspace).versions
    assert version.fields["ApprovalStatus"] == "Rejected"
    assert version.fields["ExtraInfo"] == {"lineage": run.lineage(), "rejection": HELD_REASON}

    registry().promote(held)  # e.g. a person later promotes it by hand: no stale rejection stays
    assert version.fields["ApprovalStatus"] == "Approved"
    assert version.fields["ExtraInfo"] == {"lineage": run.lineage()}


def test_a_backfills_candidate_not_held_is_registered_pending(
    workspace: AIWorkspaceEmulator, plain: PublishedFiles
) -> None:
    registry().register(candidate("backfill__1").model_copy(update={"passed_gate": False}), plain)

    assert the_model(workspace).versions[0].fields["ApprovalStatus"] == "Pending"


def test_a_rejected_promotion_marks_the_version_rejected_once(
    workspace: AIWorkspaceEmulator, plain: PublishedFiles
) -> None:
    run = candidate("run-a")
    version = registry().register(run, plain)
    before = writes(workspace)

    registry().reject(version, "Reject, answered by alice")
    registry().reject(version, "Reject, answered by alice")  # a retried task

    (stored,) = the_model(workspace).versions
    assert stored.fields["ApprovalStatus"] == "Rejected"
    assert stored.fields["ExtraInfo"] == {"lineage": run.lineage(), "rejection": "Reject, answered by alice"}
    assert stored.labels == [{"Key": key, "Value": value} for key, value in run.lineage().items()]
    assert writes(workspace) == before + 1 and workspace.count("UpdateModelVersion") == 1
    registry().reject(version, "Reject, the approval timed out")
    assert stored.fields["ExtraInfo"]["rejection"] == "Reject, the approval timed out"
    assert workspace.count("UpdateModelVersion") == 2


def test_another_installations_version_is_never_rejected(
    workspace: AIWorkspaceEmulator, plain: PublishedFiles
) -> None:
    theirs = registry("ml-prod").register(candidate("scheduled__1", installation="ml-prod"), plain)
    registry("ml-staging").register(candidate("scheduled__1", installation="ml-staging"), plain)

    with pytest.raises(RegistryError, match=r"is not one installation ml-staging registered.*\(fix: reject"):
        registry("ml-staging").reject(theirs, "Reject")

    assert [v.fields["ApprovalStatus"] for v in the_model(workspace).versions] == ["Pending", "Pending"]
    assert workspace.count("UpdateModelVersion") == 0


def test_the_dry_run_shows_the_framework_the_source_and_the_rejections() -> None:
    settings = RegistrySettings(kind="pai", model=MODEL, workspace_id=WS, region=REGION)

    calls = planned_registry_calls(settings, INSTALLATION)

    (version,) = calls.register
    assert version.body["SourceType"] == "Custom"
    assert version.body["SourceId"].startswith(
        f"region={REGION},workspaceId={WS},kind=DlcJob,id=<the DLC job id>"
    )
    assert version.body["FrameworkType"].startswith("<Pytorch for an MLflow pytorch model")
    assert (
        "FormatType" not in version.body and "Rejected instead of Pending when the gate holds" in version.note
    )
    (promotion,) = calls.promote
    assert "a rejected promotion sets ApprovalStatus Rejected" in promotion.note


def _refused(call: Callable[[], Any]) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"framework_type": "PyTorch"}, "FrameworkType"),  # the documented spelling is Pytorch
        ({"format_type": "MLflow"}, "FormatType"),
        ({"inference_spec": "tensorflow_gpu_1.12"}, "InferenceSpec"),  # an object, as the SDK types it
    ],
)
def test_the_emulator_refuses_what_pai_does_not_document(
    workspace: AIWorkspaceEmulator, fields: dict[str, Any], named: str
) -> None:
    hook = AIWorkspaceHook()
    model_id = hook.create_model(ws_models.CreateModelRequest(workspace_id=WS, model_name=MODEL))
    uri = f"oss://{BUCKET}.oss-{REGION}.aliyuncs.com/m/"
    request = ws_models.CreateModelVersionRequest(uri=uri, **fields)

    error = _refused(lambda: hook.conn.create_model_version(model_id, request))

    assert (error.status_code, error.code) == (400, "InvalidParameter") and named in error.message
    assert the_model(workspace).versions == []
