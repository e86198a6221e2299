"""Answer a human-in-the-loop task as its approver would (or mark it successful as a user who may
edit task instances would): through Airflow's REST API.

``dag.test`` keeps a run alive while a task awaits input and never answers it itself; a person
answers through the UI, which calls the API's hitlDetails route. Here a thread waits for the task
to await input, then PATCHes that route of Airflow's own API app (in this process, on the same
metadata DB) as a signed-in admin.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from tests.pages_client import pages_client


def answer_when_asked(dag_id: str, task_id: str, option: str, timeout: float = 300) -> dict[str, Any]:
    """Start answering ``option`` to ``task_id``'s question in the DAG's next awaiting run, as an
    admin; the returned dict gets the API's answer (``response``), the body the approver saw
    (``body``), the page its report link opened before the answer (``report``) and, if answering
    failed, why (``error``). A question it could not answer is failed, so the run ends (failed)
    instead of waiting for ever."""

    def answer(client: Any, task_path: str, seen: dict[str, Any]) -> Any:
        seen["body"] = client.get(f"{task_path}/hitlDetails").json().get("body")
        link = re.search(r"\[Open the run report\]\(([^)]+)\)", seen["body"] or "")
        seen["report"] = pages_client().get(link[1]).text if link else None
        return client.patch(f"{task_path}/hitlDetails", json={"chosen_options": [option], "params_input": {}})

    return act_when_asked(dag_id, task_id, answer, ("approver", "admin"), timeout)


def mark_success_when_asked(dag_id: str, task_id: str, user: str, timeout: float = 300) -> dict[str, Any]:
    """Start marking ``task_id`` successful, as ``user`` (the simple auth manager's ``user`` role),
    once it awaits an answer, instead of answering it: what "Mark success" in the UI does."""

    def mark(client: Any, task_path: str, seen: dict[str, Any]) -> Any:
        return client.patch(task_path, json={"new_state": "success"})

    return act_when_asked(dag_id, task_id, mark, (user, "user"), timeout)


def act_when_asked(
    dag_id: str, task_id: str, act: Any, who: tuple[str, str], timeout: float = 300
) -> dict[str, Any]:
    """In a thread, once ``task_id`` of the DAG's next run awaits input, ``act(client, task_path,
    seen)`` through the REST API as ``who`` (user name, role); ``seen`` gets its answer's status
    (``response``) or why it failed (``error``)."""
    seen: dict[str, Any] = {}

    def run() -> None:
        deadline = time.monotonic() + timeout
        run_id = None
        while time.monotonic() < deadline:
            try:
                run_id = run_id or _awaiting_run(dag_id, task_id)
                if run_id is not None:
                    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1"
                    answered = act(api_client(*who), path, seen)
                    seen["response"] = answered.status_code
                    if answered.status_code == 200:
                        return
                    seen["error"] = answered.text
            except Exception as exc:  # reported by the test, which cannot see this thread's errors
                seen["error"] = repr(exc)
            time.sleep(0.5)
        seen.setdefault("error", f"no {task_id} of {dag_id} awaited input within {timeout} s")
        if run_id is not None:
            _fail(dag_id, run_id, task_id)

    threading.Thread(target=run, daemon=True).start()
    return seen


def _fail(dag_id: str, run_id: str, task_id: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id
            )
            .values(state=TaskInstanceState.FAILED)
        )


def _awaiting_run(dag_id: str, task_id: str) -> str | None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(
            select(TaskInstance.run_id).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == task_id,
                TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
            )
        )


def api_client(username: str, role: str) -> Any:
    """Airflow's own REST API app (in this process, on the same metadata DB), signed in as
    ``username`` with the simple auth manager's ``role`` (viewer, user, op or admin)."""
    from airflow.api_fastapi.app import create_app, init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    manager = init_auth_manager()
    token = manager.generate_jwt(SimpleAuthManagerUser(username=username, role=role))
    return TestClient(create_app("core"), headers={"Authorization": f"Bearer {token}"})
