"""The expected duration a pipeline declares none of: its train job's running time in its recent
successful runs, read from each run's sealed result; a result changed through the REST API (or a
task marked successful by hand, which returns nothing) counts for nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aliyun_training.operators.live import recent_job_seconds
from aliyun_training.seals import SEAL_KEY, seal

DAG = "retrain"


@dataclass
class PreviousTI:
    run_id: str
    logical_date: datetime


def result(seconds: float) -> dict[str, Any]:
    return {
        "backend": "local",
        "job_id": "j",
        "display_name": "j",
        "status": "Succeeded",
        "wall_seconds": seconds,
    }


@dataclass
class TaskInstance:
    """The runtime task instance's two calls the reading makes, over runs kept here, newest first:
    ``(run_id, returned, sealed)``; what the API server would answer for each."""

    runs: list[tuple[str, Any, bool]]
    dag_id: str = DAG
    task_id: str = "train"
    asked: list[datetime | None] = field(default_factory=list)

    def _dated(self) -> list[tuple[str, Any, bool, datetime]]:
        start = datetime(2026, 11, 30, tzinfo=UTC)
        return [(r, v, s, start - timedelta(days=i)) for i, (r, v, s) in enumerate(self.runs)]

    def get_previous_ti(self, state: Any, logical_date: datetime | None) -> PreviousTI | None:
        self.asked.append(logical_date)
        for run_id, _, _, date in self._dated():
            if logical_date is None or date < logical_date:
                return PreviousTI(run_id, date)
        return None

    def xcom_pull(self, task_ids: str, run_id: str, key: str = "return_value") -> Any:
        [(value, sealed)] = [(v, s) for r, v, s, _ in self._dated() if r == run_id]
        if key == SEAL_KEY:
            return {"return_value": seal(value, DAG, run_id, "train", "return_value")} if sealed else None
        return value


def test_the_last_five_sealed_results_are_read_newest_first_and_a_forged_one_is_left_out() -> None:
    ti = TaskInstance(
        [
            ("r7", result(700), True),
            ("r6", result(9999), False),  # written through the REST API: no seal of its own
            ("r5", result(500), True),
            ("r4", None, False),  # marked successful by hand: it returned nothing
            ("r3", result(300), True),
            ("r2", result(200), True),
        ]
    )
    assert recent_job_seconds({"ti": ti}) == [700, 500, 300], "five runs looked at, three trusted"
    assert len(ti.asked) == 5 and ti.asked[0] is None


def test_a_pipeline_without_earlier_successful_runs_has_no_history() -> None:
    assert recent_job_seconds({"ti": TaskInstance([])}) == []
