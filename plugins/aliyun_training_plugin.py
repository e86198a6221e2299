"""Registers the package's operator extra links with Airflow (the UI resolves links through plugins)
for a deployment that loads the package from its plugins folder instead of installing the wheel.

The links are the ones the provider metadata declares (``extra-links``), read from there so the
two ways of loading the package offer the same links.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk.module_loading import import_string

from aliyun_training.provider_info import get_provider_info


class AliyunTrainingPlugin(AirflowPlugin):
    name = "aliyun_training"
    operator_extra_links = [import_string(path)() for path in get_provider_info()["extra-links"]]
