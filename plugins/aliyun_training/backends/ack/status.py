"""What the cluster says about an ACK job, read into the backend's terms: its state from the CR's
conditions, its pods in node order and the one that failed first, what ended or holds them, and
the kubelet's timestamps.

Everything here reads plain dicts (``as_dicts``), so the sync and the async clients' answers are
interpreted by the same functions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aliyun_training.backends.ack.request import (
    KINDS,
    MPI_JOB_V1ALPHA1,
    MPI_JOB_V2,
    PYTORCH_JOB,
    TF_JOB,
    AckSettings,
    JobKind,
)
from aliyun_training.backends.base import JobHandle, JobState, JobStatus, LaunchedJob
from aliyun_training.failures.origin import EndedNode
from aliyun_training.kubernetes.names import owner_tags
from aliyun_training.kubernetes.pod_status import PodProblem, pod_problems
from aliyun_training.spec import JobOwner

#: Newest true condition -> state, as ``arena list`` reports jobs (anything else is pending).
CONDITION_STATES = {
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
}


#: Replica whose pod's log is the job's log, in order of preference.
LOG_REPLICAS = ("master", "launcher", "chief", "worker")


#: Replica-type labels of today's training-operator and of arena's old mpi-operator (v1alpha1).
_REPLICA_LABELS = (
    ("training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index"),
    ("mpi_role_type", ""),
)


#: Which pod problem is the job's ``reason_code``, first to last: what ended a pod (its status
#: reason, its DisruptionTarget condition) explains the exits and waits that follow it.
_PROBLEM_RANK = {"ended": 0, "disrupted": 1, "exited": 2, "waiting": 3, "unschedulable": 4}


def job_id(kind: JobKind, uid: str) -> str:
    """``<kind>/<version>/<uid>``: enough to address the CR again and to tell attempts apart."""
    return f"{kind.plural}/{kind.version}/{uid}"


def handle_kind(handle: JobHandle) -> JobKind:
    """The CR's kind, from the job id alone (``<plural>/<version>/<uid>``)."""
    plural, version, _uid = handle.job_id.split("/")
    for kind in KINDS:
        if (kind.plural, kind.version) == (plural, version):
            return kind
    raise LookupError(f"job id {handle.job_id!r} names no known training job kind")


def candidate_kinds(settings: AckSettings) -> list[JobKind]:
    """The kinds a job under these settings may be, which ``find`` and ``launched`` look among."""
    mpi = MPI_JOB_V1ALPHA1 if settings.mpi_api_version == "v1alpha1" else MPI_JOB_V2
    return [PYTORCH_JOB, TF_JOB, mpi]


def as_dicts(api_client: Any, items: list[Any]) -> list[dict[str, Any]]:
    """Listed objects (models of either client) as plain dicts."""
    return api_client.sanitize_for_serialization(items)


def handle_uid(handle: JobHandle) -> str:
    """The uid of the handle's CR (the last part of its job id)."""
    return handle.job_id.rsplit("/", 1)[-1]


def job_pods(api_client: Any, listed: Any, handle: JobHandle) -> list[dict[str, Any]]:
    """Pods of a job, master first, then by replica type and index (the node order of RANK).

    Pods of an earlier CR of the same name (still terminating after it was replaced) are left out:
    their ownerReference names that CR's uid. (arena's old mpi-operator's pods are owned by the
    launcher Job and the workers' StatefulSet, so they are all kept.)
    """
    order = {replica: rank for rank, replica in enumerate(LOG_REPLICAS)}
    kind, uid = handle_kind(handle).kind, handle_uid(handle)

    def ours(pod: dict[str, Any]) -> bool:
        refs = pod["metadata"].get("ownerReferences") or []
        return not any(ref.get("kind") == kind and ref.get("uid") != uid for ref in refs)

    def key(pod: dict[str, Any]) -> tuple[int, int, str]:
        labels = pod["metadata"].get("labels", {})
        for type_label, index_label in _REPLICA_LABELS:
            if type_label in labels:
                replica = labels[type_label].lower()
                return (
                    order.get(replica, len(order)),
                    int(labels.get(index_label, 0)),
                    pod["metadata"]["name"],
                )
        return len(order), 0, pod["metadata"]["name"]

    return sorted(filter(ours, as_dicts(api_client, listed)), key=key)


def _job_state(job: dict[str, Any]) -> tuple[JobState, dict[str, Any]]:
    """The state a CR's conditions give, and its newest true condition.

    Conditions are appended as the job moves on, and timestamps have whole seconds: the newest true
    condition is the last true one in the list (arena reads them the same way).
    """
    status = job.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"] or _v1alpha1_conditions(
        status
    )
    newest = true[-1] if true else {"type": "Pending"}
    return CONDITION_STATES.get(newest["type"], JobState.PENDING), newest


def job_owner(job: dict[str, Any]) -> JobOwner | None:
    """The owner a CR's annotations name, or None when they name no whole one."""
    return JobOwner.from_tags(owner_tags(job["metadata"].get("annotations")))


def launched_job(backend: str, kind: JobKind, job: dict[str, Any]) -> LaunchedJob | None:
    """A listed CR as a launched job: None when it ended or names no whole owner."""
    meta = job["metadata"]
    owner = job_owner(job)
    state = JobState.STOPPING if meta.get("deletionTimestamp") else _job_state(job)[0]
    if owner is None or state.is_terminal:
        return None
    return LaunchedJob(
        handle=JobHandle(backend=backend, job_id=job_id(kind, meta["uid"]), name=meta["name"]),
        owner=owner,
        state=state,
        created=_iso(meta.get("creationTimestamp")),
    )


def job_status(handle: JobHandle, job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> JobStatus:
    if job is not None and handle_uid(handle) != job["metadata"]["uid"]:
        raise LookupError(f"job {handle.name} was replaced by a newer attempt")
    if job is None or job["metadata"].get("deletionTimestamp"):
        return _deleted_status(job, pods)
    status = job.get("status") or {}
    state, newest = _job_state(job)
    replicas = ", ".join(
        f"{role}: " + " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        for role, counts in sorted((status.get("replicaStatuses") or {}).items())
    )
    read = _read_problems(pods) if state is not JobState.SUCCEEDED else []
    problems = _problem_lines(read) if state in (JobState.PENDING, JobState.FAILED) else []
    reason = "; ".join(
        part
        for part in (
            ": ".join(p for p in (newest.get("reason"), newest.get("message")) if p),
            *problems,
            replicas and f"replicas {replicas}",
        )
        if part
    )
    ended = _ended_nodes(pods)
    failed = ended[0].node if ended else None
    return JobStatus(
        state=state,
        raw=newest["type"],
        reason=reason,
        started=_iso(status.get("startTime")),
        finished=_iso(status.get("completionTime")) if state.is_terminal else None,
        failed_node=failed,
        exit_code=ended[0].exit_code if ended else None,
        ended_nodes=ended if state is JobState.FAILED else [],
        reason_code=_reason_code(read, failed)
        or (newest.get("reason", "") if state is JobState.FAILED else ""),
    )


def _ended_nodes(pods: list[dict[str, Any]]) -> list[EndedNode]:
    """The nodes whose pod failed, the first to fail first by when its container terminated
    (``finishedAt``, one-second resolution; node order on a tie, which ``failures.origin`` breaks by
    the nodes' output). A pod failed when its phase says so, or when a container of it ended with
    a non-zero code, now or before the kubelet restarted it in place (``restartPolicy: OnFailure``:
    only ``lastState`` keeps that end)."""
    failed = [
        (_finished_at(pod), rank)
        for rank, pod in enumerate(pods)
        if pod.get("status", {}).get("phase") == "Failed" or _bad_ends(pod)
    ]
    return [
        EndedNode(node=rank, finished=None if at == "~" else at, exit_code=_exit_code(pods[rank]))
        for at, rank in sorted(failed)
    ]


def _bad_ends(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The terminated states with a non-zero exit code among the pod's containers' states and last
    states."""
    return [
        terminated
        for container in (pod.get("status") or {}).get("containerStatuses") or []
        for state in (container.get("state"), container.get("lastState"))
        if (terminated := (state or {}).get("terminated")) and terminated.get("exitCode")
    ]


def _finished_at(pod: dict[str, Any]) -> str:
    """When the pod's first container that ended badly finished ("~", after every time, when none
    says)."""
    ends = _bad_ends(pod) or [
        (container.get("state") or {}).get("terminated") or {}
        for container in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    return min((str(end["finishedAt"]) for end in ends if end.get("finishedAt")), default="~")


def _deleted_status(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> JobStatus:
    """A job whose CR is being deleted or gone: stopping until the CR and its pods are gone.

    The CR waits while finalizers hold it (a foreground deletion holds it for its pods); after a
    background deletion (``arena delete``, ``stop``) it is gone at once and the garbage collector
    deletes the pods, each Terminating until its containers stopped (at most its grace period).
    """
    if job is None and not pods:
        return JobStatus(state=JobState.STOPPED, raw="Deleted", reason="the job was deleted (arena delete?)")
    parts = []
    if job is not None:
        held = ", ".join(job["metadata"].get("finalizers") or [])
        parts.append("the job is being deleted" + (f" (finalizers: {held})" if held else ""))
    else:
        parts.append("the job was deleted")
    if pods:
        parts.append("its pods are not gone yet: " + ", ".join(pod["metadata"]["name"] for pod in pods))
    return JobStatus(
        state=JobState.STOPPING, raw="Deleting" if job is not None else "Deleted", reason="; ".join(parts)
    )


def _v1alpha1_conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    """arena's old mpi-operator (v1alpha1) reports ``launcherStatus`` instead of conditions."""
    launcher = status.get("launcherStatus")
    return [{"type": launcher, "status": "True"}] if launcher else []


def _read_problems(pods: list[dict[str, Any]]) -> list[tuple[int, str, PodProblem]]:
    """Every pod's problems (``pod_problems``), read once: (node index, pod name, problem)."""
    return [
        (index, pod["metadata"]["name"], problem)
        for index, pod in enumerate(pods)
        for problem in pod_problems(pod)
    ]


def _problem_lines(read: list[tuple[int, str, PodProblem]]) -> list[str]:
    """Each problem as one line naming its pod and reason: what ended pods or keeps them from
    running (evictions, disruptions, unschedulable, image pulls) and what killed them (OOM, exits)."""
    lines = []
    for _index, name, problem in read:
        if problem.kind == "exited":
            what = f"container {problem.container} {problem.reason or 'Error'}"
            lines.append(f"pod {name}: {what} (exit code {problem.exit_code})")
        elif problem.kind == "disrupted":
            lines.append(f"pod {name}: DisruptionTarget {problem.reason} {problem.message}".strip())
        else:
            lines.append(f"pod {name}: {problem.reason} {problem.message}".strip())
    return lines


def pod_problem_lines(pods: list[dict[str, Any]]) -> list[str]:
    """What ended pods, keeps them from running or killed them, one line each."""
    return _problem_lines(_read_problems(pods))


def _reason_code(read: list[tuple[int, str, PodProblem]], failed: int | None) -> str:
    """The platform's code for the job's state: the failed node's most telling problem (by
    ``_PROBLEM_RANK``), else the most telling of any pod's (the first node's on a tie); "" when no
    pod has one."""
    ranked = sorted(
        (index != failed, _PROBLEM_RANK[problem.kind], index, problem.reason)
        for index, _name, problem in read
        if problem.reason
    )
    return ranked[0][3] if ranked else ""


def _exit_code(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return terminated.get("exitCode")
    return None


def started_pods(pods: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(node, pod) of the pods whose containers have started, in node order: those with a log."""
    return [
        (node, pod)
        for node, pod in enumerate(pods)
        if (pod.get("status") or {}).get("phase") not in (None, "Pending")
    ]


def node_pod(pods: list[dict[str, Any]], node: int) -> dict[str, Any] | None:
    """Node ``node``'s pod (the node order of ``status.failed_node``), once it has started."""
    return dict(started_pods(pods)).get(node)


def rfc3339(epoch: float) -> str:
    """``epoch`` as the kubelet writes a log line's timestamp (RFC 3339, UTC, nanoseconds)."""
    whole = datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{int((epoch % 1) * 1e9):09d}Z"


def stamp_key(stamp: str) -> tuple[str, int]:
    """Order RFC 3339 UTC timestamps with up to nanoseconds (Python parses only microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return whole, int((fraction or "0").ljust(9, "0")[:9])


def parse_time(value: str) -> datetime:
    whole, nanos = stamp_key(value)
    return datetime.fromisoformat(whole).replace(tzinfo=UTC, microsecond=nanos // 1000)


def _iso(value: str | None) -> str | None:
    return parse_time(value).astimezone(UTC).isoformat() if value else None
