"""The package's Airflow plugin: its task links, its pages and the UI's entry to them.

The provider metadata names this class (``plugins``) for a deployment that installs the wheel;
``plugins/aliyun_training_plugin.py`` exposes it to one that loads the package from its plugins
folder. Airflow registers a plugin once by name, so a deployment doing both gets it once.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from aliyun_training.links import RunPlanLink, RunReportLink, TrainingJobConsoleLink
from aliyun_training.pages.urls import PREFIX, page_path
from aliyun_training.provider_info import PLUGIN_NAME


@functools.cache
def _pages_apps() -> list[dict[str, Any]]:
    from aliyun_training.pages.app import create_app

    return [{"app": create_app(), "url_prefix": PREFIX, "name": "Alibaba Cloud training pages"}]


class _PagesApps:
    """The pages' app, built when the API server asks for it: no other process imports its routes."""

    def __get__(self, instance: object, owner: type) -> list[dict[str, Any]]:
        return _pages_apps()


class AliyunTrainingPlugin(AirflowPlugin):
    name = PLUGIN_NAME
    #: The links the provider metadata declares (``extra-links``; a test keeps the two the same).
    operator_extra_links = [TrainingJobConsoleLink(), RunPlanLink(), RunReportLink()]
    fastapi_apps = _PagesApps()
    #: "Training pipelines" under Browse: every pipeline's runs, versions, results and pages.
    external_views = [
        {
            "name": "Training pipelines",
            "href": page_path(""),
            "url_route": "aliyun-training",
            "category": "browse",
        }
    ]
