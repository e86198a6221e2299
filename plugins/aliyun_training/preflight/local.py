"""Checks for the local backend: CPUs/GPUs for every process, disk for the dataset, a free port."""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from aliyun_training.findings import Finding, Verdict
from aliyun_training.staging.engine import SPACE_HEADROOM
from aliyun_training.staging.opening import open_source

if TYPE_CHECKING:
    from aliyun_training.spec import TrainingJobSpec


def check_processors(spec: TrainingJobSpec) -> Finding:
    """One CPU per training process; oversubscribed gloo training crawls and may time out."""
    procs = spec.nodes * spec.procs_per_node
    cpus = len(os.sched_getaffinity(0))
    found = f"{procs} training process(es) ({spec.nodes} node(s) x {spec.procs_per_node}), {cpus} CPU(s)"
    if procs <= cpus:
        return Finding(check="cpus", verdict=Verdict.PASS, found=found)
    return Finding(
        check="cpus",
        verdict=Verdict.FAIL,
        found=found,
        fix=f"lower nodes or gpus_per_node so nodes x processes ≤ {cpus}, or run on a cloud backend",
    )


def check_gpus(spec: TrainingJobSpec) -> Finding:
    """GPUs requested per node must all exist on this one machine."""
    needed = spec.nodes * spec.gpus_per_node
    if needed == 0:
        return Finding(check="gpus", verdict=Verdict.PASS, found="CPU-only run (gloo); no GPU needed")
    visible = _visible_gpus()
    found = f"{needed} GPU(s) needed ({spec.nodes} node(s) x {spec.gpus_per_node}), {visible} visible"
    if visible >= needed:
        return Finding(check="gpus", verdict=Verdict.PASS, found=found)
    return Finding(
        check="gpus",
        verdict=Verdict.FAIL,
        found=found,
        fix="set gpus_per_node to 0 for a CPU run, lower nodes, or use the dlc/arena backend",
    )


def _visible_gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def check_disk(source_uri: str, target_root: str) -> Finding:
    """The dataset plus headroom must fit where it will be staged."""
    size = sum(obj.size for obj in open_source(source_uri).list())
    root = Path(target_root)
    existing = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(existing).free
    needed = int(size * SPACE_HEADROOM)
    found = f"dataset {size / 1e6:.1f} MB needs {needed / 1e6:.1f} MB; {free / 1e6:.1f} MB free at {existing}"
    if free >= needed:
        return Finding(check="disk", verdict=Verdict.PASS, found=found)
    return Finding(
        check="disk",
        verdict=Verdict.FAIL,
        found=found,
        fix=f"free {math.ceil((needed - free) / 1e6)} MB or point the staging target at a larger filesystem",
    )


def check_master_port(port: int | None) -> Finding:
    """The rendezvous port must be free; without a configured one, some port must be bindable."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port or 0))
            bound = sock.getsockname()[1]
    except OSError as exc:
        return Finding(
            check="master_port",
            verdict=Verdict.FAIL,
            found=f"127.0.0.1:{port} cannot be bound ({exc.strerror})",
            fix="stop what listens there, or leave master_port unset so a free port is picked",
        )
    what = f"configured port {port}" if port else f"a free port (e.g. {bound})"
    return Finding(check="master_port", verdict=Verdict.PASS, found=f"{what} is available on 127.0.0.1")
