"""The runtime probe: versions of Python, torch, CUDA and NCCL, and RDMA libraries, as one JSON line."""

from __future__ import annotations

import json
import platform
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aliyun_training import runtime_probe
from aliyun_training.runtime_probe import nccl_version, probe

PROBE_FILE = Path(runtime_probe.__file__)
#: These tests import torch into pytest's process (about 2 s of CPU): they run on the xdist worker of
#: the other tests that do, not on whichever worker is free.
IMPORTS_TORCH = pytest.mark.xdist_group("torch")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ((2, 18, 1), "2.18.1"),
        ([2, 21, 5], "2.21.5"),
        (21801, "2.18.1"),
        (22105, "2.21.5"),
        (20903, "2.9.3"),
        (2708, "2.7.8"),
        (2408, "2.4.8"),
    ],
)
def test_nccl_version_formats_every_encoding(raw, expected):
    assert nccl_version(raw) == expected


@pytest.mark.parametrize("raw", [0, None, -1, "2.18.1"])
def test_nccl_version_is_none_when_unknown(raw):
    assert nccl_version(raw) is None


@IMPORTS_TORCH
def test_probe_reports_this_interpreter_and_its_torch():
    import torch

    report = probe()

    assert report["python"] == platform.python_version()
    assert report["torch"] == torch.__version__
    assert report["cuda"] == torch.version.cuda
    assert "torch_error" not in report
    assert isinstance(report["rdma_libs"], list)
    assert isinstance(report["ibv_devices"], list)


@IMPORTS_TORCH
def test_probe_counts_gpus_only_when_cuda_is_available():
    import torch

    report = probe()

    if torch.cuda.is_available():
        assert report["gpus"] == torch.cuda.device_count()
        assert report["nccl"] == nccl_version(torch.cuda.nccl.version())
    else:
        assert report["gpus"] == 0
        assert report["nccl"] is None


def _run_probe_file(*flags: str) -> dict:
    result = subprocess.run(
        [sys.executable, *flags, str(PROBE_FILE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def test_probe_file_without_torch_reports_the_import_error():
    # -S leaves site-packages off sys.path, so torch cannot be imported but the stdlib-only probe runs.
    report = _run_probe_file("-S")

    assert report["python"] == platform.python_version()
    assert report["torch"] is None
    assert report["cuda"] is None
    assert report["nccl"] is None
    assert report["gpus"] == 0
    assert "torch" in report["torch_error"]


def test_a_runtime_without_torch_fails_the_task_saying_how_to_install_it_there(tmp_path: Path) -> None:
    from airflow.exceptions import AirflowFailException

    from aliyun_training.operators.runtime import LocalRuntimeOperator

    # An interpreter whose site-packages are off its path (-S): the probe runs, torch is missing.
    python = tmp_path / "python-without-site-packages"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)

    with pytest.raises(AirflowFailException) as failure:
        LocalRuntimeOperator(task_id="training_runtime", python=str(python)).execute({})

    message = str(failure.value)
    assert f"torch is not installed in the training runtime {python}" in message
    assert f"fix: install it into that interpreter, e.g. {python} -m pip install torch" in message


@pytest.mark.slow
@IMPORTS_TORCH
def test_probe_file_prints_one_json_line_with_torch():
    import torch

    report = _run_probe_file()

    assert report["torch"] == torch.__version__
    assert set(report) >= {"python", "torch", "cuda", "nccl", "gpus", "rdma_libs", "ibv_devices"}


def test_rdma_libraries_are_those_the_loader_finds(monkeypatch):
    found = {"ibverbs": "libibverbs.so.1", "mlx5": "libmlx5.so.1"}
    monkeypatch.setattr(runtime_probe.ctypes.util, "find_library", found.get)

    report = probe()

    assert report["rdma_libs"] == ["ibverbs", "mlx5"]


def _fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, output: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    echoes = "".join(f"echo '{line}'\n" for line in output.splitlines())
    tool.write_text(f"#!/bin/sh\n{echoes}")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_ibv_devices_are_read_from_the_device_listing(tmp_path, monkeypatch):
    listing = (
        "    device                 node GUID\n"
        "    ------              ----------------\n"
        "    mlx5_0              0c42a10300a1b2c3\n"
        "    mlx5_1              0c42a10300a1b2c4\n"
        "\n"
    )
    _fake_tool(tmp_path, monkeypatch, "ibv_devices", listing)

    assert runtime_probe._ibv_devices() == ["mlx5_0", "mlx5_1"]


def test_no_ibv_devices_tool_means_no_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))

    assert runtime_probe._ibv_devices() == []
