"""Shared pieces of the tests that drive a bare-pod RemoteRun (PodStager, KanikoBuilder) through the
cncf KubernetesHook and AsyncKubernetesHook against the Kubernetes API fake.

What every such run must do the same way (fail when its pod is deleted, wait on a pod that cannot
start, stop only its own pod, refuse a foreign pod) is checked here once, with each run's wording.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from fakes.base import ManualClock
from fakes.kube import CONN_ID as CONN_ID
from fakes.kube import NS as NS
from fakes.kube import core as core
from fakes.kube import kubernetes_fake as kubernetes_fake
from fakes.kubernetes_fake import KubernetesFake, TrainingScript

if TYPE_CHECKING:
    from collections.abc import Iterable

    from aliyun_training.kubernetes.pods import PodRun
    from aliyun_training.remote import RemoteStatus

#: When the fake's clock starts.
T0 = 1_800_000_000.0
#: A uid no pod has: a handle of an older attempt whose pod name a newer pod took.
OTHER_UID = "00000000-0000-0000-0000-000000000000"
#: (script outcome, the start of the progress it shows): Pending pods that waiting may fix.
CANNOT_START_YET = [
    ("ImagePullBackOff", "ImagePullBackOff: Back-off pulling image"),
    ("Unschedulable", "Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
]


class SteppedClock(ManualClock):
    """The fake's clock: ``advance`` by some seconds, or jump ``at`` some seconds after the start."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.start = start

    def at(self, seconds: float) -> None:
        self.now = self.start + seconds


@pytest.fixture(name="clock")
def stepped_clock() -> SteppedClock:
    """The fake's clock, at T0 (a test module takes it as ``clock = harness.stepped_clock``)."""
    return SteppedClock(T0)


def posts(fake: KubernetesFake, plural: str) -> list[dict[str, Any]]:
    """The bodies of the objects of ``plural`` (pods, configmaps) created so far."""
    return [r.body for r in fake.requests if r.method == "POST" and r.path.endswith(f"/{plural}")]


def exists(kind: str, name: str) -> bool:
    listed = core().list_namespaced_pod(NS) if kind == "pod" else core().list_namespaced_config_map(NS)
    return any(item.metadata.name == name for item in listed.items)


def sent_bodies(fake: KubernetesFake) -> list[str]:
    """Every request body as JSON, but those of the Secrets the test itself created."""
    return [json.dumps(r.body) for r in fake.requests if "/secrets" not in r.path and r.body is not None]


def assert_none_contains(values: Iterable[str], texts: list[str]) -> None:
    """No secret value in any text (a body, a handle, a result, a message, a log record)."""
    for value in values:
        assert not any(value in text for text in texts)


def started(fake: KubernetesFake, run: PodRun, script: TrainingScript) -> dict[str, Any]:
    """Submit ``run`` with its pod following ``script``; its handle."""
    fake.default_script = script
    return run.submit()


def create_foreign_pod(name: str) -> None:
    """A pod of the run's name that this pipeline did not create (no labels)."""
    core().create_namespaced_pod(
        NS, {"metadata": {"name": name}, "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
    )


def delete_after_reading(monkeypatch: pytest.MonkeyPatch, run: PodRun) -> None:
    """The run's pod is deleted right after the run reads it: gone between the status and the log."""
    hook = run.async_hook()
    read = hook.get_pod

    async def read_then_delete(name: str, namespace: str) -> Any:
        pod = await read(name, namespace)
        core().delete_namespaced_pod(name, namespace)
        return pod

    monkeypatch.setattr(hook, "get_pod", read_then_delete)


def assert_dns_label(name: str) -> None:
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


# -- what every bare-pod run does the same way ------------------------------------------------------


async def assert_a_deleted_pod_fails(
    fake: KubernetesFake, run: PodRun, script: TrainingScript, noun: str
) -> None:
    handle = started(fake, run, script)
    core().delete_namespaced_pod(handle["pod"], NS)
    status = await run.apoll(handle)
    assert (status.state, status.message) == (
        "failed",
        f"{noun} pod {NS}/{handle['pod']} was deleted before it finished",
    )


async def assert_a_pod_that_cannot_start_waits(
    fake: KubernetesFake, run: PodRun, clock: ManualClock, outcome: str, expected: str
) -> None:
    handle = started(fake, run, TrainingScript(phases=[("Created", 1.0)], outcome=outcome))
    clock.advance(30)
    status = await run.apoll(handle)
    assert status.state == "running"
    assert status.progress.startswith(f"pod {NS}/{run.pod_name} Pending: {expected}")


async def assert_a_resubmit_replaces_the_failed_pod(
    fake: KubernetesFake, run: PodRun, handle: dict[str, Any], script: TrainingScript
) -> dict[str, Any]:
    """Resubmit after ``handle``'s pod failed: a new pod of the same name, which the old handle is not."""
    replacement = started(fake, run, script)
    assert replacement["pod"] == handle["pod"] and replacement["uid"] != handle["uid"]
    assert (await run.apoll(handle)).message.endswith("was replaced by another attempt")
    return replacement


def assert_submitting_again_reattaches(
    fake: KubernetesFake, run: PodRun, script: TrainingScript, clock: ManualClock, running: float, done: float
) -> None:
    """Submit while Pending, Running (at ``running`` s) and Succeeded (at ``done`` s): one pod throughout.

    A Succeeded pod is reattached too: its result is not thrown away.
    """
    first = started(fake, run, script)
    clock.advance(running)
    again = type(run)(**run.config).submit()
    clock.advance(done - running)
    third = type(run)(**run.config).submit()
    assert first == again == third
    assert len(posts(fake, "pods")) == 1 and fake.count("DELETE") == 0


def stop_twice(fake: KubernetesFake, run: PodRun, script: TrainingScript) -> dict[str, Any]:
    """Stop a run, then stop it again once all is gone (no error); its handle."""
    handle = started(fake, run, script)
    run.stop(handle)
    assert not exists("pod", handle["pod"])
    run.stop(handle)
    return handle


def stop_an_older_handle(fake: KubernetesFake, run: PodRun, script: TrainingScript) -> dict[str, Any]:
    """Stop with a handle whose pod a newer attempt replaced: the pod stays. Its (current) handle."""
    handle = started(fake, run, script)
    run.stop({**handle, "uid": OTHER_UID})
    assert exists("pod", handle["pod"])
    return handle


def assert_result_before_success_fails(
    fake: KubernetesFake, run: PodRun, script: TrainingScript
) -> dict[str, Any]:
    handle = started(fake, run, script)
    with pytest.raises(run.error, match="is Pending, not Succeeded"):
        run.result(handle)
    assert exists("pod", handle["pod"])
    return handle


def assert_a_foreign_pod_is_never_touched(fake: KubernetesFake, run: PodRun, noun: str) -> None:
    create_foreign_pod(run.pod_name)
    with pytest.raises(run.error, match=f"is not an? {noun} pod of this pipeline"):
        run.submit()
    assert fake.count("DELETE") == 0 and len(posts(fake, "pods")) == 1


def polled(run: PodRun, handle: dict[str, Any]) -> RemoteStatus:
    """``apoll`` from synchronous code, as the triggerer would answer."""
    import asyncio

    return asyncio.run(run.apoll(handle))
