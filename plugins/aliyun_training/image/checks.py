"""Verdicts on a training image and on the RDMA fabric it runs over, from the tools' own output.

Three things can make a Lingjun job slow or broken without any error message: an image below the
guide's requirements (CUDA >= 11.2, NCCL >= 2.12.10, Python 3, the RDMA user-space libraries), a
link that delivers a fraction of its line rate, and NCCL quietly falling back from RDMA to TCP
(``NET/Socket``). The verify job runs the probe (``check_image.py``), ``ib_write_bw`` and
nccl-tests' ``all_reduce_perf``; this module turns their logs into PASS/WARN/FAIL findings, each
naming what it found and the fix, in the same model as the preflight report.

Units. ``ib_write_bw --report_gbits`` reports Gb/s (10^9 bits/s); nccl-tests reports algbw and
busbw in GB/s (10^9 bytes/s). Link rates are quoted in Gb/s, so every comparison here is done in
Gb/s and nccl-tests numbers are multiplied by 8.

Standard library and pydantic only: the verify job's log is parsed on the Airflow worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from aliyun_training.findings import Finding, Verdict
from aliyun_training.runtime_probe import RDMA_LIBRARIES, nccl_version

Transport = Literal["ib", "socket"]

MIN_CUDA: tuple[int, ...] = (11, 2)
MIN_NCCL: tuple[int, ...] = (2, 12, 10)
GBYTES_TO_GBITS = 8  # nccl-tests GB/s -> link Gb/s

BASE_IMAGE_FIX = (
    "build on a base image with CUDA >= {cuda} and NCCL >= {nccl} (include/docker/Dockerfile's default "
    "BASE_IMAGE pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime has CUDA 12.4 and NCCL 2.21.5)"
)
RDMA_INSTALL_FIX = (
    "install the Lingjun RDMA libraries in the image: the libnl-3/libnl-route-3, iproute2, udev, dmidecode, "
    "ethtool apt packages, then the nic-lib-rdma-core-installer-ubuntu.tar.gz installer "
    "(include/docker/Dockerfile, RDMA_INSTALLER_URL)"
)
RDMA_NOT_IN_USE_FIX = (
    "NCCL_DEBUG=INFO must show 'NET/IB : Using [0]mlx5_...'. Check: NCCL_IB_HCA names devices that "
    "ibv_devices lists (DLC injects it; on ACK set it) and NCCL_IB_DISABLE is not 1; the pod requests the "
    "RDMA resource (rdma/hca on Lingjun, aliyun/erdma for eRDMA) and has capability IPC_LOCK; the image "
    "has the RDMA libraries (libibverbs, librdmacm, mlx5: include/docker/Dockerfile)"
)

# Prefixes a job log puts before a tool's own line: an ISO-8601 timestamp (kubectl --timestamps,
# DLC log service) and mpirun --tag-output's "[1,0]<stdout>:".
_TIMESTAMP = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+")
_MPI_TAG = re.compile(r"^\s*\[\d+,\d+\]<(?:stdout|stderr)>:")


class ImageCheckError(ValueError):
    """A tool's output holds no result to judge: the message says what was expected and what was seen."""


# ----------------------------------------------------------------------------------------------
# The runtime probe
# ----------------------------------------------------------------------------------------------


def parse_probe_output(lines: Iterable[str] | str) -> dict[str, Any]:
    """The probe report: the last JSON object line of a job log that looks like one.

    The log carries other lines (pip, NCCL, the launcher) and may prefix each line with a timestamp
    such as ``2026-11-30T10:00:00.123Z``, so every line is searched for a JSON object that runs to the
    end of the line. Only objects with a ``python`` key count (the probe always writes it), so an
    unrelated JSON log line printed after the probe is not mistaken for it. The last one wins: a
    retried container prints the probe again and the latest run is the one that counts.
    """
    text_lines = lines.splitlines() if isinstance(lines, str) else list(lines)
    decoder = json.JSONDecoder()
    for line in reversed(text_lines):
        stripped = line.strip()
        start = stripped.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(stripped, start)
            except ValueError:
                value, end = None, -1
            if isinstance(value, dict) and "python" in value and not stripped[end:].strip():
                return value
            start = stripped.find("{", start + 1)
    tail = [line.rstrip() for line in text_lines[-5:]]
    raise ImageCheckError(
        f"no probe report in {len(text_lines)} log line(s): expected one JSON line such as "
        '{"python": "3.11.10", "torch": ..., "cuda": ..., "nccl": ...} printed by '
        f"/opt/aliyun-training/check_image.py; the log ends with: {tail}"
    )


def verify_probe(
    report: dict[str, Any],
    *,
    min_cuda: tuple[int, ...] = MIN_CUDA,
    min_nccl: tuple[int, ...] = MIN_NCCL,
    require_rdma: bool = True,
    require_gpu: bool = True,
) -> list[Finding]:
    """Judge a probe report against the Lingjun image requirements; one finding per requirement.

    ``require_gpu``: the probe reads NCCL's version only when torch sees a GPU, so an unknown NCCL
    means no GPU was visible. The verify job requests GPUs, so there that is a FAIL (the pod did not
    get its GPU, or the driver is not mounted); a probe run elsewhere (a CPU smoke run) passes
    ``require_gpu=False`` and gets a WARN.

    ``require_rdma``: the verify pod requests the RDMA resource, so missing libraries or no visible
    RDMA device is a FAIL; for an image meant for TCP-only (ECS) nodes it is a WARN.
    """
    cuda_fix = BASE_IMAGE_FIX.format(cuda=_dotted(min_cuda), nccl=_dotted(min_nccl))
    findings = [_check_python(report)]
    torch_finding = _check_torch(report)
    findings.append(torch_finding)
    torch_ok = torch_finding.verdict is Verdict.PASS
    findings.append(_check_cuda(report, min_cuda, cuda_fix, torch_ok))
    findings.append(_check_nccl(report, min_nccl, cuda_fix, torch_ok, require_gpu))
    findings.extend(_check_rdma(report, require_rdma))
    return findings


def _check_python(report: dict[str, Any]) -> Finding:
    version = str(report.get("python") or "")
    major = _version_tuple(version)[:1]
    if major == (3,):
        return Finding(check="image.python", verdict=Verdict.PASS, found=f"Python {version}")
    return Finding(
        check="image.python",
        verdict=Verdict.FAIL,
        found=f"Python {version or 'unknown'}; the Lingjun guide requires Python 3",
        fix="run the training and check_image.py with python3 (the default BASE_IMAGE ships Python 3.11)",
    )


def _check_torch(report: dict[str, Any]) -> Finding:
    if report.get("torch"):
        return Finding(check="image.torch", verdict=Verdict.PASS, found=f"torch {report['torch']}")
    error = report.get("torch_error") or "torch is not installed"
    return Finding(
        check="image.torch",
        verdict=Verdict.FAIL,
        found=f"torch does not import: {error}",
        fix=(
            "install a CUDA build of torch in the image's python3 "
            "(the default BASE_IMAGE has torch 2.5.1+cu124)"
        ),
    )


def _check_cuda(report: dict[str, Any], minimum: tuple[int, ...], fix: str, torch_ok: bool) -> Finding:
    want = _dotted(minimum)
    if not torch_ok:
        return Finding(
            check="image.cuda",
            verdict=Verdict.FAIL,
            found=f"CUDA unknown: torch does not import, so its CUDA version cannot be read (need >= {want})",
            fix="fix image.torch first",
        )
    cuda = report.get("cuda")
    if not cuda:
        return Finding(
            check="image.cuda",
            verdict=Verdict.FAIL,
            found=(
                f"torch {report.get('torch')} is a CPU-only build (torch.version.cuda is None); "
                f"need CUDA >= {want}"
            ),
            fix=fix,
        )
    if _version_tuple(str(cuda)) < minimum:
        return Finding(
            check="image.cuda",
            verdict=Verdict.FAIL,
            found=f"CUDA {cuda} is older than the required {want}",
            fix=fix,
        )
    return Finding(check="image.cuda", verdict=Verdict.PASS, found=f"CUDA {cuda} (>= {want})")


def _check_nccl(
    report: dict[str, Any], minimum: tuple[int, ...], fix: str, torch_ok: bool, require_gpu: bool
) -> Finding:
    want = _dotted(minimum)
    if not torch_ok:
        return Finding(
            check="image.nccl",
            verdict=Verdict.FAIL,
            found=f"NCCL unknown: torch does not import (need >= {want})",
            fix="fix image.torch first",
        )
    version = normalize_nccl(report.get("nccl"))
    if version is None:
        gpus = int(report.get("gpus") or 0)
        if gpus:
            found = f"NCCL unknown although {gpus} GPU(s) are visible: torch was built without NCCL"
            return Finding(check="image.nccl", verdict=Verdict.FAIL, found=found, fix=fix)
        return Finding(
            check="image.nccl",
            verdict=Verdict.FAIL if require_gpu else Verdict.WARN,
            found=(
                f"NCCL unknown: no GPU visible to torch (gpus=0), and the probe reads NCCL only on a GPU "
                f"(need >= {want})"
            ),
            fix=(
                "run the verify pod on a GPU node with a GPU request (nvidia.com/gpu, or the DLC GPU "
                "resource) so the NVIDIA driver is mounted; the image build's own check already read NCCL "
                "without a GPU"
            ),
        )
    if _version_tuple(version) < minimum:
        return Finding(
            check="image.nccl",
            verdict=Verdict.FAIL,
            found=f"NCCL {version} is older than the required {want}",
            fix=fix,
        )
    return Finding(check="image.nccl", verdict=Verdict.PASS, found=f"NCCL {version} (>= {want})")


def _check_rdma(report: dict[str, Any], require_rdma: bool) -> list[Finding]:
    short = Verdict.FAIL if require_rdma else Verdict.WARN
    found_libs = [str(lib) for lib in report.get("rdma_libs") or []]
    missing = [lib for lib in RDMA_LIBRARIES if lib not in found_libs]
    if missing:
        libs = Finding(
            check="image.rdma_libs",
            verdict=short,
            found=(
                f"RDMA libraries missing: {', '.join('lib' + lib for lib in missing)} "
                f"(found: {', '.join('lib' + lib for lib in found_libs) or 'none'})"
            ),
            fix=RDMA_INSTALL_FIX,
        )
    else:
        libs = Finding(
            check="image.rdma_libs",
            verdict=Verdict.PASS,
            found=f"RDMA libraries: {', '.join('lib' + lib for lib in found_libs)}",
        )
    devices = [str(dev) for dev in report.get("ibv_devices") or []]
    if devices:
        devs = Finding(
            check="image.ibv_devices", verdict=Verdict.PASS, found=f"RDMA devices: {', '.join(devices)}"
        )
    else:
        why = " (expected: the RDMA libraries are missing)" if missing else ""
        devs = Finding(
            check="image.ibv_devices",
            verdict=short,
            found=f"no RDMA device visible to the pod: ibv_devices listed none{why}",
            fix=(
                "request the RDMA resource for the pod (rdma/hca on Lingjun ACK nodes, aliyun/erdma "
                "for eRDMA; Lingjun resources on DLC) and add capability IPC_LOCK; on the node, "
                "ibv_devinfo must show state PORT_ACTIVE"
            ),
        )
    return [libs, devs]


def normalize_nccl(raw: object) -> str | None:
    """NCCL's version as "2.18.1" from any form a report carries.

    The probe already normalizes, but reports written by other tools (or by older probes) carry
    torch's raw forms: a tuple/list ``[2, 18, 1]``, an int ``21801`` (NCCL >= 2.9) or ``2708``
    (older: 2.7.8), or that int as a string. ``runtime_probe.nccl_version`` is the one decoder.
    """
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.isdigit():
            return nccl_version(int(raw))
        return raw.split("+")[0] or None
    return nccl_version(raw)


# ----------------------------------------------------------------------------------------------
# ib_write_bw (perftest)
# ----------------------------------------------------------------------------------------------


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
    lines = [_strip_prefixes(line) for line in text.splitlines()]
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


# ----------------------------------------------------------------------------------------------
# nccl-tests all_reduce_perf and NCCL's transport
# ----------------------------------------------------------------------------------------------


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
        line = _strip_prefixes(raw)
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
    lines = [_strip_prefixes(line) for line in text.splitlines()]
    if any(_SOCKET_MARKERS.search(line) for line in lines):
        return "socket"
    if any(_IB_MARKERS.search(line) for line in lines):
        return "ib"
    return None


# ----------------------------------------------------------------------------------------------
# Verdicts
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _strip_prefixes(line: str) -> str:
    line = _TIMESTAMP.sub("", line, count=1)
    return _MPI_TAG.sub("", line, count=1)


def _version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric components: "11.1" -> (11, 1), "2.18.1+cuda12.1" -> (2, 18, 1), "" -> ()."""
    parts: list[int] = []
    for piece in version.strip().split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)
