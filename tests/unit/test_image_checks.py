"""Image and RDMA fabric checks: probe verdicts, perftest / nccl-tests parsing, bandwidth verdicts."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aliyun_training.findings import Verdict
from aliyun_training.image.fabric_checks import (
    all_reduce_verdict,
    bandwidth_verdict,
    ib_write_bw_verdict,
    nccl_transport,
    parse_all_reduce_perf,
    parse_ib_write_bw,
)
from aliyun_training.image.probe_checks import normalize_nccl, parse_probe_output, verify_probe
from aliyun_training.image.tool_output import ImageCheckError

ROOT = Path(__file__).resolve().parents[2]
RDMA = ROOT / "tests" / "data" / "rdma"
PROBE = ROOT / "tests" / "data" / "probe"
DOCKERFILE = ROOT / "include" / "docker" / "Dockerfile"

GOOD = {
    "python": "3.11.10",
    "torch": "2.5.1",
    "cuda": "12.4",
    "nccl": "2.21.5",
    "gpus": 8,
    "rdma_libs": ["ibverbs", "rdmacm", "mlx5"],
    "ibv_devices": ["mlx5_bond_0", "mlx5_bond_1"],
}


def by_check(findings):
    return {f.check: f for f in findings}


# ---------------------------------------------------------------------------------------------
# verify_probe
# ---------------------------------------------------------------------------------------------


def test_good_probe_passes_every_check():
    findings = verify_probe(GOOD)
    assert [f.check for f in findings] == [
        "image.python",
        "image.torch",
        "image.cuda",
        "image.nccl",
        "image.rdma_libs",
        "image.ibv_devices",
    ]
    assert all(f.verdict is Verdict.PASS for f in findings), [
        f for f in findings if f.verdict is not Verdict.PASS
    ]
    assert by_check(findings)["image.nccl"].found == "NCCL 2.21.5 (>= 2.12.10)"


def test_old_cuda_fails_naming_found_and_required_versions():
    finding = by_check(verify_probe({**GOOD, "cuda": "11.1"}))["image.cuda"]
    assert finding.verdict is Verdict.FAIL
    assert "11.1" in finding.found and "11.2" in finding.found
    assert "CUDA >= 11.2" in finding.fix


def test_cuda_exactly_at_the_minimum_passes():
    assert by_check(verify_probe({**GOOD, "cuda": "11.2"}))["image.cuda"].verdict is Verdict.PASS


def test_cpu_only_torch_fails_cuda():
    finding = by_check(verify_probe({**GOOD, "cuda": None, "nccl": None, "gpus": 0}))["image.cuda"]
    assert finding.verdict is Verdict.FAIL
    assert "CPU-only" in finding.found


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ((2, 10, 3), "2.10.3"),  # torch >= 1.11 returns a tuple
        ([2, 10, 3], "2.10.3"),  # ... which JSON turns into a list
        (21003, "2.10.3"),  # older torch: major*10000 + minor*100 + patch
        ("21003", "2.10.3"),
        (2708, "2.7.8"),  # NCCL < 2.9: major*1000 + minor*100 + patch
        ("2.12.9", "2.12.9"),
    ],
)
def test_old_nccl_fails_in_every_form_naming_the_version(raw, shown):
    finding = by_check(verify_probe({**GOOD, "nccl": raw}))["image.nccl"]
    assert finding.verdict is Verdict.FAIL
    assert f"NCCL {shown} is older than the required 2.12.10" == finding.found
    assert "NCCL >= 2.12.10" in finding.fix


@pytest.mark.parametrize("raw", [(2, 12, 10), 21210, "2.12.10", (2, 21, 5), 22105, "2.18.1+cuda12.1"])
def test_new_enough_nccl_passes_in_every_form(raw):
    assert by_check(verify_probe({**GOOD, "nccl": raw}))["image.nccl"].verdict is Verdict.PASS


def test_normalize_nccl_reuses_the_probe_decoder():
    assert normalize_nccl((2, 18, 1)) == "2.18.1"
    assert normalize_nccl(21801) == "2.18.1"
    assert normalize_nccl(2708) == "2.7.8"
    assert normalize_nccl(None) is None
    assert normalize_nccl(True) is None


def test_unknown_nccl_without_gpu_fails_on_the_verify_job_and_warns_elsewhere():
    report = {**GOOD, "nccl": None, "gpus": 0}
    strict = by_check(verify_probe(report))["image.nccl"]
    assert strict.verdict is Verdict.FAIL
    assert "no GPU visible" in strict.found and "nvidia.com/gpu" in strict.fix
    relaxed = by_check(verify_probe(report, require_gpu=False))["image.nccl"]
    assert relaxed.verdict is Verdict.WARN


def test_unknown_nccl_with_gpus_means_torch_has_no_nccl():
    finding = by_check(verify_probe({**GOOD, "nccl": None, "gpus": 8}, require_gpu=False))["image.nccl"]
    assert finding.verdict is Verdict.FAIL
    assert "8 GPU(s) are visible" in finding.found


@pytest.mark.parametrize("python", ["2.7.18", None, ""])
def test_python_other_than_3_fails(python):
    finding = by_check(verify_probe({**GOOD, "python": python}))["image.python"]
    assert finding.verdict is Verdict.FAIL
    assert "Python 3" in finding.found


def test_missing_torch_fails_with_its_import_error_and_does_not_guess_versions():
    report = {**GOOD, "torch": None, "cuda": None, "nccl": None, "gpus": 0}
    report["torch_error"] = "No module named 'torch'"
    findings = by_check(verify_probe(report))
    assert findings["image.torch"].verdict is Verdict.FAIL
    assert "No module named 'torch'" in findings["image.torch"].found
    assert findings["image.cuda"].verdict is Verdict.FAIL
    assert findings["image.cuda"].fix == "fix image.torch first"
    assert findings["image.nccl"].fix == "fix image.torch first"


def test_no_rdma_libs_fails_naming_the_missing_ones_and_the_installer():
    findings = by_check(verify_probe({**GOOD, "rdma_libs": ["mlx5"], "ibv_devices": []}))
    libs = findings["image.rdma_libs"]
    assert libs.verdict is Verdict.FAIL
    assert "libibverbs, librdmacm" in libs.found
    assert "found: libmlx5" in libs.found
    assert "nic-lib-rdma-core-installer-ubuntu.tar.gz" in libs.fix
    devices = findings["image.ibv_devices"]
    assert devices.verdict is Verdict.FAIL
    assert "RDMA libraries are missing" in devices.found


def test_no_rdma_devices_fails_with_resource_hint_and_warns_when_rdma_is_optional():
    finding = by_check(verify_probe({**GOOD, "ibv_devices": []}))["image.ibv_devices"]
    assert finding.verdict is Verdict.FAIL
    assert "rdma/hca" in finding.fix and "IPC_LOCK" in finding.fix
    relaxed = by_check(verify_probe({**GOOD, "rdma_libs": [], "ibv_devices": []}, require_rdma=False))
    assert relaxed["image.rdma_libs"].verdict is Verdict.WARN
    assert relaxed["image.ibv_devices"].verdict is Verdict.WARN


# ---------------------------------------------------------------------------------------------
# parse_probe_output
# ---------------------------------------------------------------------------------------------


def test_parse_probe_output_takes_the_last_probe_line_despite_timestamps_and_noise():
    lines = (PROBE / "verify_pod.log").read_text().splitlines()
    report = parse_probe_output(lines)
    # the retried container's report, not the first attempt's, and not the JSON log line after it
    assert report["gpus"] == 2
    assert report["nccl"] == "2.21.5"
    assert report["ibv_devices"] == ["mlx5_bond_0", "mlx5_bond_1"]
    assert all(f.verdict is Verdict.PASS for f in verify_probe(report))


def test_parse_probe_output_accepts_text_and_bare_lines():
    text = 'pip noise\n{"python": "3.11.10", "torch": null}\n'
    assert parse_probe_output(text) == {"python": "3.11.10", "torch": None}


def test_parse_probe_output_ignores_braces_that_are_not_a_report():
    lines = ['2026-11-30T10:00:00Z {"python": "3.11.10"} trailing words', "dict {not json}"]
    with pytest.raises(ImageCheckError, match="no probe report in 2 log line"):
        parse_probe_output(lines)


def test_parse_probe_output_without_a_report_says_what_was_expected():
    with pytest.raises(ImageCheckError, match=r"check_image\.py") as info:
        parse_probe_output(["Traceback (most recent call last):", "ImportError: libcuda.so.1"])
    assert "ImportError: libcuda.so.1" in str(info.value)


# ---------------------------------------------------------------------------------------------
# ib_write_bw
# ---------------------------------------------------------------------------------------------


def test_parse_ib_write_bw_client_duration_mode():
    result = parse_ib_write_bw((RDMA / "ib_write_bw_client.txt").read_text())
    assert result.role == "client"
    assert result.device == "mlx5_bond_0"
    assert result.transport_type == "IB"
    assert result.connection_type == "RC"
    assert result.link_type == "Ethernet"
    assert result.mtu_bytes == 4096
    assert result.gid_index == 3
    assert result.local_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:00:12:08"
    assert result.remote_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:00:12:07"
    assert result.bytes == 65536
    assert result.iterations == 5388737
    assert result.bw_peak_gbps == 0.0  # -D: perftest does not measure the peak
    assert result.bw_average_gbps == 188.35
    assert result.msg_rate_mpps == 0.359249


def test_parse_ib_write_bw_server_iteration_mode():
    result = parse_ib_write_bw((RDMA / "ib_write_bw_server.txt").read_text())
    assert result.role == "server"
    assert result.device == "mlx5_bond_0"
    assert result.local_gid.endswith("10:00:12:07")
    assert (result.bytes, result.iterations) == (65536, 5000)
    assert (result.bw_peak_gbps, result.bw_average_gbps, result.msg_rate_mpps) == (189.27, 188.91, 0.360317)


def test_parse_ib_write_bw_connection_failure_raises_with_the_tool_message():
    with pytest.raises(ImageCheckError, match=r"Couldn't connect to 10\.0\.12\.7:18515"):
        parse_ib_write_bw((RDMA / "ib_write_bw_connect_failed.txt").read_text())


def test_parse_ib_write_bw_converts_mb_per_sec_and_tolerates_log_prefixes():
    text = (RDMA / "ib_write_bw_client.txt").read_text()
    text = text.replace("[Gb/sec]", "[MB/sec]").replace("188.35 ", "22452.93")
    prefixed = "\n".join(f"2026-11-30T10:00:00.123Z {line}" for line in text.splitlines())
    result = parse_ib_write_bw(prefixed)
    assert result.device == "mlx5_bond_0"
    assert result.bw_average_gbps == pytest.approx(188.35, abs=0.01)


def test_parse_ib_write_bw_without_a_result_row_raises():
    text = (RDMA / "ib_write_bw_client.txt").read_text()
    cut = text[: text.index(" #bytes")]
    with pytest.raises(ImageCheckError, match="no ib_write_bw result row"):
        parse_ib_write_bw(cut)


def test_ib_write_bw_verdict_is_rdma_by_construction():
    result = parse_ib_write_bw((RDMA / "ib_write_bw_client.txt").read_text())
    finding = ib_write_bw_verdict(result, line_rate_gbps=200)
    assert finding.verdict is Verdict.PASS
    assert finding.check == "rdma.ib_write_bw.mlx5_bond_0"
    assert finding.found == "188.35 Gb/s = 94% of the 200 Gb/s line rate"
    assert ib_write_bw_verdict(result, line_rate_gbps=400).verdict is Verdict.FAIL  # 47%


# ---------------------------------------------------------------------------------------------
# all_reduce_perf and NCCL transport
# ---------------------------------------------------------------------------------------------


def test_parse_all_reduce_perf_2x8():
    result = parse_all_reduce_perf((RDMA / "all_reduce_perf_2x8.txt").read_text())
    assert result.nranks == 16
    assert len(result.rows) == 14
    first, last = result.rows[0], result.rows[-1]
    assert (first.size, first.count, first.type, first.redop, first.root) == (
        1048576,
        262144,
        "float",
        "sum",
        -1,
    )
    assert (first.oop_time_us, first.oop_algbw, first.oop_busbw, first.oop_wrong) == (176.8, 5.93, 11.12, 0)
    assert (first.ip_time_us, first.ip_algbw, first.ip_busbw, first.ip_wrong) == (177.8, 5.90, 11.06, 0)
    assert (last.size, last.count) == (8589934592, 2147483648)
    assert (last.oop_time_us, last.oop_algbw, last.oop_busbw) == (169338.0, 50.73, 95.11)
    assert (last.ip_time_us, last.ip_algbw, last.ip_busbw) == (168383.0, 51.01, 95.65)
    assert result.avg_busbw_gbytes == 70.8595
    assert result.out_of_bounds == 0
    assert result.wrong == 0
    assert result.peak_busbw_gbytes == 95.65
    assert result.peak_busbw_gbps == pytest.approx(765.2)
    assert result.transport == "ib"


def test_all_reduce_verdict_compares_busbw_in_gbits_with_the_slowest_link():
    result = parse_all_reduce_perf((RDMA / "all_reduce_perf_2x8.txt").read_text())
    # 4 x 200 Gb/s RoCE bonds per node: 800 Gb/s; busbw 95.65 GB/s x 8 = 765.2 Gb/s
    finding = all_reduce_verdict(result, slowest_link_gbps=800)
    assert finding.verdict is Verdict.PASS
    assert finding.found == "765.20 Gb/s = 96% of the 800 Gb/s line rate"
    assert all_reduce_verdict(result, slowest_link_gbps=1600).verdict is Verdict.FAIL  # 48%
    assert all_reduce_verdict(result, slowest_link_gbps=1000).verdict is Verdict.WARN  # 77%


def test_all_reduce_with_wrong_results_fails_whatever_the_speed():
    text = (RDMA / "all_reduce_perf_2x8.txt").read_text()
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("8589934592"))
    lines[index] = re.sub(r"(\s)0$", r"\g<1>3", lines[index])
    result = parse_all_reduce_perf("\n".join(lines))
    assert result.wrong == 3
    finding = all_reduce_verdict(result, slowest_link_gbps=800)
    assert finding.verdict is Verdict.FAIL
    assert "3 wrong result(s)" in finding.found


def test_parse_all_reduce_perf_under_mpirun_tags_and_na_wrong_column():
    text = "\n".join(
        [
            "[1,0]<stdout>:#  Rank  0 Group  0 Pid     57 on lingjun-nccl-worker-0 device  0 [0x0e] H800",
            "[1,0]<stdout>:#  Rank  1 Group  0 Pid     61 on lingjun-nccl-worker-1 device  0 [0x0e] H800",
            "[1,0]<stdout>:    67108864      16777216     float     sum      -1"
            "    21934    3.06    3.06    N/A    21930    3.06    3.06    N/A",
            "[1,0]<stdout>:# Out of bounds values : 0 OK",
            "[1,0]<stdout>:# Avg bus bandwidth    : 3.06 ",
        ]
    )
    result = parse_all_reduce_perf(text)
    assert result.nranks == 2
    assert result.rows[0].oop_wrong is None
    assert result.avg_busbw_gbytes == 3.06
    assert result.transport is None


def test_parse_all_reduce_perf_incomplete_run_raises():
    text = (RDMA / "all_reduce_perf_2x8.txt").read_text()
    with pytest.raises(ImageCheckError, match="did not finish"):
        parse_all_reduce_perf(text[: text.index("# Out of bounds")])


def test_nccl_transport_ib_socket_and_unknown():
    assert nccl_transport((RDMA / "all_reduce_perf_2x8.txt").read_text()) == "ib"
    assert nccl_transport((RDMA / "nccl_socket_fallback.txt").read_text()) == "socket"
    assert nccl_transport("node:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n") is None
    assert nccl_transport("node:1:1 [0] NCCL INFO NET/IB : No device found.\n") is None
    assert nccl_transport("node:1:1 [0] NCCL INFO Using network IB\n") == "ib"
    # one rank on TCP drags the whole collective: socket wins over ib
    mixed = (
        "a NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0\n"
        "b NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n"
    )
    assert nccl_transport(mixed) == "socket"


def test_socket_fallback_fails_even_when_the_number_looks_fine():
    text = (RDMA / "nccl_socket_fallback.txt").read_text()
    result = parse_all_reduce_perf(text)
    assert result.transport == "socket"
    assert result.peak_busbw_gbytes == 2.89
    # 2.89 GB/s x 8 = 23.1 Gb/s: 92% of a 25 Gb/s host NIC, and still a FAIL
    finding = all_reduce_verdict(result, slowest_link_gbps=25)
    assert finding.verdict is Verdict.FAIL
    assert "RDMA is not in use" in finding.found
    for hint in ("NCCL_IB_HCA", "rdma/hca", "IPC_LOCK", "libibverbs"):
        assert hint in finding.fix
    assert bandwidth_verdict(800, line_rate_gbps=800, transport="socket").verdict is Verdict.FAIL


@pytest.mark.parametrize(
    ("measured", "transport", "expected"),
    [
        (90, "ib", Verdict.PASS),
        (89.9, "ib", Verdict.WARN),
        (50, "ib", Verdict.WARN),
        (49.9, "ib", Verdict.FAIL),
        (95, None, Verdict.WARN),  # all_reduce without NCCL_DEBUG=INFO: RDMA not confirmed
        (10, None, Verdict.FAIL),
    ],
)
def test_bandwidth_verdict_thresholds(measured, transport, expected):
    assert bandwidth_verdict(measured, line_rate_gbps=100, transport=transport).verdict is expected


def test_bandwidth_verdict_unknown_transport_passes_when_rdma_by_construction():
    finding = bandwidth_verdict(95, line_rate_gbps=100, transport=None, rdma_by_construction=True)
    assert finding.verdict is Verdict.PASS


def test_bandwidth_verdict_rejects_a_zero_line_rate():
    with pytest.raises(ValueError, match="line_rate_gbps"):
        bandwidth_verdict(1, line_rate_gbps=0, transport="ib")


# ---------------------------------------------------------------------------------------------
# Dockerfile: the seed's RDMA steps, and the build-time version check run against a fake torch
# ---------------------------------------------------------------------------------------------


def _instructions() -> list[str]:
    """Logical Dockerfile instructions: comment lines dropped, backslash continuations joined."""
    joined, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1]
            continue
        current += line
        if current.strip():
            joined.append(current.strip())
        current = ""
    return joined


def test_dockerfile_keeps_the_lingjun_rdma_steps_verbatim():
    text = DOCKERFILE.read_text()
    assert (
        "apt-get install -y --allow-downgrades --allow-change-held-packages --no-install-recommends "
        "libnl-3-dev libnl-route-3-dev libnl-3-200 libnl-route-3-200 iproute2 udev dmidecode ethtool"
    ) in text
    assert (
        "ARG RDMA_INSTALLER_URL=http://pythonrun.oss-cn-zhangjiakou.aliyuncs.com/rdma/"
        "nic-libs-mellanox-rdma-5.2-2/nic-lib-rdma-core-installer-ubuntu.tar.gz"
    ) in text
    installer = next(i for i in _instructions() if "install.sh" in i)
    steps = [step.strip() for step in installer.removeprefix("RUN").split("&&")]
    assert steps == [
        "cd /tmp/",
        'wget "${RDMA_INSTALLER_URL}"',
        "tar xzvf nic-lib-rdma-core-installer-ubuntu.tar.gz",
        "cd nic-lib-rdma-core-installer-ubuntu",
        "echo Y | /bin/bash install.sh",
        "cd ..",
        "rm -rf nic-lib-rdma-core-installer-ubuntu",
        "rm -f nic-lib-rdma-core-installer-ubuntu.tar.gz",
    ]
    assert "COPY check_image.py /opt/aliyun-training/check_image.py" in text
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.MULTILINE)
    assert "ARG BUILD_NCCL_TESTS=1" in text


def _build_check_program() -> str:
    run = next(i for i in _instructions() if "python3 -c" in i)
    argv = shlex.split(run.removeprefix("RUN"))
    return argv[argv.index("-c") + 1]


FAKE_TORCH = """\
import types
__version__ = "2.5.1"
version = types.SimpleNamespace(cuda={cuda!r})
cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: {nccl!r}))
"""


@pytest.mark.parametrize(
    ("cuda", "nccl", "ok"),
    [
        ("12.4", (2, 21, 5), True),
        ("11.2", (2, 12, 10), True),
        ("11.8", 21602, True),
        ("11.1", (2, 21, 5), False),
        (None, (2, 21, 5), False),
        ("12.1", (2, 10, 3), False),
        ("12.1", 21003, False),
        ("11.4", 2708, False),
    ],
)
def test_dockerfile_build_check_fails_the_build_below_the_minimums(tmp_path, cuda, nccl, ok):
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(FAKE_TORCH.format(cuda=cuda, nccl=nccl))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MIN_CUDA": "11.2", "MIN_NCCL": "2.12.10"}
    done = subprocess.run(
        [sys.executable, "-c", _build_check_program()], capture_output=True, text=True, env=env, timeout=60
    )
    assert (done.returncode == 0) is ok, done.stderr
    assert "image runtime: python 3." in done.stdout
    if not ok:
        assert "image requirement not met" in done.stderr
        assert "need Python 3, CUDA >= 11.2, NCCL >= 2.12.10" in done.stderr
