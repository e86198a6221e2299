"""plan.cost: the most GPU-hours (and money) a run can use, counting every job and every try.

The plans are 2 x 8-GPU DLC runs of at most 90 minutes a try, resolved from an environment file
as a dry run resolves them (the ``dlc_plan`` fixture).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.plan.cost import cost_ceiling

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

    from aliyun_training.plan.models import RunPlan


def by_task(ceiling: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["task"]: job for job in ceiling["jobs"]}


def test_each_job_counts_nodes_times_gpus_times_its_timeout_for_every_try(
    dlc_plan: Callable[..., RunPlan],
) -> None:
    ceiling = cost_ceiling(dlc_plan(timeout_minutes=90))

    train = by_task(ceiling)["train"]
    assert (train["nodes"], train["gpus_per_node"], train["timeout_minutes"]) == (2, 8, 90)
    assert train["tries"] == 3, "the train task's retries"
    assert (train["gpu_hours_per_try"], train["gpu_hours"]) == (24.0, 72.0)
    assert "check_rdma" in by_task(ceiling), "a multi-node run's bandwidth check starts GPUs too"
    for job in ceiling["jobs"]:
        per_try = job["nodes"] * job["gpus_per_node"] * job["timeout_minutes"] / 60
        assert job["gpu_hours"] == round(per_try * job["tries"], 3), job
    assert ceiling["gpu_hours"] == round(sum(job["gpu_hours"] for job in ceiling["jobs"]), 3)
    assert "money" not in ceiling, "no price in the environment: no money"


def test_the_runs_gpu_hour_budget_caps_the_training_jobs_share_only(dlc_plan: Callable[..., RunPlan]) -> None:
    uncapped = by_task(cost_ceiling(dlc_plan(timeout_minutes=90)))

    capped = by_task(cost_ceiling(dlc_plan(timeout_minutes=90, max_gpu_hours=10)))

    assert (capped["train"]["gpu_hours"], capped["train"]["capped_by"]) == (10.0, "max_gpu_hours")
    assert capped["train"]["gpu_hours_per_try"] == 24.0, "one try may still run its whole timeout"
    others = {task: job for task, job in capped.items() if task != "train"}
    assert others == {task: job for task, job in uncapped.items() if task != "train"}
    assert all("capped_by" not in job for job in others.values())


def test_a_price_in_the_environment_turns_the_ceiling_into_money(dlc_plan: Callable[..., RunPlan]) -> None:
    ceiling = cost_ceiling(dlc_plan({"price_per_gpu_hour": 30.5, "currency": "USD"}, timeout_minutes=90))

    assert (ceiling["price_per_gpu_hour"], ceiling["currency"]) == (30.5, "USD")
    assert ceiling["money"] == round(ceiling["gpu_hours"] * 30.5, 2)


def test_the_training_jobs_monitoring_is_priced_in_requests_a_minute(
    dlc_plan: Callable[..., RunPlan], monkeypatch: pytest.MonkeyPatch
) -> None:
    train = by_task(cost_ceiling(dlc_plan(timeout_minutes=90)))["train"]

    # A 5 s poll: alone, a listing (as one GetJob) and both nodes' logs every poll; among 100 or
    # more jobs listed together, a hundredth of the listing and each node's logs every 90 s.
    assert train["monitoring"] == {
        "requests_per_minute_alone": 36.0,
        "requests_per_minute_in_fleet": round(0.12 + 2 * 60 / 90, 2),
    }
    assert all("monitoring" not in job for job in cost_ceiling(dlc_plan())["jobs"] if job["task"] != "train")

    monkeypatch.setenv("AIRFLOW__ALIYUN_TRAINING__BATCHED_STATUS", "False")
    alone = by_task(cost_ceiling(dlc_plan(timeout_minutes=90)))["train"]["monitoring"]
    assert alone == {"requests_per_minute_alone": 36.0, "requests_per_minute_in_fleet": 36.0}, (
        "each poll: GetJob and both nodes' logs"
    )
