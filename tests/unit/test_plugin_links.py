"""A deployment that loads the package from its plugins folder gets the links the wheel declares."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.plugins_manager import is_valid_plugin

from aliyun_training.plugin import AliyunTrainingPlugin
from aliyun_training.provider_info import get_provider_info

if TYPE_CHECKING:
    from types import ModuleType

    import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]
PLUGIN_FILE = PROJECT_DIR / "plugins" / "aliyun_training_plugin.py"


def _plugins_folder_module(monkeypatch: pytest.MonkeyPatch, *, installed: bool) -> ModuleType:
    """The plugins folder's file as Airflow executes it, with or without an installed distribution
    declaring pyproject's ``airflow.plugins`` entry points."""
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["entry-points"]
    found = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(name, value, "airflow.plugins")
        for name, value in declared["airflow.plugins"].items()
        if installed
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **params: found.select(**params))
    spec = importlib.util.spec_from_file_location("aliyun_training_plugin", PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plugins_folder_plugin_registers_every_link_the_provider_metadata_declares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _plugins_folder_module(monkeypatch, installed=False)

    registered = [
        f"{type(link).__module__}.{type(link).__qualname__}"
        for link in module.AliyunTrainingPlugin.operator_extra_links
    ]

    assert registered == get_provider_info()["extra-links"]
    assert {link.name for link in module.AliyunTrainingPlugin.operator_extra_links} == {
        "Training job console",
        "Run page",
        "Run plan",
        "Run report",
    }


def test_the_plugins_folder_file_exposes_the_plugin_only_without_an_installed_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Installed and in the folder at once, Airflow would load the plugin from both and report the
    second as an import error: the folder's file then leaves it to the entry point."""
    alone = _plugins_folder_module(monkeypatch, installed=False)
    beside_the_wheel = _plugins_folder_module(monkeypatch, installed=True)

    def plugins(module: ModuleType) -> list[type]:
        return [value for value in vars(module).values() if inspect.isclass(value) and is_valid_plugin(value)]

    assert plugins(alone) == [AliyunTrainingPlugin]
    assert plugins(beside_the_wheel) == []


def test_the_plugin_mounts_the_pages_and_offers_them_under_browse() -> None:
    from aliyun_training.pages.urls import PREFIX
    from aliyun_training.plugin import AliyunTrainingPlugin

    [pages] = AliyunTrainingPlugin.fastapi_apps
    [view] = AliyunTrainingPlugin.external_views

    assert pages["url_prefix"] == PREFIX
    assert {route.path for route in pages["app"].routes} >= {
        "/",
        "/pipelines/{dag_id}",
        "/runs/{dag_id}/{run_id}",
        "/runs/{dag_id}/{run_id}/report",
        "/runs/{dag_id}/{run_id}/plan",
    }
    assert view["href"] == f"{PREFIX}/" and view["category"] == "browse"
