"""The package's Airflow plugin: its task links, its pages and the UI's entry to them.

An installed distribution (the wheel, an editable install) declares this class as its
``airflow.plugins`` entry point, which Airflow loads in every process with its default settings;
``plugins/aliyun_training_plugin.py`` exposes it to a deployment that has the package in its
plugins folder and no distribution of it. Airflow reports a second plugin of one name as an import
error, so the provider metadata declares none and that file stands back where the entry point exists.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from aliyun_training.links import RunPageLink, RunPlanLink, RunReportLink, TrainingJobConsoleLink
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
    operator_extra_links = [TrainingJobConsoleLink(), RunPageLink(), RunPlanLink(), RunReportLink()]
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
