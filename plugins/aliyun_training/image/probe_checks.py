"""Verdicts on a training image from the probe's own output (``check_image.py``): the guide's
requirements (CUDA >= 11.2, NCCL >= 2.12.10, Python 3, the RDMA user-space libraries), each a
PASS/WARN/FAIL finding naming what it found and the fix, in the preflight report's model.

Standard library and pydantic only: the verify job's log is parsed on the Airflow worker.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from aliyun_training.findings import Finding, Verdict
from aliyun_training.runtime_probe import RDMA_LIBRARIES, nccl_version

if TYPE_CHECKING:
    from collections.abc import Iterable

from aliyun_training.image.tool_output import ImageCheckError

MIN_CUDA: tuple[int, ...] = (11, 2)


MIN_NCCL: tuple[int, ...] = (2, 12, 10)


BASE_IMAGE_FIX = (
    "build on a base image with CUDA >= {cuda} and NCCL >= {nccl} (include/docker/Dockerfile's default "
    "BASE_IMAGE pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime has CUDA 12.4 and NCCL 2.21.5)"
)


RDMA_INSTALL_FIX = (
    "install the Lingjun RDMA libraries in the image: the libnl-3/libnl-route-3, iproute2, udev, dmidecode, "
    "ethtool apt packages, then the nic-lib-rdma-core-installer-ubuntu.tar.gz installer "
    "(include/docker/Dockerfile, RDMA_INSTALLER_URL)"
)


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
