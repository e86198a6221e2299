"""Seals on what one task hands another: a consumer trusts a record only when the seal matches.

In Airflow 3 a user who may trigger a DAG or edit its task instances may also write its XComs
through the REST API. So the records a pipeline's tasks pass each other (``configure``'s plan, a
staged version, a verified image, a job's result, an approval) are sealed by the task that returns
them: an HMAC-SHA256 of the value, bound to its DAG, run, task, map index and XCom key, pushed
beside it under :data:`SEAL_KEY`. Its key is derived from a deployment secret the REST API never
shows (``[aliyun_training] seal_secret``, else ``[api_auth] jwt_secret``, else ``[core]
fernet_key``), so a user can change a record but not make a seal for the change, nor move one
record's seal to another run or task. The consumer recomputes the seal of what it read and
refuses a record whose seal is missing or different, naming the task and key: the change is
reported and nothing runs on it.

The seal says a record is what a task of this deployment returned for this run; it says nothing of
that task's inputs, which are sealed records or the run's checked form in turn.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import cache
from typing import Any

from aliyun_training.provider_info import CONFIG_SECTION, SEAL_SECRET_OPTION

#: The XCom key a task's seals are pushed under: ``{xcom key: seal}`` of what it returned.
SEAL_KEY = "seal"
#: Where the key comes from, in order: the first option that is set.
SECRET_OPTIONS = ((CONFIG_SECTION, SEAL_SECRET_OPTION), ("api_auth", "jwt_secret"), ("core", "fernet_key"))


class SealError(ValueError):
    """A record cannot be trusted: its seal is missing or does not match it (it was not written by
    the task that owns it), or the deployment has no secret to check seals with."""


def seal(value: Any, dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1) -> str:
    """The seal of ``value`` as the XCom ``key`` of the task instance."""
    subject = json.dumps([dag_id, run_id, task_id, map_index, key, value], sort_keys=True, default=str)
    return hmac.new(_secret(), subject.encode(), hashlib.sha256).hexdigest()


def seals(
    result: Any, dag_id: str, run_id: str, task_id: str, map_index: int, each_key: bool
) -> dict[str, str]:
    """The seals of a task's return value, and of each of its keys where Airflow pushes them apart
    (``multiple_outputs``)."""
    found = {"return_value": seal(result, dag_id, run_id, task_id, "return_value", map_index)}
    if each_key and isinstance(result, dict):
        found |= {k: seal(v, dag_id, run_id, task_id, k, map_index) for k, v in result.items()}
    return found


def check(
    value: Any,
    sealed: Any,
    dag_id: str,
    run_id: str,
    task_id: str,
    key: str = "return_value",
    map_index: int = -1,
) -> None:
    """Raise :class:`SealError` unless ``sealed`` (the task's :data:`SEAL_KEY` XCom) holds the
    seal of ``value`` as that task's ``key``."""
    expected = seal(value, dag_id, run_id, task_id, key, map_index)
    found = sealed.get(key) if isinstance(sealed, dict) else None
    if isinstance(found, str) and hmac.compare_digest(found, expected):
        return
    what = "has no seal" if found is None else "does not match the seal its task wrote"
    raise SealError(
        f"{task_id}'s XCom {key!r} of run {run_id} {what}: it was written or changed after {task_id} "
        "returned it (through the REST API?), so it is not used and nothing was run on it. Fix: clear "
        f"{task_id} so it writes the record again, and find who changed it"
    )


def sealed_state(value: Any, ti: Any, key: str) -> dict[str, Any]:
    """``value`` with its seal, as a task keeps it in ``task_state_store`` under ``key``."""
    return {
        "value": value,
        "seal": seal(value, ti.dag_id, ti.run_id, ti.task_id, f"state:{key}", ti.map_index),
    }


def opened_state(stored: Any, ti: Any, key: str) -> Any:
    """What :func:`sealed_state` kept under ``key``, or None when nothing was, or when it is not
    what this task instance kept there (a value written through the REST API has no valid seal)."""
    if not isinstance(stored, dict) or set(stored) != {"value", "seal"}:
        return None
    expected = seal(stored["value"], ti.dag_id, ti.run_id, ti.task_id, f"state:{key}", ti.map_index)
    found = stored["seal"]
    return stored["value"] if isinstance(found, str) and hmac.compare_digest(found, expected) else None


@cache
def _secret() -> bytes:
    """The seals' key: derived from the deployment secret, never the secret itself."""
    from airflow.providers.common.compat.sdk import conf

    for section, option in SECRET_OPTIONS:
        secret = (conf.get(section, option, fallback="") or "").strip()
        if secret:
            return hmac.new(secret.encode(), b"aliyun-training record seal v1", hashlib.sha256).digest()
    names = ", ".join(f"[{section}] {option}" for section, option in SECRET_OPTIONS)
    raise SealError(
        f"No deployment secret to seal task records with: none of {names} is set. Fix: set "
        f"[{CONFIG_SECTION}] {SEAL_SECRET_OPTION} to a long random string, the same on every component"
    )
