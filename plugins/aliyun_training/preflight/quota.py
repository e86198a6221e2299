"""Is there room for the job in its PAI resource quota? (PAI Studio SDK)

A job that does not fit waits in Queuing with no message; a quota of the wrong resource type or
GPU model never runs it at all. The quota, its free GPUs and its queue come from
``PaiStudioHook.quota_capacity``, the one look at a quota this check, the capacity sensor and its
trigger share (free GPUs are derived in ``hooks.paistudio.free_gpus`` only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.findings import Finding, Verdict

if TYPE_CHECKING:
    from aliyun_training.backends.dlc.request import DlcJobSettings
    from aliyun_training.hooks.paistudio import Capacity, PaiStudioHook
    from aliyun_training.spec import TrainingJobSpec


def quota_gpu_type(quota: Any) -> str | None:
    details = quota.quota_details
    allocatable = details.allocatable_quota if details else None
    return quota.gputype or (allocatable.gputype if allocatable else None)


def check_quota(hook: PaiStudioHook, spec: TrainingJobSpec, job_settings: DlcJobSettings) -> list[Finding]:
    """The quota of DLC's ``job_settings`` exists, has their resource type and GPU model, and can
    hold ``spec``'s nodes."""
    quota_id = job_settings.quota_id
    if not quota_id:
        return [Finding(check="quota", verdict=Verdict.PASS, found="no quota: pay-as-you-go ECS resources")]
    state = hook.quota_capacity(quota_id)
    if state is None:
        return [
            Finding(
                check="quota",
                verdict=Verdict.FAIL,
                found=f"quota {quota_id} does not exist in {hook.region}",
                fix="use a quota id from the PAI console (Resource Quota) of this region",
            )
        ]
    quota = state.quota
    findings = []
    wanted_type = job_settings.resource_type.value
    actual_type = (quota.resource_type or "").lower()
    if actual_type != wanted_type:
        findings.append(
            Finding(
                check="quota_type",
                verdict=Verdict.FAIL,
                found=f"quota {quota_id} holds {quota.resource_type} resources, "
                f"the job asks for {wanted_type}",
                fix=f"set resource_type to {actual_type} or use a {wanted_type} quota",
            )
        )
    gpu_type = quota_gpu_type(quota)
    wanted_gpu = job_settings.gpu_type
    if spec.gpus_per_node and wanted_gpu and gpu_type and gpu_type != wanted_gpu:
        findings.append(
            Finding(
                check="gpu_type",
                verdict=Verdict.FAIL,
                found=f"quota {quota_id} has {gpu_type} GPUs, the job asks for {wanted_gpu}",
                fix=f"set gpu_type to {gpu_type} or use a quota with {wanted_gpu}",
            )
        )
    findings.append(_check_capacity(spec, quota_id, state.capacity, state.queued))
    return findings


def _check_capacity(spec: TrainingJobSpec, quota_id: str, capacity: Capacity, queued: int = 0) -> Finding:
    needed = spec.nodes * spec.gpus_per_node
    if needed <= capacity.free:
        return Finding(
            check="quota_capacity", verdict=Verdict.PASS, found=f"{needed} GPUs needed, {capacity.describe()}"
        )
    if needed > capacity.allocatable:
        return Finding(
            check="quota_capacity",
            verdict=Verdict.FAIL,
            found=f"{needed} GPUs needed but quota {quota_id} holds at most {capacity.allocatable}",
            fix="lower nodes or gpus_per_node, or enlarge the quota",
        )
    return Finding(
        check="quota_capacity",
        verdict=Verdict.WARN,
        found=f"{needed} GPUs needed, {capacity.describe()} right now",
        fix="the job will wait for capacity (wait_for_capacity) or queue"
        + (f" behind {queued} queued workloads" if queued else "")
        + "; lower nodes to start sooner",
    )


def waiting_message(quota_id: str, capacity: Capacity, gpus: int, queued: int) -> str:
    """What a capacity wait logs at each poll (the sensor's poke and its trigger alike)."""
    return f"Waiting for quota {quota_id}: {capacity.describe()}, {gpus} needed, {queued} workloads queued"


def room_message(quota_id: str, capacity: Capacity, gpus: int) -> str:
    return f"Quota {quota_id} has room: {capacity.describe()} for {gpus}"
