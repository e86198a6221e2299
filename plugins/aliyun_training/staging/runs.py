"""The staging modes that run off the worker, each by its run class (``direct`` runs on the worker)."""

from __future__ import annotations

from aliyun_training.remote import RunKind
from aliyun_training.staging.dataflow import DataFlowStager
from aliyun_training.staging.pod import PodStager

RUNS = RunKind("staging.mode", (DataFlowStager, PodStager))
