"""Verdicts on the RDMA fabric a job runs over, from ``ib_write_bw`` and nccl-tests' ``all_reduce_perf``:
a link that delivers a fraction of its line rate, and NCCL quietly falling back from RDMA to TCP
(``NET/Socket``), each a PASS/WARN/FAIL finding naming what it found and the fix.

Units. ``ib_write_bw --report_gbits`` reports Gb/s (10^9 bits/s); nccl-tests reports algbw and
busbw in GB/s (10^9 bytes/s). Link rates are quoted in Gb/s, so every comparison here is done in
Gb/s and nccl-tests numbers are multiplied by 8.

Standard library and pydantic only: the verify job's log is parsed on the Airflow worker.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from aliyun_training.findings import Finding, Verdict
from aliyun_training.image.tool_output import ImageCheckError, strip_prefixes

Transport = Literal["ib", "socket"]


GBYTES_TO_GBITS = 8  # nccl-tests GB/s -> link Gb/s


RDMA_NOT_IN_USE_FIX = (
    "NCCL_DEBUG=INFO must show 'NET/IB : Using [0]mlx5_...'. Check: NCCL_IB_HCA names devices that "
    "ibv_devices lists (DLC injects it; on ACK set it) and NCCL_IB_DISABLE is not 1; the pod requests the "
    "RDMA resource (rdma/hca on Lingjun, aliyun/erdma for eRDMA) and has capability IPC_LOCK; the image "
    "has the RDMA libraries (libibverbs, librdmacm, mlx5: include/docker/Dockerfile)"
)


class IbWriteBw(BaseModel):
    """One ib_write_bw result (the last result row when a run covers several message sizes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["server", "client"]
    device: str
    transport_type: str | None = None
    connection_type: str | None = None
    link_type: str | None = None
    mtu_bytes: int | None = None
    gid_index: int | None = None
    local_gid: str | None = None
    remote_gid: str | None = None
    bytes: int
    iterations: int
    bw_peak_gbps: float
    bw_average_gbps: float
    msg_rate_mpps: float


_PERFTEST_FAILURES = (
    "Couldn't connect to",
    "Unable to init the socket connection",
    "Unable to open file descriptor for socket connection",
    "Unable to find the Infiniband/RoCE device",
    "Couldn't get context for the device",
    "Failed to modify QP",
    "Unable to Connect the HCA's through the link",
    "Failed to exchange data between server and clients",
    "Couldn't create IB resources",
)


_PERFTEST_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(?:Gb|MB)/sec\]")


_PERFTEST_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+[\d.]+)?\s*$")


_PERFTEST_FIELD = re.compile(r"([A-Za-z][\w .*/-]*?)\s*:\s*(\S+)")


_MIB_PER_SEC_TO_GBPS = 1048576 * 8 / 1e9  # perftest's "MB/sec" is 2^20 bytes/s


def parse_ib_write_bw(text: str) -> IbWriteBw:
    """Parse ib_write_bw output, server or client side, run with ``--report_gbits``.

    Without ``--report_gbits`` perftest reports MB/sec (2^20 bytes/s); those numbers are converted
    to Gb/s so callers always compare Gb/s with a link rate. In duration mode (``-D``) perftest
    does not measure the peak and prints 0.00 for it; use ``bw_average_gbps``.
    """
    lines = [strip_prefixes(line) for line in text.splitlines()]
    for line in lines:
        for marker in _PERFTEST_FAILURES:
            if marker in line:
                raise ImageCheckError(
                    f"ib_write_bw failed before measuring: {line.strip()!r}. Start the server side first "
                    "(same -d/-x flags), check the client's server IP and that TCP port 18515 (-p) is "
                    "reachable between the pods, and that -d names a device ibv_devices lists"
                )
    fields: dict[str, str] = {}
    gids: list[str] = []
    unit: str | None = None
    row: tuple[str, ...] | None = None
    for line in lines:
        header = _PERFTEST_HEADER.search(line)
        if header:
            unit = header.group(1)
            continue
        if unit is not None:
            match = _PERFTEST_ROW.match(line)
            if match:
                row = match.groups()
                continue
        if line.strip().startswith("GID:"):
            gids.append(line.split("GID:", 1)[1].strip())
            continue
        # Header lines carry one or two "name : value" pairs (perftest separates them with tabs,
        # copies of the output often with spaces); every value is a single token.
        for name, value in _PERFTEST_FIELD.findall(line):
            fields.setdefault(name.strip(), value)
    if row is None or unit is None:
        raise ImageCheckError(
            "no ib_write_bw result row: expected a ' #bytes  #iterations  BW peak[Gb/sec]  "
            "BW average[Gb/sec]  MsgRate[Mpps]' header followed by one row; the run may have been "
            "killed before it finished"
        )
    scale = 1.0 if unit == "Gb" else _MIB_PER_SEC_TO_GBPS
    size, iterations, peak, average, rate = row
    if "Device" not in fields:
        raise ImageCheckError(
            "ib_write_bw output has a result row but no 'Device' line; is it perftest output?"
        )
    mtu = re.match(r"(\d+)", fields.get("Mtu", ""))
    gid_index = fields.get("GID index") or fields.get("Gid index")
    return IbWriteBw(
        role="server" if "Waiting for client to connect" in text else "client",
        device=fields["Device"],
        transport_type=fields.get("Transport type"),
        connection_type=fields.get("Connection type"),
        link_type=fields.get("Link type"),
        mtu_bytes=int(mtu.group(1)) if mtu else None,
        gid_index=int(gid_index) if gid_index and gid_index.isdigit() else None,
        local_gid=gids[0] if gids else None,
        remote_gid=gids[1] if len(gids) > 1 else None,
        bytes=int(size),
        iterations=int(iterations),
        bw_peak_gbps=round(float(peak) * scale, 6),
        bw_average_gbps=round(float(average) * scale, 6),
        msg_rate_mpps=float(rate),
    )


class AllReduceRow(BaseModel):
    """One message size of all_reduce_perf; times in microseconds, bandwidths in GB/s (10^9 bytes/s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int
    count: int
    type: str
    redop: str
    root: int
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int | None


class AllReducePerf(BaseModel):
    """An all_reduce_perf run: its rows, the tool's average busbw (GB/s) and the NCCL transport seen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nranks: int | None
    rows: list[AllReduceRow]
    avg_busbw_gbytes: float
    out_of_bounds: int | None = None
    transport: Transport | None = None

    @property
    def wrong(self) -> int:
        """Results that failed validation, out-of-place plus in-place (N/A counts as 0)."""
        return sum((r.oop_wrong or 0) + (r.ip_wrong or 0) for r in self.rows)

    @property
    def peak_busbw_gbytes(self) -> float:
        """busbw at the largest message size: the bandwidth-bound end, the one a link rate bounds.

        The tool's average includes small, latency-bound sizes, so it sits far below the link rate
        on a healthy fabric whenever the run starts at a few bytes.
        """
        largest = max(self.rows, key=lambda r: r.size)
        return max(largest.oop_busbw, largest.ip_busbw)

    @property
    def peak_busbw_gbps(self) -> float:
        """``peak_busbw_gbytes`` in Gb/s (x 8), the unit link rates are quoted in."""
        return self.peak_busbw_gbytes * GBYTES_TO_GBITS


_NUM = r"[\d.]+"


_WRONG = r"(\d+|N/A)"


_ALLREDUCE_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    rf"\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+{_WRONG}"
    rf"\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+{_WRONG}\s*$"
)


_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)")


_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")


_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+")


def parse_all_reduce_perf(text: str) -> AllReducePerf:
    """Parse nccl-tests ``all_reduce_perf`` output (any NCCL_DEBUG level, mpirun tags allowed)."""
    rows: list[AllReduceRow] = []
    ranks: set[int] = set()
    avg: float | None = None
    out_of_bounds: int | None = None
    for raw in text.splitlines():
        line = strip_prefixes(raw)
        if match := _ALLREDUCE_ROW.match(line):
            g = match.groups()
            rows.append(
                AllReduceRow(
                    size=int(g[0]),
                    count=int(g[1]),
                    type=g[2],
                    redop=g[3],
                    root=int(g[4]),
                    oop_time_us=float(g[5]),
                    oop_algbw=float(g[6]),
                    oop_busbw=float(g[7]),
                    oop_wrong=None if g[8] == "N/A" else int(g[8]),
                    ip_time_us=float(g[9]),
                    ip_algbw=float(g[10]),
                    ip_busbw=float(g[11]),
                    ip_wrong=None if g[12] == "N/A" else int(g[12]),
                )
            )
        elif match := _AVG_BUSBW.match(line.strip()):
            avg = float(match.group(1))
        elif match := _OUT_OF_BOUNDS.match(line.strip()):
            out_of_bounds = int(match.group(1))
        elif match := _RANK_LINE.match(line.strip()):
            ranks.add(int(match.group(1)))
    if not rows or avg is None:
        raise ImageCheckError(
            f"incomplete all_reduce_perf output ({len(rows)} result row(s), "
            f"{'an' if avg is not None else 'no'} '# Avg bus bandwidth' line): the test did not finish; "
            "look for 'NCCL WARN' or 'Test NCCL failure' lines in the log"
        )
    return AllReducePerf(
        nranks=len(ranks) or None,
        rows=rows,
        avg_busbw_gbytes=avg,
        out_of_bounds=out_of_bounds,
        transport=nccl_transport(text),
    )


_SOCKET_MARKERS = re.compile(r"NET/Socket\s*: Using \[|Using network Socket\b|via NET/Socket/")


_IB_MARKERS = re.compile(r"NET/IB\s*: Using \[|Using network IB\b|via NET/IB/")


def nccl_transport(text: str) -> Transport | None:
    """The inter-node transport NCCL chose, from its NCCL_DEBUG=INFO lines.

    "ib" for ``NET/IB : Using [0]mlx5_0:1/RoCE`` / ``Using network IB`` (InfiniBand and RoCE alike),
    "socket" for ``NET/Socket : Using [0]eth0:...`` / ``Using network Socket``, None when the log has
    no such line (NCCL_DEBUG below INFO, or a single-node run that never opened a network). NCCL only
    falls back to sockets when IB found no usable device, so any socket line means at least one rank
    runs over TCP, and the whole collective runs at that rank's speed: socket wins over ib.
    ``Bootstrap : Using eth0`` is the out-of-band TCP connection every run has, and is ignored.
    """
    lines = [strip_prefixes(line) for line in text.splitlines()]
    if any(_SOCKET_MARKERS.search(line) for line in lines):
        return "socket"
    if any(_IB_MARKERS.search(line) for line in lines):
        return "ib"
    return None


def bandwidth_verdict(
    measured_gbps: float,
    *,
    line_rate_gbps: float,
    transport: Transport | None,
    pass_ratio: float = 0.9,
    warn_ratio: float = 0.5,
    rdma_by_construction: bool = False,
    check: str = "rdma.bandwidth",
) -> Finding:
    """PASS/WARN/FAIL for a measured bandwidth against a link's rate, both in Gb/s.

    FAIL when NCCL used NET/Socket, whatever the number: TCP can look fine on a small job and then
    caps every collective at the host network's speed. PASS needs ``pass_ratio`` of the line rate
    (perftest reaches ~93-97% on a healthy RoCE link) and a confirmed RDMA transport: ``transport
    == "ib"``, or ``rdma_by_construction`` for ib_write_bw, which only ever runs over verbs. An
    unconfirmed transport caps the verdict at WARN. Below ``warn_ratio`` it is a FAIL.
    """
    if line_rate_gbps <= 0:
        raise ValueError(f"line_rate_gbps must be positive, got {line_rate_gbps}")
    ratio = measured_gbps / line_rate_gbps
    found = f"{measured_gbps:.2f} Gb/s = {ratio:.0%} of the {line_rate_gbps:g} Gb/s line rate"
    if transport == "socket":
        return Finding(
            check=check,
            verdict=Verdict.FAIL,
            found=f"NCCL fell back to NET/Socket (TCP): RDMA is not in use ({found})",
            fix=RDMA_NOT_IN_USE_FIX,
        )
    low_fix = (
        "check the link: ibv_devinfo state PORT_ACTIVE and active_mtu, ethtool speed of the RDMA NIC, "
        "PFC/ECN on the RoCE network, the GID index (-x / NCCL_IB_GID_INDEX) and that the GPU and "
        "NIC share a PCIe switch (nvidia-smi topo -m)"
    )
    if ratio < warn_ratio:
        return Finding(
            check=check, verdict=Verdict.FAIL, found=f"{found}, below {warn_ratio:.0%}", fix=low_fix
        )
    if ratio < pass_ratio:
        return Finding(
            check=check, verdict=Verdict.WARN, found=f"{found}, below {pass_ratio:.0%}", fix=low_fix
        )
    if transport != "ib" and not rdma_by_construction:
        return Finding(
            check=check,
            verdict=Verdict.WARN,
            found=f"{found}, but the log does not show which transport NCCL used",
            fix="rerun with NCCL_DEBUG=INFO: the log then shows 'NET/IB : Using ...' or 'NET/Socket' (TCP)",
        )
    return Finding(check=check, verdict=Verdict.PASS, found=found)


def ib_write_bw_verdict(
    result: IbWriteBw, *, line_rate_gbps: float, pass_ratio: float = 0.9, warn_ratio: float = 0.5
) -> Finding:
    """Bandwidth verdict for ib_write_bw: its BW average against the port's line rate (Gb/s)."""
    return bandwidth_verdict(
        result.bw_average_gbps,
        line_rate_gbps=line_rate_gbps,
        transport="ib",
        rdma_by_construction=True,
        check=f"rdma.ib_write_bw.{result.device}",
        pass_ratio=pass_ratio,
        warn_ratio=warn_ratio,
    )


def all_reduce_verdict(
    result: AllReducePerf, *, slowest_link_gbps: float, pass_ratio: float = 0.9, warn_ratio: float = 0.5
) -> Finding:
    """Bandwidth verdict for all_reduce_perf: busbw (GB/s x 8) against the slowest link on the ring (Gb/s).

    busbw = algbw x 2(n-1)/n is comparable with the per-rank hardware bandwidth of the bottleneck
    link. Across nodes that is each node's total RDMA bandwidth (NICs per node x line rate: NCCL
    spreads its channels over all of them), unless NVLink/PCIe inside a node is slower. Wrong
    results fail the check whatever the speed: the fabric corrupts data.
    """
    if result.wrong or result.out_of_bounds:
        return Finding(
            check="rdma.all_reduce_perf",
            verdict=Verdict.FAIL,
            found=f"{result.wrong} wrong result(s), {result.out_of_bounds or 0} out-of-bounds value(s)",
            fix="data was corrupted in transit: drain the node(s), check GPU/NIC health (dmesg, Xid errors)",
        )
    return bandwidth_verdict(
        result.peak_busbw_gbps,
        line_rate_gbps=slowest_link_gbps,
        transport=result.transport,
        check="rdma.all_reduce_perf",
        pass_ratio=pass_ratio,
        warn_ratio=warn_ratio,
    )
