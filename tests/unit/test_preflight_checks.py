"""Local-backend preflight checks and the report that lists every finding at once."""

from __future__ import annotations

import re
import socket
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from aliyun_training.findings import Finding, NotApplicable, PreflightReport, Verdict
from aliyun_training.preflight import local
from aliyun_training.preflight.local import check_disk, check_gpus, check_master_port, check_processors
from aliyun_training.spec import TrainingJobSpec

#: "2 node(s) x 4" or "2 node(s) \N{MULTIPLICATION SIGN} 4": either sign reads the same to a user.
TIMES = "[x\N{MULTIPLICATION SIGN}*]"


def _spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec.parse({"command": "torchrun train.py", **fields})


def _cpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(local.os, "sched_getaffinity", lambda pid: set(range(count)))


def test_processors_pass_when_every_process_gets_a_cpu(monkeypatch):
    _cpus(monkeypatch, 4)

    finding = check_processors(_spec(nodes=4))

    assert finding.check == "cpus"
    assert finding.verdict is Verdict.PASS
    assert "4 training process(es)" in finding.found
    assert "4 CPU(s)" in finding.found
    assert finding.fix == ""


def test_processors_fail_one_past_the_cpu_count(monkeypatch):
    _cpus(monkeypatch, 4)

    finding = check_processors(_spec(nodes=5))

    assert finding.verdict is Verdict.FAIL
    assert re.search(rf"5 training process\(es\) \(5 node\(s\) {TIMES} 1\)", finding.found)
    assert "lower nodes or gpus_per_node" in finding.fix
    assert re.search(r"\b4\b", finding.fix)


def test_processors_count_one_process_per_gpu(monkeypatch):
    _cpus(monkeypatch, 7)

    finding = check_processors(_spec(nodes=2, gpus_per_node=4))

    assert finding.verdict is Verdict.FAIL
    assert re.search(rf"8 training process\(es\) \(2 node\(s\) {TIMES} 4\)", finding.found)


def test_cpu_only_run_needs_no_gpu(monkeypatch):
    def which(name):
        pytest.fail(f"a CPU-only run must not look for {name}")

    monkeypatch.setattr(local.shutil, "which", which)

    finding = check_gpus(_spec(nodes=2, gpus_per_node=0))

    assert finding.check == "gpus"
    assert finding.verdict is Verdict.PASS
    assert "CPU-only" in finding.found


def test_gpus_requested_without_nvidia_smi_fail_with_a_fix(monkeypatch):
    monkeypatch.setattr(local.shutil, "which", lambda name: None)

    finding = check_gpus(_spec(gpus_per_node=1))

    assert finding.verdict is Verdict.FAIL
    assert "1 GPU(s) needed" in finding.found
    assert "0 visible" in finding.found
    assert "set gpus_per_node to 0 for a CPU run" in finding.fix


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", str(bin_dir))


TWO_GPUS = (
    "echo 'GPU 0: NVIDIA H100 (UUID: GPU-aaaa)'\n"
    "echo 'GPU 1: NVIDIA H100 (UUID: GPU-bbbb)'\n"
    "echo '  MIG 1g.10gb Device 0: (UUID: MIG-cccc)'\n"
)


def test_gpus_pass_when_enough_are_listed(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, TWO_GPUS)

    finding = check_gpus(_spec(nodes=2, gpus_per_node=1))

    assert finding.verdict is Verdict.PASS
    assert re.search(rf"2 GPU\(s\) needed \(2 node\(s\) {TIMES} 1\), 2 visible", finding.found)


def test_gpus_fail_when_more_are_needed_than_listed(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, TWO_GPUS)

    finding = check_gpus(_spec(nodes=1, gpus_per_node=4))

    assert finding.verdict is Verdict.FAIL
    assert "2 visible" in finding.found


def test_failing_nvidia_smi_counts_as_no_gpus(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")

    finding = check_gpus(_spec(gpus_per_node=1))

    assert finding.verdict is Verdict.FAIL
    assert "0 visible" in finding.found


@pytest.fixture
def dataset_uri(tmp_path: Path) -> str:
    source = tmp_path / "bucket" / "v1"
    (source / "train").mkdir(parents=True)
    (source / "train" / "shard-0.npz").write_bytes(b"x" * 600_000)
    (source / "test.npz").write_bytes(b"y" * 400_000)
    return source.as_uri() + "/"


def _free_bytes(monkeypatch: pytest.MonkeyPatch, free: int) -> list[Path]:
    asked = []

    def disk_usage(path):
        asked.append(Path(path))
        return SimpleNamespace(total=10**12, used=10**12 - free, free=free)

    monkeypatch.setattr(local.shutil, "disk_usage", disk_usage)
    return asked


def test_disk_passes_on_this_filesystem_for_a_small_dataset(dataset_uri, tmp_path):
    finding = check_disk(dataset_uri, str(tmp_path / "staging"))

    assert finding.check == "disk"
    assert finding.verdict is Verdict.PASS
    assert "dataset 1.0 MB needs 1.2 MB" in finding.found


def test_disk_fails_when_the_dataset_and_headroom_do_not_fit(dataset_uri, tmp_path, monkeypatch):
    _free_bytes(monkeypatch, 1_100_000)

    finding = check_disk(dataset_uri, str(tmp_path / "staging"))

    assert finding.verdict is Verdict.FAIL
    assert "1.1 MB free" in finding.found
    assert "point the staging target at a larger filesystem" in finding.fix


def test_disk_fix_never_asks_to_free_less_than_the_shortfall(dataset_uri, tmp_path, monkeypatch):
    # 1.2 MB needed, 1.1 MB free: the user must free 0.1 MB, and the advice must not say less.
    _free_bytes(monkeypatch, 1_100_000)

    finding = check_disk(dataset_uri, str(tmp_path / "staging"))

    advised = re.match(r"free ([0-9.]+) MB", finding.fix)
    assert advised is not None, finding.fix
    assert float(advised.group(1)) * 1e6 >= 100_000, finding.fix


def test_disk_passes_exactly_at_the_needed_space(dataset_uri, tmp_path, monkeypatch):
    _free_bytes(monkeypatch, 1_200_000)

    finding = check_disk(dataset_uri, str(tmp_path / "staging"))

    assert finding.verdict is Verdict.PASS


def test_disk_measures_the_nearest_existing_parent_of_the_target(dataset_uri, tmp_path, monkeypatch):
    asked = _free_bytes(monkeypatch, 10**9)

    finding = check_disk(dataset_uri, str(tmp_path / "not" / "yet" / "created"))

    assert asked == [tmp_path]
    assert f"free at {tmp_path}" in finding.found


def test_master_port_in_use_fails_with_a_fix():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        finding = check_master_port(port)

    assert finding.check == "master_port"
    assert finding.verdict is Verdict.FAIL
    assert f"127.0.0.1:{port} cannot be bound" in finding.found
    assert "leave master_port unset" in finding.fix


def test_unset_master_port_passes_with_a_free_port():
    finding = check_master_port(None)

    assert finding.verdict is Verdict.PASS
    assert "a free port" in finding.found


def test_configured_free_master_port_passes():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    finding = check_master_port(port)

    assert finding.verdict is Verdict.PASS
    assert f"configured port {port} is available" in finding.found


FINDINGS = [
    Finding(check="cpus", verdict=Verdict.PASS, found="2 processes, 8 CPUs", fix="not shown for a pass"),
    Finding(check="disk", verdict=Verdict.WARN, found="little headroom", fix="free some space"),
    Finding(check="master_port", verdict=Verdict.FAIL, found="port 29500 in use", fix="unset master_port"),
]


def test_report_renders_every_finding_on_its_own_line():
    text = PreflightReport(findings=FINDINGS).render()

    for finding in FINDINGS:
        line = next(line for line in text.splitlines() if finding.found in line)
        assert line.startswith(finding.verdict.value)
        assert finding.check in line


def test_report_shows_fixes_only_for_findings_that_did_not_pass():
    text = PreflightReport(findings=FINDINGS).render()

    assert "fix: free some space" in text
    assert "fix: unset master_port" in text
    assert "not shown for a pass" not in text
    assert len(text.splitlines()) == len(FINDINGS) + 2


def test_report_aligns_the_found_column():
    lines = PreflightReport(findings=FINDINGS).render().splitlines()

    columns = {line.index(f.found) for f in FINDINGS for line in lines if f.found in line}
    fix_columns = {line.index("fix:") for line in lines if "fix:" in line}
    assert len(columns) == 1
    assert fix_columns == columns


def test_report_failed_only_with_a_fail():
    assert PreflightReport(findings=FINDINGS).failed
    assert not PreflightReport(findings=FINDINGS[:2]).failed


def test_report_lists_checks_that_did_not_run_with_why_aligned_and_never_as_a_failure():
    skipped = NotApplicable(check="preflight.check_quota", reason="quota checks apply to the dlc backend")
    report = PreflightReport(findings=FINDINGS[:2], not_applicable=[skipped])
    lines = report.render().splitlines()

    assert lines[-1].startswith("SKIP  preflight.check_quota") and lines[-1].endswith(skipped.reason)
    assert len({line.index(f.found) for f in FINDINGS[:2] for line in lines if f.found in line}) == 1
    assert lines[-1].index(skipped.reason) == lines[0].index(FINDINGS[0].found)
    assert not report.failed
