"""The remote stager for a staging mode, rebuilt from its JSON settings (also in the triggerer)."""

from __future__ import annotations

from typing import Any

from aliyun_training.remote import RemoteRun
from aliyun_training.spec import SpecError


def remote_stager(mode: str, config: dict[str, Any]) -> RemoteRun:
    """``pod``: the engine in a pod on ACK; ``dataflow``: a CPFS data flow import."""
    if mode == "pod":
        from aliyun_training.staging.pod import PodStager

        return PodStager(**config)
    if mode == "dataflow":
        from aliyun_training.staging.dataflow import DataFlowStager

        return DataFlowStager(**config)
    raise SpecError(f"mode: {mode!r} does not run off the worker (fix: use pod or dataflow)")
