"""PodStager through the cncf KubernetesHook and AsyncKubernetesHook against the Kubernetes API fake."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from aliyun_training.kubernetes.pod_status import pending_problem
from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging.pod import PodStager, StagingPodError, build_pod, staging_pod_name
from aliyun_training.staging.pod import PodStagerSettings as Settings
from aliyun_training.staging.volumes import ensure_version_volume
from aliyun_training.validation import SpecError, validate_record
from fakes.kubernetes_fake import KubernetesFake, TrainingScript
from tests import pod_harness as harness
from tests.pod_harness import CONN_ID, NS, SteppedClock, core, exists, kubernetes_fake, posts

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

IMAGE = "registry-vpc.cn-wulanchabu.aliyuncs.com/ml/aliyun-training:1.4.0"
SOURCE = "oss://ml-datasets/cifar10/2026-11-22/"
SECRET_VALUES = {
    "akId": "LTAI5tFAKEACCESSKEYID",
    "akSecret": "fAkEaCcEsSkEySeCrEtVaLuE0123",
    "securityToken": "CAIS-fake-sts-token-value",
}


clock = harness.stepped_clock


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: SteppedClock) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, clock) as server:
        ensure_version_volume(
            CONN_ID,
            namespace=NS,
            name="cpfs-root",
            kind="cpfs",
            server="cpfs-0123abcd.cn-wulanchabu.cpfs.aliyuncs.com",
            path="/share",
        )
        core().create_namespaced_secret(
            NS, {"metadata": {"name": "oss-credentials"}, "stringData": SECRET_VALUES}
        )
        yield server


def settings(**overrides: Any) -> dict[str, Any]:
    return {
        "kubernetes_conn_id": CONN_ID,
        "namespace": NS,
        "image": IMAGE,
        "source_uri": SOURCE,
        "target_root": "/mnt/cpfs/datasets/cifar10",
        "version": "2026-11-22",
        "staging_pvc": "cpfs-root",
        "oss_endpoint": "oss-cn-wulanchabu-internal.aliyuncs.com",
        "region": "cn-wulanchabu",
        "credentials_secret": "oss-credentials",
        "workers": 8,
        **overrides,
    }


def staged_line(**overrides: Any) -> str:
    fields: dict[str, Any] = {
        "uri": "/mnt/cpfs/datasets/cifar10/2026-11-22",
        "version": "2026-11-22",
        "files": 5000,
        "bytes": 500_000_000,
        "manifest_uri": "/mnt/cpfs/datasets/cifar10/2026-11-22/manifest.json",
        "checksum": "sha256:" + "ab" * 32,
        "transferred_files": 5000,
        "transferred_bytes": 500_000_000,
        "seconds": 12.5,
        "source_uri": SOURCE,
    }
    record = StagedDataset(**{**fields, **overrides})
    return json.dumps(record.model_dump(mode="json"))


PROGRESS = [
    "2026-11-22 10:00:01,000 INFO Staged 120/5000 files, 12.0/500.0 MB, 40.0 MB/s, ETA 12 s",
    "2026-11-22 10:00:05,000 INFO Staged 5000/5000 files, 500.0/500.0 MB, 41.0 MB/s, ETA 0 s",
    "2026-11-22 10:00:05,100 INFO Published /mnt/cpfs/datasets/cifar10/2026-11-22 (5000 files, 5000 copied)",
]


def succeeding(extra_lines: list[str] | None = None) -> TrainingScript:
    """Created 1 s, Running 4 s (one log line per second), then Succeeded."""
    lines = [*PROGRESS, staged_line()] if extra_lines is None else extra_lines
    return TrainingScript(phases=[("Created", 1.0), ("Running", float(len(lines)))], log_lines=lines)


def pod_posts(fake: KubernetesFake) -> list[dict[str, Any]]:
    return posts(fake, "pods")


def pod_exists(name: str) -> bool:
    return exists("pod", name)


# -- the pod as sent -----------------------------------------------------------------------------


def test_the_pod_runs_the_staging_cli_on_the_claim_with_credentials_by_reference(
    fake: KubernetesFake,
) -> None:
    fake.default_script = succeeding()
    stager = PodStager(**settings(node_selector={"pool": "cpu"}, service_account="oss-reader"))
    handle = stager.submit()

    (sent,) = pod_posts(fake)
    assert sent == build_pod(stager.settings)
    assert sent["metadata"]["name"] == handle["pod"] == stager.pod_name
    assert re.fullmatch(r"stage-cifar10-2026-11-22-[0-9a-f]{8}", handle["pod"])
    assert sent["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "aliyun-training",
        "app.kubernetes.io/component": "dataset-staging",
        "aliyun-training/dataset": "cifar10",
        "aliyun-training/dataset-version": "2026-11-22",
    }
    assert sent["metadata"]["annotations"] == {
        "aliyun-training/source-uri": SOURCE,
        "aliyun-training/target": "/mnt/cpfs/datasets/cifar10/2026-11-22",
    }
    spec = sent["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["volumes"] == [{"name": "staging", "persistentVolumeClaim": {"claimName": "cpfs-root"}}]
    assert spec["nodeSelector"] == {"pool": "cpu"} and spec["serviceAccountName"] == "oss-reader"
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "aliyun_training.staging"]
    assert container["args"] == [
        "--source",
        SOURCE,
        "--target",
        "/mnt/cpfs/datasets/cifar10",
        "--version",
        "2026-11-22",
        "--endpoint",
        "oss-cn-wulanchabu-internal.aliyuncs.com",
        "--region",
        "cn-wulanchabu",
        "--workers",
        "8",
    ]
    assert container["volumeMounts"] == [{"name": "staging", "mountPath": "/mnt/cpfs"}]
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    assert container["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {
            "name": "ALIBABA_CLOUD_ACCESS_KEY_ID",
            "valueFrom": {"secretKeyRef": {"name": "oss-credentials", "key": "akId"}},
        },
        {
            "name": "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
            "valueFrom": {"secretKeyRef": {"name": "oss-credentials", "key": "akSecret"}},
        },
        {
            "name": "ALIBABA_CLOUD_SECURITY_TOKEN",
            "valueFrom": {
                "secretKeyRef": {"name": "oss-credentials", "key": "securityToken", "optional": True}
            },
        },
    ]
    # The pod as the server stored it keeps the same references (nothing was resolved on the way).
    stored = core().read_namespaced_pod(handle["pod"], NS)
    assert stored.spec.containers[0].env[1].value_from.secret_key_ref.key == "akId"
    assert stored.spec.containers[0].env[1].value is None


def test_key_names_are_configurable_and_no_secret_means_the_default_credential_chain() -> None:
    custom = build_pod(
        settings(access_key_id_key="id", access_key_secret_key="secret", security_token_key=None)
    )
    env = custom["spec"]["containers"][0]["env"]
    assert [(e["name"], e["valueFrom"]["secretKeyRef"]["key"]) for e in env[1:]] == [
        ("ALIBABA_CLOUD_ACCESS_KEY_ID", "id"),
        ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret"),
    ]
    rrsa = build_pod(settings(credentials_secret=None, oss_endpoint=None, region=None))
    container = rrsa["spec"]["containers"][0]
    assert container["env"] == [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    assert "--endpoint" not in container["args"] and "--region" not in container["args"]
    assert rrsa["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in rrsa["spec"]


@pytest.mark.slow
def test_no_secret_value_is_ever_sent_returned_or_reported(fake: KubernetesFake, clock: SteppedClock) -> None:
    fake.default_script = succeeding()
    stager = PodStager(**settings())
    handle = stager.submit()
    clock.at(10)
    staged = stager.result(handle)
    failed = TrainingScript(phases=[("Running", 1.0)], outcome="Failed", log_lines=["error: boom"])
    fake.default_script = failed
    other = PodStager(**settings(version="2026-11-29"))
    other_handle = other.submit()
    clock.at(20)
    status = harness.polled(other, other_handle)
    assert status.state == "failed"

    seen = harness.sent_bodies(fake)
    seen += [json.dumps(handle), json.dumps(stager.config), staged.model_dump_json(), status.message]
    harness.assert_none_contains(SECRET_VALUES.values(), seen)


# -- lifecycle -----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_pod_runs_to_success_and_its_json_line_becomes_the_staged_dataset(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = succeeding()
    stager = PodStager(**settings())
    handle = stager.submit()
    assert handle == {"mode": "pod", "namespace": NS, "pod": stager.pod_name, "uid": handle["uid"]}

    clock.at(0.5)
    status = await stager.apoll(handle)
    assert status.state == "running"
    assert status.progress == f"pod {NS}/{stager.pod_name} Pending: waiting for the container to start"

    clock.at(2.5)
    status = await stager.apoll(handle)
    assert (status.state, status.progress) == ("running", PROGRESS[0])
    clock.at(4.5)
    assert (await stager.apoll(handle)).progress == PROGRESS[2]

    clock.at(6)
    assert (await stager.apoll(handle)).state == "succeeded"
    # A rebuilt stager (as in the triggerer, then the worker) reads the same run.
    rebuilt = PodStager(**json.loads(json.dumps(stager.config)))
    staged = rebuilt.result(handle)
    assert staged.mode == "pod" and staged.pvc is None
    assert staged.uri == "/mnt/cpfs/datasets/cifar10/2026-11-22" and staged.files == 5000
    assert staged.source_uri == SOURCE and staged.checksum == "sha256:" + "ab" * 32
    assert rebuilt.relative_path(staged.uri) == "datasets/cifar10/2026-11-22"
    assert not pod_exists(stager.pod_name)
    assert fake.count("DELETE", f"/pods/{stager.pod_name}") == 1


def test_submitting_again_reattaches_instead_of_creating_a_second_pod(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    harness.assert_submitting_again_reattaches(fake, PodStager(**settings()), succeeding(), clock, 2, 10)


@pytest.mark.slow
async def test_a_failed_pod_reports_exit_code_reason_and_log_tail_and_is_replaced_on_resubmit(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    lines = [f"line {i:02d}" for i in range(29)] + [
        "error: source: oss://ml-datasets/cifar10/2026-11-22/ has no objects (fix: check the prefix)"
    ]
    fake.default_script = TrainingScript(
        phases=[("Created", 1.0), ("Running", 3.0)], outcome="Failed", exit_code=2, log_lines=lines
    )
    stager = PodStager(**settings())
    handle = stager.submit()
    clock.at(5)
    status = await stager.apoll(handle)
    assert status.state == "failed"
    assert status.message.startswith(
        f"staging pod {NS}/{stager.pod_name} failed: container staging exited with code 2 (Error), "
        "the staging CLI rejected its input; last log lines:\n"
    )
    assert "has no objects (fix: check the prefix)" in status.message
    assert "line 10" in status.message and "line 09" not in status.message  # the last 20 lines

    # The old handle no longer addresses the new pod.
    await harness.assert_a_resubmit_replaces_the_failed_pod(fake, stager, handle, succeeding())
    assert len(pod_posts(fake)) == 2 and fake.count("DELETE", f"/pods/{stager.pod_name}") == 1


@pytest.mark.slow
async def test_an_oom_killed_pod_suggests_more_memory(fake: KubernetesFake, clock: SteppedClock) -> None:
    fake.default_script = TrainingScript(phases=[("Running", 1.0)], outcome="OOMKilled", log_lines=["Staged"])
    stager = PodStager(**settings(memory="8Gi"))
    handle = stager.submit()
    clock.at(3)
    status = await stager.apoll(handle)
    assert "exited with code 137 (OOMKilled)" in status.message
    assert "raise memory from 8Gi or lower workers" in status.message


@pytest.mark.slow
@pytest.mark.parametrize(("outcome", "expected"), harness.CANNOT_START_YET)
async def test_a_pod_that_cannot_start_keeps_running_with_the_reason_as_progress(
    fake: KubernetesFake, clock: SteppedClock, outcome: str, expected: str
) -> None:
    await harness.assert_a_pod_that_cannot_start_waits(
        fake, PodStager(**settings()), clock, outcome, expected
    )


def test_config_errors_that_waiting_cannot_fix_are_fatal() -> None:
    def pod(reason: str, message: str) -> client.V1Pod:
        waiting = client.V1ContainerStateWaiting(reason=reason, message=message)
        status = client.V1ContainerStatus(
            name="staging",
            image=IMAGE,
            image_id="",
            ready=False,
            restart_count=0,
            state=client.V1ContainerState(waiting=waiting),
        )
        return client.V1Pod(status=client.V1PodStatus(phase="Pending", container_statuses=[status]))

    assert pending_problem(pod("CreateContainerConfigError", 'secret "oss-credentials" not found')) == (
        'CreateContainerConfigError: secret "oss-credentials" not found',
        True,
    )
    assert pending_problem(pod("ErrImagePull", "not found")) == ("ErrImagePull: not found", False)
    assert pending_problem(pod("ContainerCreating", "")) == ("waiting for the container to start", False)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"credentials_secret": "oss-missing"}, 'secret "oss-missing" not found'),
        (
            {"access_key_id_key": "AccessKeyId"},
            f"couldn't find key AccessKeyId in Secret {NS}/oss-credentials",
        ),
    ],
)
async def test_a_missing_credentials_secret_or_key_fails_at_once(
    fake: KubernetesFake, clock: SteppedClock, overrides: dict[str, Any], error: str
) -> None:
    fake.default_script = succeeding()
    stager = PodStager(**settings(**overrides))
    handle = stager.submit()
    clock.at(2)
    status = await stager.apoll(handle)
    assert (status.state, status.message) == (
        "failed",
        f"staging pod {NS}/{stager.pod_name} cannot start: CreateContainerConfigError: {error}",
    )


@pytest.mark.slow
async def test_a_deleted_pod_is_a_failure(fake: KubernetesFake) -> None:
    await harness.assert_a_deleted_pod_fails(fake, PodStager(**settings()), succeeding(), "staging")


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["Running", "Failed"])
async def test_a_pod_deleted_between_its_status_and_its_log_leaves_no_error_body_as_log(
    fake: KubernetesFake, clock: SteppedClock, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    """kubernetes_asyncio raises nothing for an unloaded 404: its JSON body must not pass for log lines."""
    script = TrainingScript(phases=[("Running", 10.0)], outcome="Failed", exit_code=1, log_lines=[])
    stager = PodStager(**settings())
    handle = harness.started(fake, stager, script)
    clock.at(5 if phase == "Running" else 20)
    harness.delete_after_reading(monkeypatch, stager)
    status = await stager.apoll(handle)
    assert not pod_exists(handle["pod"])
    if phase == "Running":
        assert (status.state, status.progress) == ("running", f"pod {NS}/{handle['pod']} Running")
    else:
        assert status.state == "failed"
        assert status.message == (
            f"staging pod {NS}/{handle['pod']} failed: container staging exited with code 1 (Error), "
            "staging failed; no log"
        )
    for text in (status.progress or "", status.message or ""):
        assert "NotFound" not in text and '"kind"' not in text


@pytest.mark.slow
def test_stop_deletes_the_pod_and_a_gone_pod_is_fine(fake: KubernetesFake) -> None:
    harness.stop_twice(fake, PodStager(**settings()), succeeding())  # already gone the second time: no error


@pytest.mark.slow
def test_stop_never_deletes_a_newer_attempts_pod(fake: KubernetesFake) -> None:
    harness.stop_an_older_handle(fake, PodStager(**settings()), succeeding())


def test_a_succeeded_pod_without_a_json_line_is_an_error_and_is_removed(
    fake: KubernetesFake, clock: SteppedClock
) -> None:
    fake.default_script = succeeding(PROGRESS)
    stager = PodStager(**settings())
    handle = stager.submit()
    clock.at(10)
    with pytest.raises(StagingPodError, match="printed no StagedDataset JSON line") as raised:
        stager.result(handle)
    assert PROGRESS[-1] in str(raised.value)
    assert not pod_exists(handle["pod"])


def test_a_json_line_of_another_version_is_refused(fake: KubernetesFake, clock: SteppedClock) -> None:
    fake.default_script = succeeding([*PROGRESS, staged_line(version="2026-11-15")])
    stager = PodStager(**settings())
    handle = stager.submit()
    clock.at(10)
    with pytest.raises(StagingPodError, match="staged version 2026-11-15, not 2026-11-22"):
        stager.result(handle)


def test_result_before_success_is_an_error(fake: KubernetesFake) -> None:
    harness.assert_result_before_success_fails(fake, PodStager(**settings()), succeeding())


# -- refusals ------------------------------------------------------------------------------------


def test_a_missing_staging_claim_fails_before_any_pod_is_created(fake: KubernetesFake) -> None:
    with pytest.raises(SpecError, match="staging_pvc: claim cpfs-missing does not exist in namespace"):
        PodStager(**settings(staging_pvc="cpfs-missing")).submit()
    assert pod_posts(fake) == []


def test_a_foreign_pod_under_the_name_is_never_touched(fake: KubernetesFake) -> None:
    harness.assert_a_foreign_pod_is_never_touched(fake, PodStager(**settings()), "staging")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"target_root": "/data/cifar10"}, "target_root: /data/cifar10 is not under"),
        ({"target_root": "/mnt/cpfs"}, "target_root: /mnt/cpfs is not under"),
        ({"version": "../x"}, "version:"),
        ({"source_uri": "ml-datasets/cifar10"}, "source_uri:"),
        ({"workers": 0}, "workers:"),
        ({"api_key": "x"}, "api_key:"),
    ],
)
def test_bad_settings_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=re.escape(field)):
        PodStager(**settings(**overrides))


def test_pod_names_are_stable_dns_labels_that_differ_per_source() -> None:
    name = staging_pod_name(validate_record(Settings, settings()))
    assert name == staging_pod_name(validate_record(Settings, settings()))
    assert name != staging_pod_name(validate_record(Settings, settings(source_uri="oss://other/cifar10/")))
    long = staging_pod_name(
        validate_record(Settings, settings(dataset="An_Extremely.Long-Dataset-Name" * 3, version="V1.0_rc2"))
    )
    harness.assert_dns_label(long)
