"""The Hugging Face callback under a real ``transformers.Trainer``: what the job prints is what the
pipeline reads.

The Trainer trains a model the test defines (no download: the hub is offline) for a few steps on
the CPU in a process of its own, with ``include/training`` on its path as in the training image, so
its stdout is a job's log; the pipeline's parser reads it back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aliyun_training.progress import ProgressTracker, parse_progress

TRAINING_DIR = Path(__file__).resolve().parents[2] / "include" / "training"
MAX_STEPS = 6
LOGGING_STEPS = 2
SAMPLES = 16  # 4 batches of 4: the 6 steps span two epochs

pytestmark = pytest.mark.slow

SCRIPT = f"""
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from hf_progress import ProgressCallback


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x, labels):
        return {{"loss": nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}}


torch.manual_seed(0)
features = torch.randn({SAMPLES}, 4)
data = [{{"x": row, "labels": row.sum()}} for row in features]
args = TrainingArguments(
    output_dir="out",
    max_steps={MAX_STEPS},
    logging_steps={LOGGING_STEPS},
    per_device_train_batch_size=4,
    learning_rate=0.05,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    dataloader_num_workers=0,
)
Trainer(model=Regression(), args=args, train_dataset=data, callbacks=[ProgressCallback()]).train()
print("trained")
"""


@pytest.fixture(scope="module")
def job_log(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The stdout of a Trainer run with the callback, line by line."""
    workdir = tmp_path_factory.mktemp("hf-progress")
    (workdir / "train.py").write_text(SCRIPT)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}  # a plain, single-process job
    }
    env.update(
        PYTHONPATH=str(TRAINING_DIR),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(workdir / "hf-home"),
        CUDA_VISIBLE_DEVICES="",
    )
    result = subprocess.run(
        [sys.executable, "train.py"], cwd=workdir, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"the Trainer failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout.splitlines()


def test_the_trainer_reports_each_log_and_epoch_up_to_max_steps(job_log):
    reports = [report for line in job_log if (report := parse_progress(line)) is not None]
    steps = [report.step for report in reports]
    assert "trained" in job_log and len(reports) >= MAX_STEPS // LOGGING_STEPS + 1, job_log
    assert steps == sorted(steps) and steps[-1] == MAX_STEPS
    assert {report.total_steps for report in reports} == {MAX_STEPS}
    assert all(report.time is not None for report in reports)
    logged = [report for report in reports if "loss" in report.metrics]
    assert [report.step for report in logged] == list(range(LOGGING_STEPS, MAX_STEPS + 1, LOGGING_STEPS))
    assert all(report.metrics["loss"] >= 0 and "learning_rate" in report.metrics for report in logged)
    epochs = [report.epoch for report in reports if report.epoch is not None]
    assert epochs == sorted(epochs) and epochs[-1] == pytest.approx(MAX_STEPS / (SAMPLES // 4))
    assert {report.total_epochs for report in reports} == {2}


def test_the_pipeline_sees_the_run_finish(job_log):
    tracker = ProgressTracker()
    for line in job_log:
        if (report := parse_progress(line)) is not None:
            tracker.observe(report, datetime.now(UTC))
    estimate = tracker.estimate()
    assert estimate is not None and estimate.fraction == 1.0 and estimate.remaining_seconds == 0.0
    assert (estimate.step, estimate.total_steps) == (MAX_STEPS, MAX_STEPS)
    assert "loss" in estimate.metrics and "train_loss" in estimate.metrics
