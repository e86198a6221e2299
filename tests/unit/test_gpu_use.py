"""GPU use: the summary of any backend's samples, and when idleness is worth a warning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aliyun_training.gpu_use import (
    IDLE_MINUTES,
    IDLE_UTILIZATION,
    MAX_GAP_SECONDS,
    GpuSample,
    summarize,
    sustained_idle,
)

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def minute(index: float) -> datetime:
    return START + timedelta(minutes=index)


def moments(*utilizations: tuple[float, ...], nodes: int = 1, memory: float | None = None) -> list[GpuSample]:
    """One moment a minute; each moment's tuple gives its GPUs' utilization, node by node."""
    return [
        GpuSample(
            at=minute(index),
            node=f"node-{gpu % nodes}",
            gpu=str(gpu // nodes),
            utilization=value,
            memory_used_mib=memory,
        )
        for index, values in enumerate(utilizations)
        for gpu, value in enumerate(values)
    ]


def test_mean_p10_and_memory_summarize_every_sample() -> None:
    samples = moments((0, 10, 20, 30, 40, 50), (60, 70, 80, 90, 100, 50), memory=30_000)

    use = summarize(samples, "dlc")

    assert use.samples == 12
    assert use.mean_utilization == pytest.approx(50.0)
    # Linear between ranks: the 10th percentile of 0..100 with 50 twice lies between 10 and 20.
    assert use.p10_utilization == pytest.approx(11.0)
    assert use.mean_memory_used_mib == 30_000
    assert use.source == "dlc" and use.unavailable == ""


def test_idle_minutes_count_the_moments_whose_gpus_average_below_the_threshold() -> None:
    busy, idle = (85.0, 95.0), (2.0, 4.0)
    samples = moments(*[busy] * 5, *[idle] * 5, nodes=2)

    use = summarize(samples, "arena")

    # Each idle moment stands for the minute before it.
    assert use.idle_minutes == pytest.approx(5.0)


def test_one_idle_gpu_beside_a_busy_one_is_not_an_idle_moment() -> None:
    samples = moments(*[(0.0, 2 * IDLE_UTILIZATION)] * 4)

    assert summarize(samples, "local").idle_minutes == 0
    assert sustained_idle(samples, for_minutes=1) is None


def test_a_gap_in_the_metric_counts_for_at_most_five_minutes() -> None:
    samples = [
        GpuSample(at=START, node="node-0", gpu="0", utilization=1),
        GpuSample(at=START + timedelta(hours=2), node="node-0", gpu="0", utilization=1),
    ]

    assert summarize(samples, "dlc").idle_minutes == pytest.approx(2 * MAX_GAP_SECONDS / 60)


def test_no_samples_summarize_to_nothing_with_the_reason_kept() -> None:
    use = summarize([], "arena", unavailable="the environment names no gpu_metrics_url")

    assert (use.samples, use.mean_utilization, use.p10_utilization, use.idle_minutes) == (0, None, None, 0)
    assert use.mean_memory_used_mib is None
    assert use.unavailable == "the environment names no gpu_metrics_url"


def test_a_reading_outside_0_to_100_percent_is_brought_inside_it() -> None:
    assert GpuSample(at=START, node="n", gpu="0", utilization=100.4).utilization == 100
    assert GpuSample(at=START, node="n", gpu="0", utilization=-0.2).utilization == 0


def test_twelve_idle_minutes_after_work_are_told_with_their_evidence() -> None:
    samples = moments(*[(90.0, 80.0, 70.0, 60.0)] * 5, *[(2.0, 4.0, 3.0, 3.0)] * 12, nodes=2)

    evidence = sustained_idle(samples)

    assert evidence == (
        "GPUs mostly idle for the last 12 minutes: mean utilization 3% on 2 nodes (4 GPU series), "
        "every moment below 10%"
    )


def test_idleness_shorter_than_the_window_is_not_told() -> None:
    samples = moments(*[(90.0,)] * 5, *[(1.0,)] * int(IDLE_MINUTES - 1))

    assert sustained_idle(samples) is None


def test_one_busy_moment_in_the_trailing_window_ends_the_idle_run() -> None:
    idle = [(1.0,)] * 15
    samples = moments(*idle, (50.0,), (1.0,), (1.0,))

    assert sustained_idle(samples) is None
    assert sustained_idle(moments(*idle)) is not None


def test_the_threshold_and_the_window_are_the_callers() -> None:
    samples = moments(*[(25.0,)] * 5)

    assert sustained_idle(samples) is None
    assert sustained_idle(samples, idle_below=30, for_minutes=5) == (
        "GPUs mostly idle for the last 5 minutes: mean utilization 25% on 1 node (1 GPU series), "
        "every moment below 30%"
    )


def test_samples_in_any_order_give_the_same_answer() -> None:
    samples = moments(*[(80.0,)] * 3, *[(0.0,)] * 11)

    assert sustained_idle(list(reversed(samples))) == sustained_idle(samples)
    assert summarize(list(reversed(samples)), "dlc") == summarize(samples, "dlc")
