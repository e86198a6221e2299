"""What the session's metadata DB recorded of an Asset: the extras of its events, oldest first."""

from __future__ import annotations


def asset_event_extras(asset_name: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.name == asset_name)
            .order_by(AssetEvent.id)
        )
        return list(session.scalars(query))
