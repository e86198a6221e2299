"""The image builder for a build mode, rebuilt from its JSON settings (also in the triggerer)."""

from __future__ import annotations

from typing import Any

from aliyun_training.remote import RemoteRun
from aliyun_training.spec import SpecError

BUILD_MODES = ("kaniko", "acr")


def image_builder(mode: str, config: dict[str, Any]) -> RemoteRun:
    """``kaniko``: a kaniko pod on ACK; ``acr``: ACR Enterprise's build service."""
    if mode == "kaniko":
        from aliyun_training.image.kaniko import KanikoBuilder

        return KanikoBuilder(**config)
    if mode == "acr":
        from aliyun_training.image.acr import AcrBuilder

        return AcrBuilder(**config)
    raise SpecError(f"image_build.mode: {mode!r} is not a build mode (fix: use one of {BUILD_MODES})")
