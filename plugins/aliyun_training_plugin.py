"""Registers the package's operator extra links with Airflow (the UI resolves links through plugins)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from aliyun_training.links import TrainingJobConsoleLink


class AliyunTrainingPlugin(AirflowPlugin):
    name = "aliyun_training"
    operator_extra_links = [TrainingJobConsoleLink()]
