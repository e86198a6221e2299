"""The ``acr`` image builder (image/acr.py) through the real cr20181201 SDK against the ACR emulator."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.image.acr import (
    AcrBuilder,
    AcrBuildError,
    build_record_request,
    failure_message,
    normalize_digest,
    rule_update_request,
)
from aliyun_training.remote import RemoteStatus
from aliyun_training.validation import SpecError
from fakes.acr import AcrEmulator
from fakes.base import ManualClock
from fakes.cloud import use_alibaba_connection

if TYPE_CHECKING:
    from collections.abc import Iterator

AK, SK = "LTAI-acr-test", "acr-secret-value"
INSTANCE = "cri-emulated0001"
TAG = "3f9a1c2b7d4e"
REGISTRY = "emulated-registry.cn-wulanchabu.cr.aliyuncs.com"
IMAGE = f"{REGISTRY}/ml/train:{TAG}"
#: pending 2 s + 9 steps x 5 s + push 5 s
BUILD_SECONDS = 52


@pytest.fixture
def acr(monkeypatch: pytest.MonkeyPatch) -> Iterator[AcrEmulator]:
    with AcrEmulator({AK: SK}, instance_id=INSTANCE, registry=REGISTRY) as emulator:
        emulator.clock = ManualClock(1_800_000_000.0)
        use_alibaba_connection(
            monkeypatch, {"cr": emulator.endpoint}, AK, SK, retry={"max_attempts": 3, "base_delay": 0.001}
        )
        yield emulator
        assert emulator.internal_errors == []


@pytest.fixture
def repo(acr: AcrEmulator) -> Any:
    return acr.add_repository("ml", "train")


@pytest.fixture
def rule(acr: AcrEmulator, repo: Any) -> Any:
    return acr.add_build_rule(
        repo.repo_id,
        image_tag="0ld0ld0ld0ld",
        platforms=["linux/amd64", "linux/arm64"],
        build_args=["PYTHON=3.11"],
        push_type="GIT_TAG",
        push_name="image-v1",
        dockerfile_location="/include/docker",
    )


def builder(repo: Any, rule: Any, **overrides: Any) -> AcrBuilder:
    config = {
        "instance_id": INSTANCE,
        "repo_id": repo.repo_id,
        "build_rule_id": rule.rule_id,
        "tag": TAG,
        "image": IMAGE,
        **overrides,
    }
    return AcrBuilder(**config)


async def poll_after(
    acr: AcrEmulator, build: AcrBuilder, handle: dict[str, Any], seconds: float
) -> RemoteStatus:
    acr.clock.advance(seconds)  # type: ignore[attr-defined]
    return await build.apoll(handle)


async def test_build_polled_to_success_returns_the_digest(acr, repo, rule):
    build = builder(repo, rule)
    handle = build.submit()
    assert handle["build_record_id"] in acr.builds and handle["reattached"] is False
    assert handle["repo_id"] == repo.repo_id and handle["tag"] == TAG
    # The rule now builds our tag; its other settings went back unchanged.
    assert acr.count("UpdateRepoBuildRule") == 1
    assert rule.image_tag == TAG
    assert rule.platforms == ["linux/amd64", "linux/arm64"] and rule.build_args == ["PYTHON=3.11"]
    assert (rule.push_type, rule.push_name, rule.dockerfile_location) == (
        "GIT_TAG",
        "image-v1",
        "/include/docker",
    )

    status = await build.apoll(handle)
    assert status.state == "running" and "PENDING" in status.progress
    status = await poll_after(acr, build, handle, 2 + 4 * 5 + 1)
    assert status.state == "running"
    assert "BUILDING" in status.progress and "Step 5/9 : RUN apt-get install" in status.progress
    status = await poll_after(acr, build, handle, BUILD_SECONDS)
    assert status == RemoteStatus("succeeded", progress=status.progress)
    assert "digest: sha256:" in status.progress

    result = build.result(handle)
    assert result["image"] == IMAGE
    assert result["digest"] == "sha256:" + acr.tags[(repo.repo_id, TAG)].digest
    assert result["log_tail"] == acr.log_of(handle["build_record_id"])[-20:]
    assert len(result["log_tail"]) == 20


def test_submit_sends_exactly_the_requests_the_pure_builders_make(acr, repo, rule):
    build = builder(repo, rule)
    listed = SimpleNamespace(
        build_args=list(rule.build_args),
        dockerfile_location=rule.dockerfile_location,
        dockerfile_name=rule.dockerfile_name,
        platforms=list(rule.platforms),
        push_name=rule.push_name,
        push_type=rule.push_type,
    )  # the rule as ListRepoBuildRule reports it, before the update

    build.submit()

    (update,) = acr.requests_for("UpdateRepoBuildRule")
    (create,) = acr.requests_for("CreateBuildRecordByRule")
    assert update.query == _flat(rule_update_request(build.settings, repo.repo_id, listed).to_map())
    assert create.query == _flat(build_record_request(build.settings, repo.repo_id).to_map())


def _flat(body: dict[str, Any]) -> dict[str, str]:
    """A request map as an RPC query carries it: lists flattened to ``Key.1``, ``Key.2``, ..."""
    flat: dict[str, str] = {}
    for key, value in body.items():
        if isinstance(value, list):
            flat.update({f"{key}.{n}": str(item) for n, item in enumerate(value, start=1)})
        else:
            flat[key] = str(value)
    return flat


async def test_rule_already_on_the_tag_is_not_updated(acr, repo, rule):
    rule.image_tag = TAG
    build = builder(repo, rule)
    build.submit()
    assert acr.count("UpdateRepoBuildRule") == 0
    assert acr.count("CreateBuildRecordByRule") == 1


async def test_failed_build_names_the_failing_step_and_the_log_tail(acr, repo, rule):
    acr.fail_next_build(at_step=5, output=("E: Unable to locate package libnl-3-dev",), exit_code=100)
    build = builder(repo, rule)
    handle = build.submit()
    status = await poll_after(acr, build, handle, BUILD_SECONDS)
    assert status.state == "failed"
    message = status.message
    first_line = message.splitlines()[0]
    assert "FAILED" in first_line
    assert "at Step 5/9 : RUN apt-get install -y --no-install-recommends libnl-3-dev" in first_line
    assert "returned a non-zero code: 100" in first_line
    assert "E: Unable to locate package libnl-3-dev" in message
    log = acr.log_of(handle["build_record_id"])
    for line in log[-20:]:
        assert line in message
    with pytest.raises(AcrBuildError, match="Step 5/9"):
        build.result(handle)


async def test_retried_submit_reattaches_to_the_same_build(acr, repo, rule):
    first = builder(repo, rule).submit()
    again = builder(repo, rule).submit()  # a retried task: a new builder, same settings
    assert again["build_record_id"] == first["build_record_id"]
    assert again["reattached"] is True
    assert acr.count("CreateBuildRecordByRule") == 1
    assert acr.count("UpdateRepoBuildRule") == 1

    # A finished, successful build of the tag is reattached to as well (the image exists).
    build = builder(repo, rule)
    assert (await poll_after(acr, build, first, BUILD_SECONDS)).state == "succeeded"
    assert builder(repo, rule).submit()["build_record_id"] == first["build_record_id"]
    assert acr.count("CreateBuildRecordByRule") == 1


async def test_a_forced_rebuild_does_not_reattach_to_the_succeeded_build(acr, repo, rule):
    build = builder(repo, rule)
    first = build.submit()
    assert (await poll_after(acr, build, first, BUILD_SECONDS)).state == "succeeded"

    forced = builder(repo, rule, force=True).submit()

    assert forced["build_record_id"] != first["build_record_id"] and forced["reattached"] is False
    assert acr.count("CreateBuildRecordByRule") == 2


async def test_succeeded_build_whose_tag_was_deleted_is_built_again(acr, repo, rule):
    build = builder(repo, rule)
    first = build.submit()
    assert (await poll_after(acr, build, first, BUILD_SECONDS)).state == "succeeded"
    del acr.tags[(repo.repo_id, TAG)]
    with pytest.raises(AcrBuildError, match="is not in repository"):
        build.result(first)
    again = builder(repo, rule).submit()
    assert again["build_record_id"] != first["build_record_id"] and again["reattached"] is False


async def test_submit_after_a_failed_build_starts_a_new_one(acr, repo, rule):
    acr.fail_next_build(at_step=2)
    build = builder(repo, rule)
    failed = build.submit()
    assert (await poll_after(acr, build, failed, BUILD_SECONDS)).state == "failed"
    retried = builder(repo, rule).submit()
    assert retried["build_record_id"] != failed["build_record_id"] and retried["reattached"] is False
    assert acr.count("CreateBuildRecordByRule") == 2
    assert acr.count("UpdateRepoBuildRule") == 1  # the rule already had the tag


async def test_stop_cancels_a_running_build_and_ignores_a_finished_one(acr, repo, rule):
    build = builder(repo, rule)
    handle = build.submit()
    assert (await poll_after(acr, build, handle, 10)).state == "running"
    build.stop(handle)
    assert acr.count("CancelRepoBuildRecord") == 1
    assert acr.builds[handle["build_record_id"]].status == "CANCELED"
    status = await build.apoll(handle)
    assert status.state == "failed" and "was canceled" in status.message
    build.stop(handle)  # already finished: nothing to do, no error
    assert acr.count("CancelRepoBuildRecord") == 1
    # A canceled build is not reattached to.
    assert builder(repo, rule).submit()["build_record_id"] != handle["build_record_id"]


async def test_repository_resolved_from_namespace_and_name(acr, repo, rule):
    handle = builder(repo, rule, repo_id=None, namespace="ml", repo_name="train").submit()
    assert handle["repo_id"] == repo.repo_id
    request = acr.requests_for("GetRepository")[0]
    assert request.query["RepoNamespaceName"] == "ml" and request.query["RepoName"] == "train"
    assert "RepoId" not in request.query


def test_bad_settings_name_the_field_and_the_fix(repo, rule):
    with pytest.raises(SpecError, match=r"instance_id: .* \(fix: give the ACR Enterprise instance id"):
        builder(repo, rule, instance_id="inst-1")
    with pytest.raises(SpecError, match=r"does not end with the tag .* \(fix: "):
        builder(repo, rule, image=f"{REGISTRY}/ml/train:other")
    with pytest.raises(SpecError, match="repo_id, or namespace and repo_name"):
        builder(repo, rule, repo_id=None)
    with pytest.raises(SpecError, match="tag: "):
        builder(repo, rule, tag="bad tag", image=f"{REGISTRY}/ml/train:bad tag")


@pytest.mark.parametrize("soft_errors", [False, True])
def test_unknown_repository_or_rule_is_a_spec_error(acr, repo, rule, soft_errors):
    acr.soft_errors = soft_errors  # some ACR APIs refuse with HTTP 200 and IsSuccess false
    with pytest.raises(SpecError, match=r"repo_id: repository crr-missing0 does not exist .*REPO_NOT_EXIST"):
        builder(repo, rule, repo_id="crr-missing0").submit()
    with pytest.raises(SpecError, match=r"build_rule_id: repository .* has no build rule crbr-nope"):
        builder(repo, rule, build_rule_id="crbr-nope").submit()


def test_image_must_be_in_the_repository(acr, repo, rule):
    other = acr.add_repository("ml", "eval")
    with pytest.raises(SpecError, match=r"image: .* is not in repository ml/eval"):
        builder(repo, rule, repo_id=other.repo_id).submit()


async def test_build_of_another_tag_fails_instead_of_passing_as_ours(acr, repo, rule):
    handle = builder(repo, rule).submit()
    stolen = {**handle, "tag": "a1b2c3d4e5f6", "image": f"{REGISTRY}/ml/train:a1b2c3d4e5f6"}
    build = builder(repo, rule, tag="a1b2c3d4e5f6", image=stolen["image"])
    status = await build.apoll(stolen)
    assert status.state == "failed"
    assert (
        f"builds tag {TAG}, not a1b2c3d4e5f6" in status.message and "build rule of its own" in status.message
    )


async def test_log_is_read_in_pages_and_only_once(monkeypatch):
    with AcrEmulator(
        {AK: SK}, instance_id=INSTANCE, registry=REGISTRY, log_page_size=3, digest_prefix=True
    ) as acr:
        acr.clock = ManualClock(1_800_000_000.0)
        use_alibaba_connection(monkeypatch, {"cr": acr.endpoint}, AK, SK)
        repo = acr.add_repository("ml", "train")
        rule = acr.add_build_rule(repo.repo_id, image_tag=TAG)
        build = builder(repo, rule)
        handle = build.submit()
        await poll_after(acr, build, handle, 12)
        reads = acr.count("ListRepoBuildRecordLog")
        offsets = [int(r.query["Offset"]) for r in acr.requests_for("ListRepoBuildRecordLog")]
        assert offsets == sorted(offsets) and offsets[0] == 0
        await poll_after(acr, build, handle, BUILD_SECONDS)
        later = [int(r.query["Offset"]) for r in acr.requests_for("ListRepoBuildRecordLog")[reads:]]
        assert later[0] == offsets[-1]  # continues where the last poll stopped
        result = build.result(handle)
        assert result["log_tail"] == acr.log_of(handle["build_record_id"])[-20:]
        assert result["digest"] == "sha256:" + acr.tags[(repo.repo_id, TAG)].digest  # no double prefix
        assert acr.internal_errors == []


def test_failure_message_for_buildkit_logs():
    lines = [
        "#5 [2/4] RUN apt-get update",
        "#5 DONE 12.0s",
        "#6 [3/4] RUN pip install -r /tmp/requirements.txt",
        "#7 [4/4] COPY . /opt/training",
        "#6 3.1 ERROR: No matching distribution found for torch==9.9",
        "------",
        " > [3/4] RUN pip install -r /tmp/requirements.txt:",
        "------",
        'ERROR: failed to solve: process "/bin/sh -c pip install -r /tmp/requirements.txt" did not complete '
        "successfully: exit code: 1",
    ]
    message = failure_message("crbrd-1", "FAILED", lines)
    first_line = message.splitlines()[0]
    assert first_line.startswith(
        "ACR build crbrd-1 failed (FAILED) at > [3/4] RUN pip install -r /tmp/requirements.txt:"
    )
    assert "did not complete successfully: exit code: 1" in first_line
    assert "No matching distribution found" in message
    assert failure_message("crbrd-2", "FAILED", []).endswith("(the build log is empty)")


def test_normalize_digest():
    assert normalize_digest("ab" * 32) == "sha256:" + "ab" * 32
    assert normalize_digest("sha256:" + "ab" * 32) == "sha256:" + "ab" * 32


async def test_a_build_of_the_tag_behind_a_full_page_of_newer_records_is_reattached_to(acr, repo, rule):
    build = builder(repo, rule)
    first = build.submit()
    assert (await poll_after(acr, build, first, BUILD_SECONDS)).state == "succeeded"
    for n in range(120):  # newer builds of other tags: ours is on page 2 of 100
        acr.add_finished_build(
            repo.repo_id, rule.rule_id, f"other-{n}", status="FAILED" if n % 2 else "SUCCESS"
        )

    again = builder(repo, rule).submit()

    assert (again["build_record_id"], again["reattached"]) == (first["build_record_id"], True)
    assert acr.count("CreateBuildRecordByRule") == 1
    pages = [(r.query["PageNo"], r.query["PageSize"]) for r in acr.requests_for("ListRepoBuildRecord")]
    assert pages[-2:] == [("1", "100"), ("2", "100")]


@pytest.mark.slow
async def test_the_build_rule_is_found_past_the_first_page_of_rules(acr, repo):
    for n in range(105):
        acr.add_build_rule(repo.repo_id, image_tag=f"other-{n}")
    ours = acr.add_build_rule(repo.repo_id, image_tag="0ld0ld0ld0ld")

    handle = builder(repo, ours).submit()

    assert acr.rules[ours.rule_id].image_tag == TAG
    assert acr.builds[handle["build_record_id"]].rule_id == ours.rule_id
    assert [r.query["PageNo"] for r in acr.requests_for("ListRepoBuildRule")] == ["1", "2"]


def test_runs_that_start_the_same_tag_at_once_end_with_one_build(acr, repo, rule):
    """Two backfill runs look for a build of the tag at the same moment, find none and both start
    one: each lists again and keeps the earliest, so one build runs and both wait for it."""
    both_looked = threading.Barrier(2)

    class RacingBuilder(AcrBuilder):
        def _build_rule(self, hook: Any, repo_id: str) -> Any:
            both_looked.wait(timeout=10)  # both found no build of the tag before either starts one
            return super()._build_rule(hook, repo_id)

    config = {"instance_id": INSTANCE, "repo_id": repo.repo_id, "build_rule_id": rule.rule_id, "tag": TAG}
    handles: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda: handles.append(RacingBuilder(**config, image=IMAGE).submit()))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    builds = sorted(acr.builds.values(), key=lambda build: build.record_id)
    assert len(builds) == 2, "both started one"
    [kept] = [build for build in builds if build.status != "CANCELED"]
    assert {handle["build_record_id"] for handle in handles} == {kept.record_id}
    assert sorted(handle["reattached"] for handle in handles) == [False, True]
