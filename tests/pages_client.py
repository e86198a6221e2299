"""The provider's pages app over HTTP in the test process, against the session's metadata DB.

The app is the one the API server mounts (``aliyun_training.pages.app``), with Airflow's own auth
manager: a user signs in with the JWT cookie the UI's login sets, so the pages' access checks are
Airflow's, not the test's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi.testclient import TestClient


def pages_client(role: str | None = "viewer", signed_in: bool = True) -> TestClient:
    """A browser on the pages: signed in as a user of ``role`` (None: a user with no role)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from aliyun_training.pages.app import create_app
    from aliyun_training.pages.urls import PREFIX

    manager = init_auth_manager()
    server = FastAPI()
    server.mount(PREFIX, create_app())  # where the API server mounts it, so the pages' links resolve
    client = TestClient(server)
    if signed_in:
        token = manager.generate_jwt(SimpleAuthManagerUser(username="reader", role=role))
        client.cookies.set(COOKIE_NAME_JWT_TOKEN, token)
    return client
