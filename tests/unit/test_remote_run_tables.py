"""The remote-run tables, ``staging.runs`` and ``image.runs``: each names the environment setting that
chooses its mode, and holds a run for every mode of that setting that runs off the worker.

A mode the environment file accepts without a run in its table would pass the file's checks and
fail only when the run is looked up (in configure's checks, or in the triggerer); a run whose mode
the plan cannot carry would never be chosen.
"""

from __future__ import annotations

from types import NoneType
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel

from aliyun_training.environments import AckEnvironment, DlcEnvironment
from aliyun_training.image.runs import RUNS as IMAGE_RUNS
from aliyun_training.plan.models import ImagePlan, StagingPlan
from aliyun_training.staging.runs import RUNS as STAGING_RUNS

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

    from aliyun_training.remote import RunKind

#: The environments of the backends whose stages run remotely.
CLOUD_ENVIRONMENTS = (DlcEnvironment, AckEnvironment)
#: The staging mode that copies on the worker itself: no remote run.
ON_THE_WORKER = {"direct"}
#: Each table, and the plan model whose ``mode`` carries the chosen mode to the task.
PLANNED = [(STAGING_RUNS, StagingPlan), (IMAGE_RUNS, ImagePlan)]
TABLES = [table for table, _plan in PLANNED]
IDS = ["staging", "image"]


def literal_values(annotation: Any) -> set[str]:
    """The values a ``Literal[...]`` field (optional or not) accepts."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    return {value for arg in get_args(annotation) if arg is not NoneType for value in literal_values(arg)}


def setting_field(environment: type[BaseModel], setting: str) -> FieldInfo | None:
    """The field ``setting`` (``<block>.<field>``) names in ``environment``'s file; None without one."""
    block, field = setting.split(".")
    settings = environment.model_fields[block].annotation
    assert isinstance(settings, type) and issubclass(settings, BaseModel), (environment, block)
    return settings.model_fields.get(field)


def environment_modes(setting: str) -> set[str]:
    """Every value of ``setting`` some cloud environment file accepts."""
    fields = [setting_field(environment, setting) for environment in CLOUD_ENVIRONMENTS]
    return {mode for field in fields if field is not None for mode in literal_values(field.annotation)}


@pytest.mark.parametrize("table", TABLES, ids=IDS)
def test_each_table_names_a_setting_every_cloud_environment_file_has(table: RunKind) -> None:
    for environment in CLOUD_ENVIRONMENTS:
        assert setting_field(environment, table.setting) is not None, (environment, table.setting)


@pytest.mark.parametrize("table", TABLES, ids=IDS)
def test_every_mode_an_environment_file_accepts_off_the_worker_has_exactly_one_run(table: RunKind) -> None:
    modes = [run.mode for run in table.runs]

    assert sorted(modes) == sorted(environment_modes(table.setting) - ON_THE_WORKER)


@pytest.mark.parametrize(("table", "plan"), PLANNED, ids=IDS)
def test_every_runs_mode_is_one_the_plan_carries_to_the_task(table: RunKind, plan: type[BaseModel]) -> None:
    assert {run.mode for run in table.runs} <= literal_values(plan.model_fields["mode"].annotation)
