"""One reading of a pod's status, shared by the ACK backend's training pods and the bare pods (the
staging pod, the kaniko build pod): what ended it (its status reason: Evicted, Preempting,
Terminated; the DisruptionTarget condition), whether it is unschedulable, whether a container
waits for something other than starting (an image pull, a missing Secret or key: ``fatal`` when
no waiting fixes it), or a container exited with a non-zero code, now or before the kubelet
restarted it in place. It reads the API's field names, so it takes a model of either client or
the JSON form the backend keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: Waiting reasons that no amount of waiting fixes.
FATAL_WAITING_REASONS = frozenset({"CreateContainerConfigError", "InvalidImageName"})


#: Waiting reasons that mean "still starting", not a problem.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


def pod_phase(pod: Any) -> str | None:
    """The phase of a pod model (of either client: the attribute names are the same)."""
    return pod.status.phase if pod.status else None


def api_fields(pod: Any) -> dict[str, Any]:
    """``pod`` under the API's field names (``containerStatuses``, ``exitCode``): a model of either
    client converted, or the JSON form (``sanitize_for_serialization``) as it is."""
    return pod if isinstance(pod, dict) else pod.to_dict(serialize=True)


@dataclass(frozen=True)
class PodProblem:
    """One thing that keeps a pod from running, or that ended one of its containers."""

    #: ``ended``: the pod's own status reason, which the kubelet or a controller sets when it ends
    #: the pod (Evicted, Preempting, Terminated, NodeLost, OutOf<resource>); ``disrupted``: its
    #: DisruptionTarget condition is True (the reason says who: PreemptionByScheduler,
    #: DeletionByTaintManager, TerminationByKubelet...); ``unschedulable``: its PodScheduled
    #: condition is False; ``waiting``: a container waits for a reason other than starting;
    #: ``exited``: a container terminated with a non-zero exit code (or did last, when it is
    #: waiting to restart).
    kind: Literal["ended", "disrupted", "unschedulable", "waiting", "exited"]
    reason: str | None
    message: str = ""
    container: str = ""
    exit_code: int | None = None

    @property
    def fatal(self) -> bool:
        """Whether no amount of waiting fixes it (a missing Secret or key, a bad image name)."""
        return self.kind == "waiting" and self.reason in FATAL_WAITING_REASONS

    @property
    def summary(self) -> str:
        """``<reason>: <message>``, as a Pending pod's progress names it."""
        return f"{self.reason}: {self.message}".strip(": ")


#: Pod conditions that are problems: (type, status) -> the problem's kind.
_CONDITION_PROBLEMS: dict[tuple[str | None, str | None], Literal["disrupted", "unschedulable"]] = {
    ("DisruptionTarget", "True"): "disrupted",
    ("PodScheduled", "False"): "unschedulable",
}


def pod_problems(pod: Any) -> list[PodProblem]:
    """What ended ``pod``, keeps it from running or killed its containers, in the order its status
    lists them: the pod's own reason first, then its DisruptionTarget and unschedulable conditions,
    then each container's waiting reason and non-zero exit.

    A container waiting to restart (CrashLoopBackOff), or restarted in place and running again, says
    why it stopped in its last state, which counts as its exit.
    """
    status = api_fields(pod).get("status") or {}
    problems = (
        [PodProblem("ended", status["reason"], status.get("message") or "")] if status.get("reason") else []
    )
    for condition in status.get("conditions") or []:
        kind = _CONDITION_PROBLEMS.get((condition.get("type"), condition.get("status")))
        if kind is not None:
            problems.append(PodProblem(kind, condition.get("reason"), condition.get("message") or ""))
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason") and waiting["reason"] not in STARTING_REASONS:
            problems.append(
                PodProblem("waiting", waiting["reason"], waiting.get("message") or "", container["name"])
            )
            terminated = (container.get("lastState") or {}).get("terminated")
        elif terminated is None and container.get("restartCount"):
            # Restarted in place (restartPolicy OnFailure) and running again: how its last run ended
            # (OOMKilled, an exit code) is only in its last state.
            terminated = (container.get("lastState") or {}).get("terminated")
        if terminated and terminated.get("exitCode"):
            name, code = container["name"], terminated["exitCode"]
            problems.append(PodProblem("exited", terminated.get("reason"), "", name, code))
    return problems


def pending_problem(pod: Any) -> tuple[str, bool]:
    """Why a Pending pod is not running yet, and whether waiting can fix it."""
    for problem in pod_problems(pod):
        if problem.kind in ("unschedulable", "waiting"):
            return problem.summary, problem.fatal
    return "waiting for the container to start", False


def terminated_state(pod: Any, container: str) -> Any:
    """The terminated state of ``container`` in ``pod``; None while it has not terminated."""
    for status in (pod.status.container_statuses if pod.status else None) or []:
        if status.name == container and status.state and status.state.terminated:
            return status.state.terminated
    return None
