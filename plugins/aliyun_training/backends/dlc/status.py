"""What GetJob says about a DLC job, read into the backend's terms: its status and phase, its
pods in node order and the one that failed first, why it waits or why it ended."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from aliyun_training.backends.base import JobState
from aliyun_training.failures import BLOCKING_REASONS
from aliyun_training.failures.origin import EndedNode

#: Of the pods that ended badly, how many (the first to end first) have their GetPodEvents read.
FAILURE_EVENT_PODS = 4


#: Every job status DLC documents, mapped onto the backend-independent states. ``*Reserving`` jobs
#: have finished; DLC only keeps their nodes for debugging, so the task need not wait for that.
DLC_STATES: dict[str, JobState] = {
    "Creating": JobState.PENDING,
    "Queuing": JobState.PENDING,
    "Bidding": JobState.PENDING,
    "EnvPreparing": JobState.PENDING,
    "SanityChecking": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
    "Stopping": JobState.STOPPING,
    "SucceededReserving": JobState.SUCCEEDED,
    "Succeeded": JobState.SUCCEEDED,
    "FailedReserving": JobState.FAILED,
    "Failed": JobState.FAILED,
    "Stopped": JobState.STOPPED,
}


#: The statuses of a job that has not ended, in the order a job passes them (``launched`` lists
#: them in this order).
UNENDED_STATUSES = tuple(status for status, state in DLC_STATES.items() if not state.is_terminal)


#: How DLC statuses add up to the phases a run report shows.
PHASES = {
    "Creating": "queuing",
    "Queuing": "queuing",
    "Bidding": "queuing",
    "EnvPreparing": "preparing",
    "SanityChecking": "preparing",
    "Running": "running",
    "Restarting": "running",
}


#: Pod statuses (GetJob's Pods[].Status) of a pod that has not ended badly. Any other did: Failed,
#: or whatever else the platform reports for an ended pod (a preempted one, Unknown for a lost node).
POD_STATUSES_FINE = frozenset({"Pending", "Running", "Succeeded"})


#: A kubelet event about an image pull (Pulling, Pulled, "Failed to pull image", "Back-off pulling
#: image"): the last of them says whether the pod's image is being pulled or cannot be.
IMAGE_PULL_EVENT = re.compile(r"pull", re.I)
#: The kubelet's event for a pull that failed, with the registry's error (pkg/kubelet/images/
#: image_manager.go: "Failed to pull image %q: %v").
FAILED_PULL_EVENT = re.compile(r"Failed to pull image")


#: The time format DLC's StartTime/EndTime parameters use (the references' example 2020-11-08T16:00:00Z).
DLC_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def ended_badly(job: Any) -> list[tuple[int, Any]]:
    """(node, pod) of the pods that ended badly, the first to end first by the platform's
    GmtFinishTime (node order on a tie; a pod with no finish time, such as one on a lost node,
    after those with one)."""
    ended = [(rank, pod) for rank, pod in enumerate(node_order(job)) if pod.status not in POD_STATUSES_FINE]
    return sorted(ended, key=lambda ended_pod: (ended_pod[1].gmt_finish_time or "~", ended_pod[0]))


def ended_nodes(job: Any) -> list[EndedNode]:
    """The nodes whose pods ended badly, the first to end first (``ended_badly``), for the monitor
    to find where the failure began (``failures.origin``): GmtFinishTime has one-second resolution."""
    return [EndedNode(node=node, finished=pod.gmt_finish_time) for node, pod in ended_badly(job)]


def pods_to_explain(job: Any) -> list[str]:
    """The pods whose events explain the job's end: those that ended badly, the first to end first;
    of a job that never got that far, those still pending. At most ``FAILURE_EVENT_PODS``."""
    pods = [pod for _, pod in ended_badly(job)]
    if not pods and DLC_STATES.get(job.status) is JobState.PENDING:
        pods = [pod for pod in node_order(job) if pod.status == "Pending"]
    return [pod.pod_id for pod in pods[:FAILURE_EVENT_PODS]]


def pending_pod(job: Any) -> str | None:
    """While DLC prepares a job's pods (EnvPreparing), the first still Pending: its events tell an
    image being pulled from one that cannot be. None in any other status."""
    if job.status != "EnvPreparing":
        return None
    return next((pod.pod_id for pod in node_order(job) if pod.status == "Pending"), None)


def last_pull_event(events: list[str]) -> str:
    """The newest of a pod's events about its image pull, as ``pod event: ...``, with the newest
    failed pull's own error when a later event hides it ("Back-off pulling image", "Error:
    ImagePullBackOff"): whether the registry refused the image or only limited the pull is in that
    error alone; "" when there is none."""
    pulls = [event for event in events if IMAGE_PULL_EVENT.search(event)]
    if not pulls:
        return ""
    failed = [event for event in pulls if FAILED_PULL_EVENT.search(event)]
    hidden = f" (after: {failed[-1]})" if failed and failed[-1] != pulls[-1] else ""
    return f"pod event: {pulls[-1]}{hidden}"


def blocking_reason(texts: list[str]) -> str | None:
    """The first of ``BLOCKING_REASONS`` (the kubelet's words for a pod that waits for good) any of
    ``texts`` names, for ``JobMonitor.give_up``; None when none does."""
    for text in texts:
        for reason in BLOCKING_REASONS:
            if re.search(rf"\b{reason}\b", text):
                return reason
    return None


def node_order(job: Any) -> list[Any]:
    """The job's pods by node: the master (rank 0), then the workers, then any other role."""
    return sorted(job.pods or [], key=lambda pod: (pod.type != "Master", pod.type == "Worker", pod.pod_id))


def dlc_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(DLC_TIME_FORMAT)


def epoch_seconds(value: str | None) -> float:
    """A DLC time as epoch seconds (0 when unknown: the search then treats the start as open)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else 0.0


def iso(value: str | None) -> str | None:
    """DLC times (``2026-11-30T12:00:00Z``) as ISO 8601 with an explicit offset."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).isoformat() if value else None


def phase(item: Any) -> dict[str, Any]:
    start, end = iso(item.start_time), iso(item.end_time)
    seconds = (
        (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
        if start and end
        else None
    )
    phase = PHASES.get(item.status, item.status.lower())
    return {"status": item.status, "phase": phase, "start": start, "end": end, "seconds": seconds}


#: DLC statuses in which a job waits for its quota: Queuing, and Bidding for Lingjun spot resources.
QUEUE_STATUSES = frozenset({"Queuing", "Bidding"})


def in_quota_queue(job: Any) -> bool:
    """Whether a job waits in a resource quota's queue, where PAI Studio knows its place."""
    return job.status in QUEUE_STATUSES and bool(job.resource_id)


def why_waiting(job: Any, queued: Any) -> str:
    """Why a queued job waits, in the platform's words: DLC's ReasonCode and ReasonMessage, then PAI
    Studio's QueueInfo (Position, Reason, GmtEnqueuedTime) for its quota."""
    parts = [": ".join(part for part in (job.reason_code, job.reason_message) if part)]
    if queued is not None and queued.position is not None:
        since = f" since {queued.gmt_enqueued_time}" if queued.gmt_enqueued_time else ""
        parts.append(f"queue position {queued.position} in quota {job.resource_id}{since}")
    if queued is not None and queued.reason:
        parts.append(f"queue reason: {queued.reason}")
    return "; ".join(part for part in parts if part)


def status_reason(job: Any) -> str:
    """ReasonCode and ReasonMessage, then the job's SubStatus, then each pod's Status when it is
    neither fine nor plain Failed (a preempted pod) and its SubStatus when it is not Normal."""
    parts = [": ".join(part for part in (job.reason_code, job.reason_message) if part)]
    if job.sub_status:
        parts.append(f"SubStatus={job.sub_status}")
    for pod in node_order(job):
        said = []
        if pod.status and pod.status not in POD_STATUSES_FINE | {"Failed"}:
            said.append(f"Status={pod.status}")
        if pod.sub_status and pod.sub_status != "Normal":
            said.append(f"SubStatus={pod.sub_status}")
        if said:
            parts.append(f"pod {pod.pod_id} {' '.join(said)}")
    return "; ".join(part for part in parts if part)
