"""Which of a job's failed nodes the failure began on: one rule for every backend.

A distributed job fails in a cascade. When one node's script raises, the other nodes' ranks lose
their peer (gloo's "Connection closed by peer") or the platform stops their torchrun ("Received 15
death signal"), and those pods end badly too, often in the same second. The platforms' clocks
cannot tell them apart: DLC's ``GmtFinishTime`` and a container's ``finishedAt`` have one-second
resolution, so ordering by time alone made the same failure ``user_code`` on one run and
``infrastructure`` on the next, depending on which pod the platform finished first.

So each node's own output decides (``failures.torchrun.read_node_output``): a node that failed
because of another (its first failed rank lost a peer, its torchrun was stopped from outside) is
never the origin while another node shows a failure of its own; among the rest, the earliest end;
at the same instant, the node whose output names its own failure before one whose output names
nothing; only then the node order, so the answer is the same on every run of the same failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from aliyun_training.failures.torchrun import read_node_output

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Of a job's failed nodes, how many (the first to end first) have their output read to find the
#: origin: a cascade's origin ends among the first, and each read is a log request.
ORIGIN_CANDIDATES = 8


class EndedNode(BaseModel):
    """A node whose pod or process ended badly, as its platform reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: int
    #: When it ended, in the platform's own time format (sortable within one job); None: unknown
    #: (a pod on a lost node, a vanished supervisor), which sorts after every time.
    finished: str | None = None
    #: Its exit code, where the platform reports one per node.
    exit_code: int | None = None


def origin_order(ended: Sequence[EndedNode], outputs: Mapping[int, list[str]]) -> list[EndedNode]:
    """``ended``, the node the failure began on first, by the rule in the module's docstring.

    ``outputs`` holds the last lines of the nodes read (a node missing from it, or with no lines,
    shows nothing of its own: neither a consequence nor evidence).
    """

    def key(node: EndedNode) -> tuple[bool, str, bool, int]:
        lines = outputs.get(node.node) or []
        verdict = read_node_output(lines, node.node) if lines else None
        consequence = verdict is not None and verdict.consequence
        says_nothing = verdict is None or verdict.failure_class is None
        return consequence, node.finished or "~", says_nothing, node.node

    return sorted(ended, key=key)
