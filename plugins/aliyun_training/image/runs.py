"""The image builds that run off the worker, each mode by its run class."""

from __future__ import annotations

from aliyun_training.image.acr import AcrBuilder
from aliyun_training.image.kaniko import KanikoBuilder
from aliyun_training.remote import RunKind

RUNS = RunKind("image_build.mode", (AcrBuilder, KanikoBuilder))
