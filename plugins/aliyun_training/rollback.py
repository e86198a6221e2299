"""Roll a pipeline's champion back, for a person: the pipeline page's button and
``python -m aliyun_training champion rollback`` both do it here.

It runs where Airflow's metadata database is: in the API server (the page) and in an
administrator's shell with the deployment's configuration (the command line, as ``airflow``'s own
commands run). It does what Airflow's REST API lets a user who may edit assets do to the champion
Asset, and nothing a task does: it writes the Asset's state (the pointer, through
``champion.ChampionPointer.roll_back``, which moves the registry's copy first) and announces an
event on it, so a deployment DAG scheduled on the champion deploys the model rolled back to. Who
did it is in the champion record, the event and Airflow's audit log.

A rollback waits for no promotion: while a run's ``promote`` is under way it is refused, since
that task moves the pointer too (a promotion that waited for its approval and then finds the
champion changed holds its model: ``operators.promotion``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aliyun_training.champion import (
    AssetState,
    ChampionPointer,
    PastChampion,
    RollbackRefused,
    RolledBack,
    announcement,
)
from aliyun_training.installation import installation_id
from aliyun_training.task_ids import PROMOTE

if TYPE_CHECKING:
    from airflow.models.asset import AssetModel
    from sqlalchemy.orm import Session

    from aliyun_training.model_registry.base import ModelRegistry, RegistrySettings
    from aliyun_training.promotion import Champion

#: The audit log's event for a rollback (Airflow's "Audit Log" lists it with the user).
ROLLBACK_EVENT = "aliyun_training.champion_rollback"
#: The states of a ``promote`` that may still move the pointer.
_UNDER_WAY = ("scheduled", "queued", "running", "restarting", "up_for_retry", "up_for_reschedule", "deferred")


@dataclass(frozen=True)
class ChampionStanding:
    """A pipeline's champion as its pointer says now, and the past champions it can go back to."""

    #: The champion Asset's id (its permissions are Airflow's asset permissions); None: the
    #: pipeline promotes nothing.
    asset_id: int | None
    current: Champion | None
    history: list[PastChampion]


class _StoredState(AssetState):
    """The champion Asset's state through Airflow's state backend, as its REST routes write it."""

    def __init__(self, session: Session, asset_id: int) -> None:
        from airflow.state import AssetScope, get_state_backend

        self._backend, self._scope = get_state_backend(), AssetScope(asset_id=asset_id)
        self._session = session

    def get(self, key: str, default: Any = None) -> Any:
        stored = self._backend.get(self._scope, key, session=self._session)
        return json.loads(stored) if stored is not None else default

    def set(self, key: str, value: Any) -> None:
        self._backend.set(self._scope, key, json.dumps(value), session=self._session)


def champion_standing(session: Session, dag_id: str) -> ChampionStanding:
    """The pipeline's champion and past champions (a pipeline that promotes nothing has neither)."""
    asset = _champion_asset(session, dag_id)
    if asset is None:
        return ChampionStanding(asset_id=None, current=None, history=[])
    pointer = ChampionPointer(_StoredState(session, asset.id))
    return ChampionStanding(asset_id=asset.id, current=pointer.read(), history=pointer.history())


def roll_back_champion(session: Session, dag_id: str, to: str | None, by: str) -> RolledBack:
    """Roll the champion of the pipeline ``dag_id`` back (``to``: a past champion's registered
    version or run id; None: the one the champion replaced), for the person ``by``; the caller
    commits ``session``. :class:`RollbackRefused` names why and the fix where nothing moved."""
    from airflow.assets.manager import asset_manager
    from airflow.models.log import Log

    from aliyun_training.model_registry.base import RegistryError

    asset = _champion_asset(session, dag_id)
    if asset is None:
        raise RollbackRefused(
            f"{dag_id} has no champion to roll back: it is not a deployed pipeline with a promotion rule"
        )
    promoting = _promotion_under_way(session, dag_id)
    if promoting is not None:
        raise RollbackRefused(
            f"run {promoting} of {dag_id} is promoting, and may move the champion (fix: roll back once "
            "its promote task ended)"
        )
    pointer = ChampionPointer(_StoredState(session, asset.id))
    try:
        done = pointer.roll_back(to, by, _open_registry)
    except RegistryError as exc:
        raise RollbackRefused(f"the registry did not move its pointer, so nothing moved: {exc}") from None
    announced = {**announcement(done.champion, done.replaced.run_id), "rolled_back_by": by}
    asset_manager.register_asset_change(asset=asset, extra=announced, source_is_api=True, session=session)
    session.add(Log(event=ROLLBACK_EVENT, dag_id=dag_id, owner=by, extra=json.dumps(announced)))
    return done


def _open_registry(settings: RegistrySettings) -> ModelRegistry:
    """The registry a past champion was promoted in, with this installation's pointer."""
    from aliyun_training.model_registry import open_registry

    return open_registry(settings, installation_id())


def _champion_asset(session: Session, dag_id: str) -> AssetModel | None:
    """The champion Asset of the pipeline ``dag_id``: the one its ``promote`` task reads."""
    from airflow.models.asset import AssetModel, TaskInletAssetReference
    from sqlalchemy import select

    return session.scalar(
        select(AssetModel)
        .join(TaskInletAssetReference, TaskInletAssetReference.asset_id == AssetModel.id)
        .where(TaskInletAssetReference.dag_id == dag_id, TaskInletAssetReference.task_id == PROMOTE)
        .limit(1)
    )


def _promotion_under_way(session: Session, dag_id: str) -> str | None:
    """The run of ``dag_id`` whose ``promote`` may still move the pointer, if any."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    return session.scalar(
        select(TaskInstance.run_id)
        .where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.task_id == PROMOTE,
            TaskInstance.state.in_(_UNDER_WAY),
        )
        .limit(1)
    )
