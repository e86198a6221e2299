"""A deployment that loads the package from its plugins folder gets the links the wheel declares."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from aliyun_training.provider_info import get_provider_info

PLUGIN_FILE = Path(__file__).resolve().parents[2] / "plugins" / "aliyun_training_plugin.py"


def test_the_plugins_folder_plugin_registers_every_link_the_provider_metadata_declares() -> None:
    spec = importlib.util.spec_from_file_location("aliyun_training_plugin", PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    registered = [
        f"{type(link).__module__}.{type(link).__qualname__}"
        for link in module.AliyunTrainingPlugin.operator_extra_links
    ]

    assert registered == get_provider_info()["extra-links"]
    assert {link.name for link in module.AliyunTrainingPlugin.operator_extra_links} == {
        "Training job console",
        "Run plan",
        "Run report",
    }


def test_the_wheel_declares_the_plugin_the_plugins_folder_loads() -> None:
    """Installed and loaded from the folder at once, Airflow keeps one plugin of a name: the same one."""
    spec = importlib.util.spec_from_file_location("aliyun_training_plugin", PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    [declared] = get_provider_info()["plugins"]

    from airflow.sdk.module_loading import import_string

    assert import_string(declared["plugin-class"]) is module.AliyunTrainingPlugin
    assert declared["name"] == module.AliyunTrainingPlugin.name


def test_the_plugin_mounts_the_pages_and_offers_them_under_browse() -> None:
    from aliyun_training.pages.urls import PREFIX
    from aliyun_training.plugin import AliyunTrainingPlugin

    [pages] = AliyunTrainingPlugin.fastapi_apps
    [view] = AliyunTrainingPlugin.external_views

    assert pages["url_prefix"] == PREFIX
    assert {route.path for route in pages["app"].routes} >= {
        "/",
        "/pipelines/{dag_id}",
        "/runs/{dag_id}/{run_id}/report",
        "/runs/{dag_id}/{run_id}/plan",
    }
    assert view["href"] == f"{PREFIX}/" and view["category"] == "browse"
