"""Print one JSON line describing a training runtime: Python, torch, CUDA, NCCL and RDMA libraries.

Runs inside the runtime being checked (a container image, or the local training interpreter), so it
uses only the standard library and imports torch only to ask for its versions.
"""

from __future__ import annotations

import ctypes.util
import json
import platform
import shutil
import subprocess

RDMA_LIBRARIES = ("ibverbs", "rdmacm", "mlx5")
#: Programs the RDMA bandwidth check runs: ib_write_bw on ACK, mpirun + all_reduce_perf on DLC.
BANDWIDTH_TOOLS = ("ib_write_bw", "mpirun", "all_reduce_perf")


def nccl_version(raw: object) -> str | None:
    """torch reports NCCL as a tuple (2, 18, 1) or, in older releases, an int such as 21801 or 2708."""
    if isinstance(raw, tuple | list):
        return ".".join(str(part) for part in raw)
    if isinstance(raw, int) and raw > 0:
        # NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older releases major*1000 + minor*100 + patch.
        major, rest = divmod(raw, 10000) if raw >= 10000 else divmod(raw, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return None


def probe() -> dict[str, object]:
    report: dict[str, object] = {
        "python": platform.python_version(),
        "torch": None,
        "cuda": None,
        "nccl": None,
        "gpus": 0,
        "rdma_libs": [lib for lib in RDMA_LIBRARIES if ctypes.util.find_library(lib)],
        "ibv_devices": _ibv_devices(),
        "tools": [tool for tool in BANDWIDTH_TOOLS if shutil.which(tool)],
    }
    try:
        import torch
    except ImportError as exc:
        report["torch_error"] = str(exc)
        return report
    report["torch"] = torch.__version__
    report["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        report["gpus"] = torch.cuda.device_count()
        report["nccl"] = nccl_version(torch.cuda.nccl.version())
    return report


def _ibv_devices() -> list[str]:
    if shutil.which("ibv_devices") is None:
        return []
    out = subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=20, check=False).stdout
    return [line.split()[0] for line in out.splitlines()[2:] if line.strip()]


if __name__ == "__main__":
    print(json.dumps(probe()))
