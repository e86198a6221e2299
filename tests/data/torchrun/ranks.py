"""A rank of a distributed job that fails the way the test asks, for torchrun to report.

FAIL_RANK picks the rank (global RANK) that misbehaves, FAIL_MODE how:

- ``raise``: a ValueError, as a script bug does;
- ``says-nccl``: print lines of the script's own that mention an NCCL error and an Xid (a health
  report a training script might print), then the ValueError of ``raise``;
- ``exit65``: exit code 65 (EX_DATAERR), the job contract's "the data is unusable";
- ``memory``: Python's MemoryError (a host allocation that cannot be met);
- ``missing``: opening a dataset file that is not there (FileNotFoundError);
- ``import``: importing a module the image does not have (ModuleNotFoundError);
- ``exit3``: a message and exit code 3, no traceback (a script that stops itself);
- ``segv``: a segmentation fault (SIGSEGV), as a crashing native extension dies;
- ``abort``: ``abort()`` (SIGABRT), as a failed C++ assertion ends the process;
- ``wait``: write its pid to ``$PID_DIR/rank-<RANK>.pid`` and wait to be killed from outside;
- ``hang``: stop taking part in the collectives (its peers time out).

With COLLECTIVES=1 every rank joins a gloo process group and all-reduces in a loop, so the other
ranks see a failed rank the way DDP training does (their collective fails with it); otherwise the
ranks only wait, which keeps the case cheap (no torch import per rank).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

rank = int(os.environ["RANK"])
mode = os.environ.get("FAIL_MODE", "") if rank == int(os.environ.get("FAIL_RANK", "-1")) else ""
print(f"rank {rank} of {os.environ['WORLD_SIZE']} started", flush=True)
Path(os.environ["PID_DIR"], f"rank-{rank}.pid").write_text(str(os.getpid()))


def fail() -> None:
    if mode == "says-nccl":
        print(f"rank {rank}: NCCL error checks on (TORCH_NCCL_ASYNC_ERROR_HANDLING=1)", flush=True)
        print(f"rank {rank}: GPU health: no Xid events in the last 24 h", flush=True)
    if mode in ("raise", "says-nccl"):
        raise ValueError(f"batch of shape (32, 3, 30, 30) where (32, 3, 32, 32) was expected on rank {rank}")
    if mode == "exit65":
        print("dataset shard train-00003.npz holds 0 samples", file=sys.stderr, flush=True)
        sys.exit(65)
    if mode == "memory":
        bytearray(1 << 62)
    if mode == "missing":
        Path(os.environ.get("DATA_DIR", "/nonexistent"), "train-00009.npz").read_bytes()
    if mode == "import":
        __import__("a_module_the_image_does_not_have")
    if mode == "exit3":
        print(f"loss is NaN at step 3 on rank {rank}: stopping", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "abort":
        os.abort()
    if mode in ("wait", "hang"):
        time.sleep(3600)


if os.environ.get("COLLECTIVES") == "1":
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", timeout=timedelta(seconds=float(os.environ.get("COLLECTIVE_TIMEOUT", "20")))
    )
    tensor = torch.ones(4)
    for step in range(600):
        if step == 3:
            fail()
        dist.all_reduce(tensor)
        time.sleep(0.05)
else:
    time.sleep(0.5)
    fail()
    time.sleep(3600)
