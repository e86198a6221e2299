"""The progress contract: the lines a training script prints, the rate and ETA they give, the chart's
points and the task log's line."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from aliyun_training.progress import (
    MAX_LINE_CHARS,
    MAX_METRICS,
    MAX_POINTS,
    MAX_PREFIX_CHARS,
    RATE_WINDOW,
    ProgressEstimate,
    ProgressPoint,
    ProgressReport,
    ProgressTracker,
    describe_progress,
    parse_progress,
)

if TYPE_CHECKING:
    from types import ModuleType

T0 = datetime(2025, 12, 7, 14, 0, tzinfo=UTC)
FULL = {
    "event": "progress",
    "step": 120,
    "total_steps": 1000,
    "epoch": 1,
    "total_epochs": 3,
    "time": 1765100000.5,
    "metrics": {"loss": 0.41},
}


def line(**fields: object) -> str:
    return json.dumps({"event": "progress", **fields})


def report(step: int | None = None, **fields: object) -> ProgressReport:
    return ProgressReport.model_validate({"step": step, **fields})


# --- parsing ------------------------------------------------------------------------------------


def test_a_full_line_is_read_field_by_field():
    parsed = parse_progress(json.dumps(FULL))
    assert parsed is not None
    assert (parsed.step, parsed.total_steps, parsed.epoch, parsed.total_epochs) == (120, 1000, 1.0, 3)
    assert parsed.time == 1765100000.5 and parsed.metrics == {"loss": 0.41}
    assert parsed.fraction == pytest.approx(0.12)


@pytest.mark.parametrize(
    "prefix",
    [
        "[node 1] ",
        "[default0]:",
        "2025-12-07T14:00:00.123Z ",
        "worker-0 | [rank{0}] ",  # a brace in the prefix is not the object's start
        "\t",
    ],
)
def test_a_prefix_before_the_object_is_skipped(prefix):
    parsed = parse_progress(prefix + json.dumps(FULL) + "\r\n")
    assert parsed is not None and parsed.step == 120


@pytest.mark.parametrize(
    "text",
    [
        "",
        "epoch 1/3 train_loss=0.41 progress",
        json.dumps({**FULL, "event": "checkpoint"}),
        json.dumps({key: value for key, value in FULL.items() if key != "event"}),
        json.dumps([FULL]),
        json.dumps(FULL) + " trailing",  # the object must end the line
        json.dumps({"note": json.dumps(FULL)}),  # a report quoted inside another object
        json.dumps(FULL)[:-1],  # cut short
        '{"event": "progress", "step": 1,}',
        "{'event': 'progress'}",
        '"progress"',
    ],
)
def test_anything_but_a_whole_progress_object_is_no_report(text):
    assert parse_progress(text) is None


def test_the_readmes_example_line_is_a_report():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("<!-- guide:progress-line -->\n```json\n", 1)[1].split("```", 1)[0]
    parsed = parse_progress(example)
    assert parsed is not None and (parsed.step, parsed.fraction) == (420, 0.42)
    assert parsed.metrics == {"loss": 0.41}


def test_only_fields_and_no_metrics_is_still_a_report():
    parsed = parse_progress('{"event":"progress"}')
    assert parsed == ProgressReport() and parsed.fraction is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("step", -1),
        ("step", 2.5),
        ("step", True),
        ("step", "120"),
        ("step", [1]),
        ("step", 10**16),
        ("total_steps", 0),
        ("total_epochs", -3),
        ("epoch", -0.5),
        ("epoch", "1"),
        ("time", -5),
        ("time", 0),
        ("time", 1e12),  # the year 33658
    ],
)
def test_a_bad_field_refuses_the_line(field, value):
    assert parse_progress(line(**{field: value})) is None
    assert parse_progress(line(**{field: 1 if field != "time" else 1765100000})) is not None


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_outside_the_standard_refuse_the_line(constant):
    assert parse_progress(f'{{"event": "progress", "epoch": {constant}}}') is None
    assert parse_progress(f'{{"event": "progress", "metrics": {{"loss": {constant}}}}}') is None


def test_whole_floats_count_as_counts():
    parsed = parse_progress(line(step=3.0, total_steps=6.0, total_epochs=2.0, epoch=1.5))
    assert parsed is not None and (parsed.step, parsed.total_steps, parsed.total_epochs) == (3, 6, 2)
    assert isinstance(parsed.step, int) and parsed.fraction == 0.5


def test_metrics_keep_numbers_with_good_names_only():
    metrics = {
        "loss": 0.5,
        "accuracy": 1,
        "eval/top-1.acc_5": 0.9,
        "x" * 64: 1.0,
        "y" * 65: 1.0,
        "bad name": 1.0,
        "9lives": 1.0,
        "": 1.0,
        "flag": True,
        "text": "0.3",
        "none": None,
        "nested": {"a": 1},
    }
    parsed = parse_progress(line(metrics=metrics))
    assert parsed is not None
    assert parsed.metrics == {"loss": 0.5, "accuracy": 1.0, "eval/top-1.acc_5": 0.9, "x" * 64: 1.0}


@pytest.mark.parametrize("metrics", [[1, 2], "loss=0.4", 3, None])
def test_metrics_that_are_not_an_object_are_dropped_not_the_report(metrics):
    parsed = parse_progress(line(step=4, metrics=metrics))
    assert parsed is not None and parsed.step == 4 and parsed.metrics == {}


def test_at_most_max_metrics_are_kept_in_their_order():
    metrics = {f"m{index}": float(index) for index in range(MAX_METRICS + 10)}
    parsed = parse_progress(line(metrics=metrics))
    assert parsed is not None and list(parsed.metrics) == [f"m{index}" for index in range(MAX_METRICS)]


def test_a_line_over_the_limit_is_not_read():
    text = line(step=1)
    assert parse_progress(text + " " * (MAX_LINE_CHARS - len(text))) is not None
    assert parse_progress(text + " " * (MAX_LINE_CHARS - len(text) + 1)) is None


def test_the_object_must_start_within_the_prefix_limit():
    assert parse_progress("x" * MAX_PREFIX_CHARS + line(step=1)) is not None
    assert parse_progress("x" * (MAX_PREFIX_CHARS + 1) + line(step=1)) is None


def test_many_braces_in_the_prefix_are_tried_a_bounded_number_of_times():
    assert parse_progress("{" * 40 + line(step=1)) is None
    assert parse_progress("{ " * 3 + line(step=1)) is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"event": "progress", "metrics": ' + "[" * 60000 + "]" * 60000 + "}", None),
        ('{"event": "progress", "step": ' + "9" * 5000 + "}", None),  # past int's digit limit
        ('{"event": "progress", "epoch": 1' + "0" * 400 + "}", None),  # past float's range
        ('{"event": "progress", "metrics": {"loss": 1' + "0" * 400 + "}}", ProgressReport()),
        ('{"event": "progress", "metrics": {"' + "a" * 50000 + '": 1}}', ProgressReport()),
        ('{"event": "progress", "step": 1, "step": -1}', None),  # the last duplicate wins, refused
        ('{"event": "progress", "\\ud800": 1}', ProgressReport()),
    ],
)
def test_hostile_lines_are_refused_or_stripped_without_raising(text, expected):
    assert parse_progress(text) == expected


def test_mangled_lines_never_raise():
    """Random cuts and byte swaps of a real line: each parses to a report or to None."""
    rng = random.Random(41)
    base = "[default0]:" + json.dumps(FULL)
    alphabet = '{}[]":,.-+eE0123456789 \\tnrufalsNIy\x00\u2028'
    outcomes = set()
    for _ in range(3000):
        chars = list(base)
        for _ in range(rng.randint(1, 6)):
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        mangled = "".join(chars)[: rng.randint(0, len(chars))] if rng.random() < 0.3 else "".join(chars)
        parsed = parse_progress(mangled)
        outcomes.add(parsed is None)
        assert parsed is None or isinstance(parsed, ProgressReport)
    assert outcomes == {True, False}, "the mangling both kept and broke some lines"


@pytest.mark.parametrize(
    ("fields", "fraction"),
    [
        ({"step": 250, "total_steps": 1000}, 0.25),
        ({"step": 250, "total_steps": 1000, "epoch": 2, "total_epochs": 4}, 0.25),  # steps win
        ({"step": 250, "epoch": 1, "total_epochs": 4}, 0.25),
        ({"epoch": 1.5, "total_epochs": 3}, 0.5),
        ({"step": 1200, "total_steps": 1000}, 1.0),  # capped
        ({"epoch": 5, "total_epochs": 3}, 1.0),
        ({"step": 0, "total_steps": 10}, 0.0),
        ({"step": 250}, None),
        ({"total_steps": 1000}, None),
    ],
)
def test_fraction_is_steps_else_epochs_within_zero_and_one(fields, fraction):
    assert ProgressReport.model_validate(fields).fraction == fraction


# --- the tracker --------------------------------------------------------------------------------


def steady(tracker: ProgressTracker, steps: range, every: float, start: datetime = T0, **fields: object):
    for index, step in enumerate(steps):
        tracker.observe(report(step, total_steps=1000, **fields), start + timedelta(seconds=index * every))


def test_no_estimate_before_the_first_report():
    assert ProgressTracker().estimate() is None and ProgressTracker().points == []


def test_one_report_has_a_fraction_but_no_rate():
    tracker = ProgressTracker()
    tracker.observe(report(100, total_steps=1000, metrics={"loss": 2.0}), T0)
    estimate = tracker.estimate()
    assert estimate is not None and estimate.fraction == 0.1 and estimate.at == T0
    assert estimate.steps_per_second is None and estimate.remaining_seconds is None and estimate.eta is None


def test_a_steady_job_gives_its_rate_and_eta_from_the_last_report():
    tracker = ProgressTracker()
    steady(tracker, range(0, 410, 10), every=5)  # 2 steps a second, step 400 at T0 + 200 s
    estimate = tracker.estimate()
    assert estimate is not None
    assert estimate.steps_per_second == pytest.approx(2.0)
    assert estimate.remaining_seconds == pytest.approx(300.0)
    assert estimate.eta == T0 + timedelta(seconds=500)
    assert (estimate.step, estimate.total_steps, estimate.fraction) == (400, 1000, 0.4)


def test_the_rate_is_the_recent_one():
    """Slow for an hour, then four times faster for the last ten minutes: the ETA uses the latter."""
    tracker = ProgressTracker()
    steady(tracker, range(0, 360, 6), every=60)  # 0.1 steps/s for an hour
    steady(tracker, range(360, 601, 24), every=60, start=T0 + timedelta(minutes=60))  # 0.4 steps/s
    estimate = tracker.estimate()
    assert estimate is not None and estimate.step == 600
    assert estimate.steps_per_second == pytest.approx(0.4)
    assert estimate.remaining_seconds == pytest.approx(400 / 0.4)


def test_reports_further_apart_than_the_window_use_the_last_two():
    tracker = ProgressTracker()
    gap = RATE_WINDOW * 3
    for index, epoch in enumerate((1, 2, 3)):
        tracker.observe(report(epoch=epoch, total_epochs=5), T0 + gap * index)
    estimate = tracker.estimate()
    assert estimate is not None and estimate.fraction == 0.6 and estimate.steps_per_second is None
    assert estimate.remaining_seconds == pytest.approx(2 * gap.total_seconds())
    assert describe_progress(estimate, T0 + gap * 2).startswith("60% (epoch 3/5), ETA 1h00m")


def test_a_resumed_job_restarts_the_rate_instead_of_going_negative():
    tracker = ProgressTracker()
    steady(tracker, range(0, 510, 10), every=5)  # up to step 500 at T0 + 250 s
    resumed = T0 + timedelta(seconds=400)  # the job died, came back from the checkpoint at step 300
    tracker.observe(report(300, total_steps=1000), resumed)
    after_one = tracker.estimate()
    assert after_one is not None and after_one.step == 300
    assert after_one.steps_per_second is None and after_one.remaining_seconds is None
    steady(tracker, range(300, 420, 20), every=5, start=resumed)  # 4 steps a second now
    estimate = tracker.estimate()
    assert estimate is not None and estimate.step == 400
    assert estimate.steps_per_second == pytest.approx(4.0)
    assert estimate.remaining_seconds == pytest.approx(600 / 4.0)


def test_longer_totals_restart_the_rate_too():
    """A resume with more epochs: the fraction drops though the steps go on."""
    tracker = ProgressTracker()
    for index, step in enumerate((100, 200)):
        tracker.observe(report(step, total_steps=200), T0 + timedelta(seconds=index * 10))
    tracker.observe(report(220, total_steps=400), T0 + timedelta(seconds=20))
    estimate = tracker.estimate()
    assert estimate is not None and estimate.fraction == 0.55
    assert estimate.steps_per_second is None and estimate.remaining_seconds is None


def test_no_progress_means_no_eta():
    tracker = ProgressTracker()
    for index in range(3):
        tracker.observe(report(50, total_steps=100), T0 + timedelta(seconds=index * 30))
    estimate = tracker.estimate()
    assert estimate is not None and estimate.steps_per_second == 0.0
    assert estimate.remaining_seconds is None and estimate.eta is None


def test_a_finished_job_has_nothing_left():
    tracker = ProgressTracker()
    steady(tracker, range(900, 1001, 50), every=10)
    estimate = tracker.estimate()
    assert estimate is not None and estimate.fraction == 1.0
    assert estimate.remaining_seconds == 0.0 and estimate.eta == estimate.at


def test_reports_read_again_are_ignored_and_one_at_the_same_time_replaces():
    tracker = ProgressTracker()
    tracker.observe(report(10, time=T0.timestamp()), T0)
    tracker.observe(report(20, time=T0.timestamp() + 10), T0)
    tracker.observe(report(10, time=T0.timestamp()), T0 + timedelta(hours=1))  # an overlapping tail
    assert [point.step for point in tracker.points] == [10, 20]
    tracker.observe(report(25, time=T0.timestamp() + 10, metrics={"loss": 0.5, "lr": 0.1}), T0)
    tracker.observe(report(25, time=T0.timestamp() + 10, metrics={"loss": 0.4}), T0)  # epoch's end
    assert [point.step for point in tracker.points] == [10, 25]
    assert tracker.points[-1].metrics == {"loss": 0.4, "lr": 0.1}


def test_the_report_time_wins_over_when_it_was_read():
    tracker = ProgressTracker()
    tracker.observe(report(10, time=T0.timestamp()), T0 + timedelta(minutes=3))
    tracker.observe(report(20), T0 + timedelta(minutes=4))
    assert [point.at for point in tracker.points] == [T0, T0 + timedelta(minutes=4)]


def test_a_naive_read_time_is_utc():
    tracker = ProgressTracker()
    tracker.observe(report(10), T0.replace(tzinfo=None))
    tracker.observe(report(20), T0 + timedelta(seconds=10))
    assert [point.at for point in tracker.points] == [T0, T0 + timedelta(seconds=10)]


def test_points_stay_bounded_even_over_time_and_keep_first_and_last():
    tracker = ProgressTracker()
    count = 20 * MAX_POINTS
    for step in range(count):
        # Bursts: ten reports a second apart, then a minute of silence.
        at = T0 + timedelta(seconds=step // 10 * 70 + step % 10)
        tracker.observe(report(step, total_steps=count), at)
        assert len(tracker.points) <= MAX_POINTS
    points = tracker.points
    assert points[0].step == 0 and points[-1].step == count - 1
    span = points[-1].at - points[0].at
    gaps = [after.at - before.at for before, after in pairwise(points)]
    assert len(points) >= MAX_POINTS // 2
    assert max(gaps) <= span / 30, "the kept points cover the whole run, its start included"
    estimate = tracker.estimate()
    assert estimate is not None and estimate.steps_per_second == pytest.approx(10 / 70, rel=0.2)


def test_a_tracker_rebuilt_from_its_points_estimates_the_same():
    tracker = ProgressTracker()
    steady(tracker, range(0, 600, 3), every=2, epoch=1, total_epochs=3, metrics={"loss": 0.3})
    stored = [point.model_dump(mode="json") for point in tracker.points]  # through XCom's JSON
    rebuilt = ProgressTracker([ProgressPoint.model_validate(point) for point in stored])
    assert rebuilt.estimate() == tracker.estimate()
    rebuilt.observe(report(600, total_steps=1000), T0 + timedelta(seconds=400))
    estimate = rebuilt.estimate()
    assert estimate is not None and estimate.steps_per_second == pytest.approx(1.5)


def test_the_estimate_carries_the_latest_value_of_every_metric():
    tracker = ProgressTracker()
    tracker.observe(report(10, metrics={"train_loss": 1.0, "test_accuracy": 0.5}), T0)
    tracker.observe(report(20, metrics={"train_loss": 0.8}), T0 + timedelta(seconds=10))
    estimate = tracker.estimate()
    assert estimate is not None and estimate.metrics == {"train_loss": 0.8, "test_accuracy": 0.5}
    assert list(estimate.metrics) == ["train_loss", "test_accuracy"]


def test_a_crawling_job_has_no_eta_decades_away():
    tracker = ProgressTracker()
    tracker.observe(report(1, total_steps=MAX_POINTS * 10**12), T0)
    tracker.observe(report(2, total_steps=MAX_POINTS * 10**12), T0 + timedelta(seconds=60))
    estimate = tracker.estimate()
    assert estimate is not None and estimate.steps_per_second == pytest.approx(1 / 60)
    assert estimate.remaining_seconds is None and estimate.eta is None


# --- the task log's line ------------------------------------------------------------------------


def estimate_of(**fields: object) -> ProgressEstimate:
    values: dict[str, object] = {
        "at": T0,
        "fraction": None,
        "step": None,
        "total_steps": None,
        "epoch": None,
        "total_epochs": None,
        "steps_per_second": None,
        "remaining_seconds": None,
        "eta": None,
        "metrics": {},
    }
    return ProgressEstimate.model_validate({**values, **fields})


def test_the_description_names_fraction_position_rate_eta_and_metrics():
    estimate = estimate_of(
        fraction=0.4299,
        step=420,
        total_steps=1000,
        epoch=2,
        total_epochs=5,
        steps_per_second=3.1,
        remaining_seconds=185,
        eta=T0 + timedelta(minutes=5, seconds=5),
        metrics={"loss": 0.41, "accuracy": 0.8},
    )
    assert describe_progress(estimate, T0 + timedelta(minutes=2)) == (
        "42% (step 420/1000, epoch 2/5), 3.1 steps/s, ETA 3m05s (14:05 UTC); loss 0.41, accuracy 0.8"
    )


@pytest.mark.parametrize(
    ("fields", "now", "text"),
    [
        ({}, T0, "progress reported"),
        ({"step": 7, "epoch": 1.3333333}, T0, "step 7, epoch 1.33"),
        ({"fraction": 0.999, "step": 999, "total_steps": 1000}, T0, "99% (step 999/1000)"),
        ({"fraction": 1.0, "remaining_seconds": 0.0, "eta": T0}, T0, "100%"),
        ({"fraction": 0.5}, T0, "50%"),
        ({"step": 9, "steps_per_second": 0.05}, T0, "step 9, 20s/step"),
        ({"step": 9, "steps_per_second": 0.0}, T0, "step 9, 0.0 steps/s"),
        (
            {"fraction": 0.1, "remaining_seconds": 90000.0, "eta": T0 + timedelta(seconds=90000)},
            T0,
            "10%, ETA 1d01h (2025-12-08 15:00 UTC)",
        ),
        (
            {"fraction": 0.1, "remaining_seconds": 60.0, "eta": T0 + timedelta(seconds=60)},
            T0 + timedelta(minutes=3),
            "10%, ETA passed 2m00s ago (14:01 UTC)",
        ),
        ({"fraction": 0.1}, T0 + timedelta(minutes=12), "10%, last report 12m00s ago"),
        (
            {"metrics": {f"m{i}": i / 3 for i in range(9)}},
            T0,
            "progress reported; m0 0, m1 0.3333, m2 0.6667, m3 1, m4 1.333, m5 1.667",
        ),
    ],
)
def test_the_description_says_what_is_known(fields, now, text):
    assert describe_progress(estimate_of(**fields), now) == text


def test_a_tracked_job_reads_as_one_line():
    tracker = ProgressTracker()
    for index, step in enumerate(range(0, 421, 42)):
        loss = 2 / (index + 1)
        tracker.observe(
            report(step, total_steps=1000, epoch=step / 200, total_epochs=5, metrics={"loss": loss}),
            T0 + timedelta(seconds=index * 14),
        )
    estimate = tracker.estimate()
    assert estimate is not None
    assert describe_progress(estimate, estimate.at) == (
        "42% (step 420/1000, epoch 2.1/5), 3.0 steps/s, ETA 3m13s (14:05 UTC); loss 0.1818"
    )


# --- the training side's helper (include/training/progress.py) -----------------------------------

HELPER = Path(__file__).resolve().parents[2] / "include" / "training" / "progress.py"
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "TORCHELASTIC_RUN_ID")


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The helper as a training script imports it, in a process that has no rank set."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("training_progress", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # where its dataclass looks itself up
    spec.loader.exec_module(module)
    return module


def printed(capsys: pytest.CaptureFixture[str]) -> list[ProgressReport | None]:
    return [parse_progress(text) for text in capsys.readouterr().out.splitlines()]


def test_the_helper_prints_the_line_the_parser_reads(helper, capsys):
    before = datetime.now(UTC).timestamp()
    helper.report_progress(
        step=np.int64(420), total_steps=1000, epoch=2.0, total_epochs=5, loss=np.float32(0.5), accuracy=0.8
    )
    (parsed,) = printed(capsys)
    assert parsed is not None
    assert (parsed.step, parsed.total_steps, parsed.epoch, parsed.total_epochs) == (420, 1000, 2.0, 5)
    assert parsed.metrics == {"loss": 0.5, "accuracy": 0.8} and parsed.fraction == 0.42
    assert parsed.time is not None and before <= parsed.time <= datetime.now(UTC).timestamp()


def test_the_helper_leaves_out_what_is_no_finite_number_and_never_raises(helper, capsys):
    helper.report_progress(
        step=float("nan"), epoch="two", loss=float("inf"), note="slow", flag=True, grad=None, lr=1e-3
    )
    (parsed,) = printed(capsys)
    assert parsed is not None and parsed.step is None and parsed.epoch is None
    assert parsed.metrics == {"lr": 1e-3}


@pytest.mark.parametrize(
    ("variables", "prints"),
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "3"}, False),
        ({"RANK": "1", "OMPI_COMM_WORLD_RANK": "0"}, True),  # mpirun on DLC: RANK counts nodes
        ({"RANK": "0", "OMPI_COMM_WORLD_RANK": "2"}, False),
        ({"RANK": "1", "OMPI_COMM_WORLD_RANK": "0", "TORCHELASTIC_RUN_ID": "job"}, False),  # torchrun's
    ],
)
def test_only_the_global_rank_0_prints(helper, capsys, monkeypatch, variables, prints):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    helper.report_progress(step=1)
    assert (len(printed(capsys)) == 1) is prints


def test_a_loop_reports_during_each_epoch_and_at_its_end(helper, capsys):
    loop = helper.LoopProgress(steps_per_epoch=25, epochs=2, reports_per_epoch=4)
    for epoch in (1, 2):
        for step in range(1, 26):
            loop.step(epoch, step, train_loss=1 / step)
        loop.epoch_end(epoch, test_accuracy=0.5 * epoch)
    reports = printed(capsys)
    assert all(report is not None for report in reports)
    steps = [report.step for report in reports if report is not None]
    assert steps == [6, 12, 18, 24, 25, 31, 37, 43, 49, 50]
    last = reports[-1]
    assert last is not None and (last.epoch, last.total_epochs, last.total_steps) == (2, 2, 50)
    assert last.metrics == {"test_accuracy": 1.0} and last.fraction == 1.0
    middle = reports[1]
    assert middle is not None and middle.epoch == 12 / 25 and middle.metrics == {"train_loss": 1 / 12}
