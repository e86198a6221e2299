"""Answer a human-in-the-loop task as its approver would: through Airflow's REST API.

``dag.test`` keeps a run alive while a task awaits input and never answers it itself; a person
answers through the UI, which calls the API's hitlDetails route. Here a thread waits for the task
to await input, then PATCHes that route of Airflow's own API app (in this process, on the same
metadata DB) as a signed-in admin.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def answer_when_asked(dag_id: str, task_id: str, option: str, timeout: float = 300) -> dict[str, Any]:
    """Start answering ``option`` to ``task_id``'s question in the DAG's next awaiting run; the
    returned dict gets the API's answer (``response``), the body the approver saw (``body``) and,
    if answering failed, why (``error``). A question it could not answer is failed, so the run
    ends (failed) instead of waiting for ever."""
    seen: dict[str, Any] = {}

    def answer() -> None:
        deadline = time.monotonic() + timeout
        run_id = None
        while time.monotonic() < deadline:
            try:
                run_id = run_id or _awaiting_run(dag_id, task_id)
                if run_id is not None:
                    client = api_client("approver", "admin")
                    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
                    seen["body"] = client.get(path).json().get("body")
                    answered = client.patch(path, json={"chosen_options": [option], "params_input": {}})
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

    threading.Thread(target=answer, daemon=True).start()
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
