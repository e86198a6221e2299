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
