"""The live view of a job: progress logged at least once a minute, a deadline at risk or missed and
idle GPUs each announced once (after a restart too), cost so far, and a record only its seal opens."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest

from aliyun_training.backends.base import JobState, JobStatus
from aliyun_training.deadline import ExpectedDuration, expected_duration
from aliyun_training.gpu_use import GpuReading, GpuSample
from aliyun_training.live import (
    DEADLINE_AT_RISK,
    DEADLINE_MISSED,
    GPUS_IDLE,
    LiveView,
    open_live,
    seal_live,
)

START = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def _running(started: datetime = START) -> JobStatus:
    return JobStatus(state=JobState.RUNNING, raw="Running", started=started.isoformat())


def _line(step: int, at: datetime, total: int = 1000, node: int = 0) -> str:
    report = {"event": "progress", "step": step, "total_steps": total, "time": at.timestamp()}
    return f"[node-{node}] " + json.dumps({**report, "metrics": {"loss": 1 / step}})


def _view(**kwargs: object) -> LiveView:
    defaults: dict[str, object] = {"job_id": "dlc1", "backend": "dlc", "console_url": None, "gpus": 16}
    return LiveView(**{**defaults, **kwargs})  # type: ignore[arg-type]


def test_progress_is_logged_first_then_with_its_eta_then_at_least_once_a_minute() -> None:
    view = _view()
    view.see_status(_running(), START)
    logged = []
    for second in range(0, 301, 5):  # a poll every 5 s for five minutes, a step every 5 s
        now = START + timedelta(seconds=second)
        view.see_lines([_line(second // 5 + 1, now)], now)
        line = view.progress_line(now)
        if line is not None:
            logged.append((second, line))
    seconds = [second for second, _ in logged]
    assert seconds[:2] == [0, 5], "the first report at once, and the first ETA at once"
    assert "ETA" in logged[1][1] and "s/step" in logged[1][1]
    gaps = [b - a for a, b in itertools.pairwise(seconds[1:])]
    assert gaps and all(gap <= 60 for gap in gaps), gaps
    assert len(logged) <= 2 + 300 // 55, "not every poll: at a minute's pace"


def test_a_deadline_at_risk_is_announced_once_before_it_passes_and_a_miss_once_after() -> None:
    expected = ExpectedDuration(seconds=600, source="declared", tolerance=1.0)
    view = _view(expected=expected)
    view.see_status(_running(), START)
    view.see_lines([_line(1, START), _line(2, START + timedelta(seconds=60))], START + timedelta(seconds=60))
    now = START + timedelta(seconds=61)
    [at_risk] = view.announcements(now)
    assert at_risk.key == DEADLINE_AT_RISK and at_risk.notify and "ETA" in at_risk.text
    assert now < expected.deadline(START), "told before the deadline"
    assert view.announcements(now + timedelta(seconds=5)) == [], "once"

    [missed] = view.announcements(START + timedelta(seconds=601))
    assert missed.key == DEADLINE_MISSED
    assert view.announcements(START + timedelta(seconds=700)) == []


def test_a_restarted_view_carries_on_from_its_record_and_announces_nothing_again() -> None:
    expected = ExpectedDuration(seconds=600, source="declared", tolerance=1.0)
    first = _view(expected=expected)
    first.see_status(_running(), START)
    first.see_lines([_line(1, START), _line(2, START + timedelta(seconds=60))], START + timedelta(seconds=60))
    assert [a.key for a in first.announcements(START + timedelta(seconds=61))] == [DEADLINE_AT_RISK]
    record = first.record(START + timedelta(seconds=61))

    again = _view(expected=expected, previous=record)
    again.see_status(_running(), START + timedelta(seconds=70))
    assert again.announcements(START + timedelta(seconds=70)) == []
    assert again.record(START + timedelta(seconds=70)).points == record.points


def test_gpus_idle_for_the_sustained_window_are_warned_of_once_in_the_log_only() -> None:
    view = _view()
    view.see_status(_running(), START)
    samples = [
        GpuSample(at=START + timedelta(minutes=m), node="0", gpu="0", utilization=3.0) for m in range(0, 13)
    ]
    view.see_gpu(GpuReading(source="cloudmonitor", samples=samples), START + timedelta(minutes=12))
    [idle] = view.announcements(START + timedelta(minutes=12))
    assert idle.key == GPUS_IDLE and not idle.notify
    assert view.announcements(START + timedelta(minutes=13)) == []
    use = view.record(START + timedelta(minutes=12)).gpu
    assert use is not None and use.mean_utilization == pytest.approx(3.0) and use.idle_minutes >= 10


def test_cost_so_far_is_gpus_times_running_time_priced_where_the_environment_prices_it() -> None:
    view = _view(price=(30.0, "CNY"))
    view.see_status(_running(), START)
    cost = view.record(START + timedelta(minutes=30)).cost
    assert cost is not None
    assert (
        cost.gpu_hours == pytest.approx(8.0) and cost.money == pytest.approx(240.0) and cost.currency == "CNY"
    )


def test_tails_keep_each_nodes_last_lines_apart() -> None:
    view = _view()
    view.see_lines([f"[node-{n}] line {i}" for i in range(30) for n in (0, 1)] + ["no prefix"], START)
    record = view.record(START)
    assert record.tails["node-0"][-1] == "line 29" and len(record.tails["node-1"]) == 20
    assert record.tails["job"] == ["no prefix"]


def test_only_the_seal_of_this_task_instance_opens_a_record() -> None:
    view = _view()
    view.see_status(_running(), START)
    stored = seal_live(view.record(START), "dag", "run", "train")
    assert open_live(stored, "dag", "run", "train") is not None
    assert open_live(stored, "dag", "other-run", "train") is None, "moved to another run"
    forged = {**stored, "value": {**stored["value"], "sent": [DEADLINE_AT_RISK]}}
    assert open_live(forged, "dag", "run", "train") is None, "a record changed through the REST API"
    assert open_live(None, "dag", "run", "train") is None


def test_the_expected_duration_is_declared_or_the_median_of_three_or_more_recent_runs() -> None:
    assert expected_duration(90, [1.0, 2.0, 3.0], 1.5) == ExpectedDuration(
        seconds=5400, source="declared", tolerance=1.5
    )
    recent = expected_duration(None, [600, 900, 3000, 700], 2.0)
    assert recent is not None and recent.seconds == 800 and "last 4 successful runs" in recent.source
    assert expected_duration(None, [600, 900], 2.0) is None, "two runs make no median yet"
