"""Loads the package's plugin (links, pages, the UI's entry to them) from the plugins folder, for a
deployment that has the package there and no installed distribution of it.

An installed distribution (the wheel, or the editable install ``make`` does) declares the plugin as
an ``airflow.plugins`` entry point, which Airflow loads too; it reports a second plugin of one name
as an import error, so this file then exposes no plugin class.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from aliyun_training.provider_info import PLUGIN_NAME

if not entry_points(group="airflow.plugins", name=PLUGIN_NAME):
    from aliyun_training.plugin import AliyunTrainingPlugin as AliyunTrainingPlugin
