"""A node's output read by where its failure began: the rank torchrun saw fail first.

When one rank of a node fails, torchrun's elastic agent sends ``SIGTERM`` to the node's other
ranks and ends with a ``ChildFailedError`` summary (``torch.distributed.elastic.multiprocessing.
errors``): a "Failures:" section listing the ranks it terminated (``exitcode: -15``, "Signal 15
(SIGTERM) received by PID ...") and a "Root Cause (first observed failure):" section naming the
rank that failed first, its exit code and time. An agent that is itself signalled from outside
(the platform stopping the node, a preempted machine) logs "Received 15 death signal, shutting
down workers" and dies with a ``SignalException`` traceback. Lines ``torchrun --tee=3`` copies from
a rank start with ``[<role><local rank>]:`` (``[default3]:``), so that rank's own lines are known.

The siblings the agent terminated are consequences, not evidence; so is the traceback of an agent
stopped from outside. The root cause's exit status decides what kind of failure it can be, and the
rank's own text may only refine it (:func:`read_node_output`). These shapes are torch 2.13's; the
tests produce them by running torchrun (tests/integration/test_failure_corpus.py).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from aliyun_training.failures import (
    COMMAND_NOT_RUN,
    DATA_ERROR_EXIT,
    FailureClass,
    class_from_text,
    ending_lines,
)

#: How many of a failed node's last lines are read to classify it: torchrun's summary of 8 ranks
#: alone is about 70 lines, and the failed rank's own error comes before it.
EVIDENCE_LINES = 500
#: Where the summary's root-cause section starts, and each field line of an entry.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_RANK = re.compile(r"(\d+) \(local_rank: (\d+)\)")
_EXITCODE = re.compile(r"(-?\d+)")
#: The agent itself was signalled: torch.distributed.elastic's "Received <n> death signal" warning
#: and the SignalException ("Process <pid> got signal: <n>") it dies with.
_AGENT_SIGNALLED = re.compile(r"Received (\d+) death signal|SignalException: Process \d+ got signal: (\d+)")
#: A rank's collective failed because another rank went away: gloo's "Connection closed by peer
#: ... This is typically caused by a remote worker crashing" and "Connection reset by peer", NCCL's
#: "remote process exited or there was a network error" and an aborted communicator. Such a rank
#: is a consequence of a failure elsewhere.
_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by peer|remote worker crash|remote process exited"
    r"|NCCL communicator was aborted"
)
#: A line torchrun copied from a rank's output (``--tee``): its role and local rank.
_TEED = re.compile(r"^\[([A-Za-z_]+?)(\d+)\]:")
#: Signals that end a rank from outside the job: a lost or reclaimed machine, an operator, the
#: kernel's OOM killer (SIGKILL). The rank's own code did not choose them.
_OUTSIDE_SIGNALS = frozenset(int(s) for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT))
#: What a root cause of SIGKILL cannot tell by itself, said wherever no OOM evidence was found (the
#: local node's memory cgroup, a container's ``OOMKilled``): the kernel's OOM killer ends a process
#: with SIGKILL (mm/oom_kill.c ``__oom_kill_process``), and so does whatever stops a machine or
#: container from outside after its grace period.
SIGKILL_AMBIGUOUS = (
    "a SIGKILL is ambiguous: the kernel's OOM killer sends it, and so does whatever stops the machine "
    "or container from outside; no OOM kill was recorded, so it is read as the machine's"
)
#: torchrun's rendezvous timed out before any rank ran: the agent's traceback passes through
#: ``torch/distributed/elastic/rendezvous/`` and ends in a time-out. Its exceptions: the static
#: rendezvous's TCPStore on the node that hosts it, "Timed out after {} seconds waiting for clients.
#: {}/{} clients joined." (torch/csrc/distributed/c10d/TCPStore.cpp), on the others, "The client
#: socket has timed out after {} while trying to connect to {}." (torch/csrc/distributed/c10d/
#: socket.cpp); the dynamic (c10d, etcd) rendezvous's ``RendezvousTimeoutError``
#: (torch/distributed/elastic/rendezvous/api.py). A peer node that was not started in time, or not
#: reachable yet: the job's nodes, not its script.
_RENDEZVOUS_FRAME = re.compile(r"torch/distributed/elastic/rendezvous/")
_RENDEZVOUS_TIMEOUT = re.compile(
    r"RendezvousTimeoutError|Timed out after \d+ seconds waiting for clients"
    r"|client socket has timed out after .* while trying to connect"
)


@dataclass(frozen=True)
class RankFailure:
    """The rank torchrun observed failing first on a node: its ranks, exit code and time."""

    rank: int
    local_rank: int
    exit_code: int
    time: str = ""
    host: str = ""

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the rank (torchrun writes it as a negative exit code), or None."""
        if self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    def describe(self, node: int | None = None) -> str:
        where = f" on node {node}" if node is not None else ""
        how = f"exited with code {self.exit_code}"
        if self.signal_name:
            how = f"was killed by {self.signal_name}"
        when = f" at {self.time}" if self.time else ""
        return f"rank {self.rank} (local_rank {self.local_rank}){where} failed first: it {how}{when}"


@dataclass(frozen=True)
class NodeVerdict:
    """What a node's output says about its failure: a class (None: the output decides nothing),
    the lines that decided it, and the rank that failed first when torchrun named one."""

    failure_class: FailureClass | None
    evidence: list[str]
    origin: RankFailure | None = None
    #: The node failed because of another: its agent was stopped from outside, or its first failed
    #: rank lost a peer. Of a job's failed nodes, such a node is the origin only if all are.
    consequence: bool = False


def root_cause(lines: list[str]) -> RankFailure | None:
    """The last root cause torchrun's failure summary in ``lines`` names, or None."""
    starts = [i for i, line in enumerate(lines) if _ROOT_CAUSE.search(line)]
    if not starts:
        return None
    fields: dict[str, str] = {}
    for line in lines[starts[-1] + 1 :]:
        match = _FIELD.match(_TEED.sub("", line))
        if match:
            fields.setdefault(match.group(1), match.group(2).strip())
        elif fields and line.strip().startswith("="):
            break
    ranks, code = _RANK.search(fields.get("rank", "")), _EXITCODE.search(fields.get("exitcode", ""))
    if ranks is None or code is None:
        return None
    return RankFailure(
        rank=int(ranks.group(1)),
        local_rank=int(ranks.group(2)),
        exit_code=int(code.group(1)),
        time=fields.get("time", ""),
        host=fields.get("host", ""),
    )


def agent_signal(lines: list[str]) -> tuple[int, str] | None:
    """The signal that stopped the node's torchrun agent from outside, with its line; or None."""
    for line in lines:
        match = _AGENT_SIGNALLED.search(line)
        if match:
            return int(match.group(1) or match.group(2)), line.strip()
    return None


def rendezvous_timeout(lines: list[str]) -> str | None:
    """The exception that ended torchrun's rendezvous on a time-out (``_RENDEZVOUS_TIMEOUT``), or None."""
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not tracebacks or not any(_RENDEZVOUS_FRAME.search(line) for line in lines[tracebacks[-1] :]):
        return None
    return next((line.strip() for line in ending_lines(lines) if _RENDEZVOUS_TIMEOUT.search(line)), None)


def rank_lines(lines: list[str], local_rank: int) -> list[str]:
    """The lines torchrun copied from one local rank (``--tee``), without their prefix; every line
    when none is prefixed (a launcher that does not tee: the node's output is all there is)."""
    return [_TEED.sub("", line) for line in _own_prefixed(lines, local_rank)]


def read_node_output(lines: list[str], node: int | None = None) -> NodeVerdict:
    """The class failed ``node``'s output implies, decided by the failure's origin.

    - The root cause's exit code first: 65 (``DATA_ERROR_EXIT``) is data, 126/127 config; a signal
      from outside (SIGKILL, SIGTERM, SIGHUP, SIGINT) is preemption unless the rank's own lines name
      an infrastructure fault; a crash signal (SIGSEGV, SIGABRT...) or another exit code is decided
      by the rank's own lines, and is user code when they name nothing.
    - An agent stopped from outside with no root cause of its own: preemption, whatever traceback
      the agent printed as it died.
    - An agent whose rendezvous timed out before any rank ran: transient (its traceback is
      torch's, not the script's).
    - Neither (not torchrun's output): the text rules over the output, None when they match nothing.

    Of the rank's own lines (or the output), only the exception of its last Python traceback is
    read when it printed one (``failures.ending_lines``): the script's own prints are not evidence,
    so a print that mentions NCCL or an Xid never turns a bug into a machine fault.
    """
    origin = root_cause(lines)
    stopped = agent_signal(lines)
    if origin is None:
        if stopped is not None:
            return NodeVerdict(
                FailureClass.PREEMPTION,
                [f"torchrun was stopped from outside: {stopped[1]}"],
                consequence=True,
            )
        timed_out = rendezvous_timeout(lines)
        if timed_out is not None:
            return NodeVerdict(
                FailureClass.TRANSIENT,
                [f"torchrun's rendezvous timed out before the script ran: {timed_out}"],
            )
        matched = class_from_text(ending_lines(lines))
        return NodeVerdict(matched[0] if matched else None, [matched[1]] if matched else [])
    said = origin.describe(node)
    own = rank_lines(_before_summary(lines), origin.local_rank)
    ending = ending_lines(own)
    text = class_from_text(ending)
    if origin.exit_code == DATA_ERROR_EXIT:
        return NodeVerdict(FailureClass.DATA, [said, *own[-1:]], origin)
    if origin.exit_code in COMMAND_NOT_RUN:
        return NodeVerdict(FailureClass.CONFIG, [f"{said}: {COMMAND_NOT_RUN[origin.exit_code]}"], origin)
    if origin.exit_code < 0 and -origin.exit_code in _OUTSIDE_SIGNALS:
        if text is not None and text[0] is FailureClass.INFRASTRUCTURE:
            return NodeVerdict(FailureClass.INFRASTRUCTURE, [said, text[1]], origin)
        ambiguous = [SIGKILL_AMBIGUOUS] if -origin.exit_code == signal.SIGKILL else []
        return NodeVerdict(FailureClass.PREEMPTION, [said, *ambiguous], origin)
    if text is not None:
        return NodeVerdict(text[0], [said, text[1]], origin)
    # A lost peer is read from every line of the rank, not only its exception: under load the
    # collective's error may surface in the traceback's body or a warning rather than in the line
    # that names the exception (a 2x4 corpus case then took the peer's node for the failed one).
    # It marks the node a consequence of another node's failure.
    lost = next((line.strip() for line in own if _PEER_LOST.search(line)), None)
    if lost is not None:
        # A peer went away and this rank's collective failed with it: the machines, as far as this
        # node can tell (the peer's own node, when its output is read, tells more).
        return NodeVerdict(FailureClass.INFRASTRUCTURE, [said, lost], origin, consequence=True)
    last_words = [line.strip() for line in ending if line.strip()][-1:]
    return NodeVerdict(FailureClass.USER_CODE, [said, *last_words], origin)


def failure_excerpt(lines: list[str], limit: int) -> list[str]:
    """At most ``limit`` lines that show a failed node's error: the lines of the rank that failed
    first (whatever came after them from other ranks) and torchrun's root-cause section, however
    long the summary of the ranks it terminated is; the last ``limit`` lines when torchrun named
    no root cause."""
    origin = root_cause(lines)
    if origin is None:
        return lines[-limit:]
    section = lines[max(i for i, line in enumerate(lines) if _ROOT_CAUSE.search(line)) :]
    before = _before_summary(lines)
    own = _own_prefixed(before, origin.local_rank)
    room = max(limit - len(section), limit // 2)
    return [*own[-room:], *section][-limit:]


def _own_prefixed(lines: list[str], local_rank: int) -> list[str]:
    """The lines of one local rank as torchrun teed them, prefix kept; every line when none is."""
    teed = [(_TEED.match(line), line) for line in lines]
    if not any(match for match, _ in teed):
        return lines
    return [line for match, line in teed if match and int(match.group(2)) == local_rank]


def _before_summary(lines: list[str]) -> list[str]:
    """The node's lines before torchrun's own failure report (its traceback and summary), which
    name the agent's code, never the rank's."""
    for i, line in enumerate(lines):
        if "ChildFailedError" in line or _ROOT_CAUSE.search(line):
            start = i
            while start > 0 and not lines[start].startswith("Traceback") and i - start < 40:
                start -= 1
            return lines[:start] if lines[start].startswith("Traceback") else lines[:i]
    return lines
