"""Loads the package's plugin (links, pages, the UI's entry to them) from the plugins folder, for a
deployment that does not install the wheel; one that does gets the same plugin, once."""

from __future__ import annotations

from aliyun_training.plugin import AliyunTrainingPlugin

__all__ = ["AliyunTrainingPlugin"]
