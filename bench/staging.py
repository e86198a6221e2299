"""What the staging engine gains over a naive copy loop, and how close it gets to the store's limit.

The OSS emulator runs as its own process (its own interpreter lock), serving like a remote store:
every answer waits ``--latency-ms`` (first-byte latency; 10 ms by default, an intra-region OSS
round trip) and every GET body is capped at ``--bandwidth-mbps`` MB/s per connection (OSS limits
single connections, which is why large objects are read as parallel ranges). The engine reads
through the real oss2 client, V4-signed, exactly as a staging task or pod does, and writes under a
scratch directory on local disk. Three workloads:

- (a) 5,000 objects of 100 KB: the engine (``--workers`` parallel reads) against a naive loop of
  sequential ``bucket.get_object_to_file`` calls in the same run, over the first ``--naive-sample``
  objects (files/s is a rate, so a sample measures it; the whole loop would take minutes).
  Target: >= 5 x the naive files/s.
- (b) 4 objects of 256 MB: the engine against the emulator's raw GET throughput — the same ranged
  GETs, as many at once, read and discarded (no disk, no checksum) — i.e. the local limit.
  Target: >= 0.70 x the raw MB/s.
- (c) the re-run of (a) with nothing changed: listing and stat compare only. Target: <= 0.05 x
  (a)'s time.

Prints one table and the three ratios; exits 1 when a target is missed.

    PYTHONPATH=plugins:. python bench/staging.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from project_env import prepare_environment

prepare_environment()

from aliyun_training.staging import engine  # noqa: E402
from aliyun_training.staging.engine import stage_dataset  # noqa: E402
from aliyun_training.staging.oss import OssClientConfig, OssObjectSource  # noqa: E402
from fakes.oss import generate_remote, start_subprocess  # noqa: E402

if TYPE_CHECKING:
    from aliyun_training.stage_records import StagedDataset

AK, SK = "LTAI-bench", "bench-secret"
BUCKET = "bench-data"
REGION = "cn-wulanchabu"
SMALL, SMALL_COUNT = 100 * 1000, 5000
LARGE, LARGE_COUNT = 256 * 1024 * 1024, 4


class _StaticCredentials:
    def get_credential(self) -> SimpleNamespace:
        return SimpleNamespace(access_key_id=AK, access_key_secret=SK, security_token=None)


def _naive_files_per_second(endpoint: str, prefix: str, sample: int, scratch: Path) -> float:
    """A loop as a user writes it with oss2's defaults (its own CRC64 check of each whole object)."""
    import oss2

    bucket = oss2.Bucket(oss2.AuthV4(AK, SK), endpoint, BUCKET, region=REGION)
    keys = [info.key for info in oss2.ObjectIteratorV2(bucket, prefix=prefix, max_keys=1000)][:sample]
    out = scratch / "naive"
    out.mkdir()
    started = time.perf_counter()
    for key in keys:
        bucket.get_object_to_file(key, str(out / key.replace("/", "_")))
    return len(keys) / (time.perf_counter() - started)


def _raw_mb_per_second(config: OssClientConfig, prefix: str, workers: int) -> float:
    """The same ranged GETs the engine makes for the large objects, bytes read and dropped."""
    import oss2

    bucket = config.bucket(BUCKET, enable_crc=False)
    objects = list(oss2.ObjectIteratorV2(bucket, prefix=prefix, max_keys=1000))
    ranges = [
        (info.key, start, min(start + engine.PART_SIZE, info.size) - 1)
        for info in objects
        for start in range(0, info.size, engine.PART_SIZE)
    ]

    def read(item: tuple[str, int, int]) -> int:
        key, first, last = item
        result = bucket.get_object(key, (first, last), headers={"x-oss-range-behavior": "standard"})
        received = 0
        while chunk := result.read(1024 * 1024):
            received += len(chunk)
        return received

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        total = sum(pool.map(read, ranges))
    return total / 1e6 / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=25.0, help="MB/s per connection")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--naive-sample", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (b) and its raw baseline")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()

    process, endpoint = start_subprocess(
        {AK: SK},
        latency_ms=args.latency_ms,
        bandwidth_mbps=args.bandwidth_mbps,
        buckets=[BUCKET],
        region=REGION,
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-staging-"))
    try:
        generate_remote(endpoint, BUCKET, "small/", SMALL_COUNT, SMALL, seed=1)
        generate_remote(endpoint, BUCKET, "large/", LARGE_COUNT, LARGE, seed=2)
        config = OssClientConfig(endpoint, REGION, _StaticCredentials(), pool_size=args.workers)

        def stage(prefix: str, target: str) -> tuple[float, StagedDataset]:
            source = OssObjectSource(f"oss://{BUCKET}/{prefix}", config=config)
            started = time.perf_counter()
            staged = stage_dataset(
                source, scratch / target, "v1", workers=args.workers, progress_interval=3600
            )
            return time.perf_counter() - started, staged

        naive = _naive_files_per_second(endpoint, "small/", args.naive_sample, scratch)
        small_seconds, small = stage("small/", "small")
        rerun_seconds, rerun = stage("small/", "small")
        assert small.transferred_files == SMALL_COUNT and rerun.transferred_files == 0

        large_rates, raw_rates = [], []
        for round_ in range(args.rounds):
            shutil.rmtree(scratch / "large", ignore_errors=True)
            order = (
                [("raw", None), ("engine", None)] if round_ % 2 == 0 else [("engine", None), ("raw", None)]
            )
            for name, _ in order:
                if name == "raw":
                    raw_rates.append(_raw_mb_per_second(config, "large/", args.workers))
                else:
                    seconds, large = stage("large/", "large")
                    large_rates.append(large.bytes / 1e6 / seconds)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(scratch, ignore_errors=True)

    small_rate = SMALL_COUNT / small_seconds
    large_rate, raw_rate = statistics.median(large_rates), statistics.median(raw_rates)
    ratios = {
        "a": small_rate / naive,
        "b": large_rate / raw_rate,
        "c": rerun_seconds / small_seconds,
    }
    print(
        f"emulated OSS: {args.latency_ms:g} ms first-byte latency, {args.bandwidth_mbps:g} MB/s per "
        f"connection; {args.workers} workers; ranges of {engine.PART_SIZE >> 20} MiB"
    )
    print(f"{'workload':<44}{'seconds':>10}{'files/s':>10}{'MB/s':>10}")
    print(f"{'naive get_object_to_file loop (sample)':<44}{'':>10}{naive:>10.0f}{naive * SMALL / 1e6:>10.1f}")
    print(
        f"{'(a) engine, 5000 x 100 KB':<44}{small_seconds:>10.2f}{small_rate:>10.0f}"
        f"{SMALL_COUNT * SMALL / 1e6 / small_seconds:>10.1f}"
    )
    print(f"{'(c) engine re-run of (a), unchanged':<44}{rerun_seconds:>10.3f}{'':>10}{'':>10}")
    print(f"{'raw ranged GETs of 4 x 256 MB (median)':<44}{'':>10}{'':>10}{raw_rate:>10.1f}")
    print(f"{'(b) engine, 4 x 256 MB (median)':<44}{'':>10}{'':>10}{large_rate:>10.1f}")
    print(f"(a) engine / naive files/s: {ratios['a']:.1f} x (target >= 5)")
    print(f"(b) engine / raw MB/s:      {ratios['b']:.2f} x (target >= 0.70)")
    print(f"(c) re-run / (a) time:      {ratios['c']:.3f} x (target <= 0.05)")
    if args.json is not None:
        rates = {"naive_files_per_s": naive, "engine_files_per_s": small_rate, "raw_mb_per_s": raw_rate}
        rates |= {"engine_large_mb_per_s": large_rate, "rerun_seconds": rerun_seconds}
        args.json.write_text(json.dumps({"ratios": ratios, **rates}, indent=2) + "\n")
    return 0 if ratios["a"] >= 5 and ratios["b"] >= 0.70 and ratios["c"] <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
