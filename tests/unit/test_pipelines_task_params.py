"""params_copied_once: a DAG whose tasks copy its Params once is the DAG Airflow builds without it."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import pendulum
import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.sdk import DAG, BaseOperator, Param, TaskGroup, task
from airflow.sdk.definitions.param import ParamsDict
from airflow.serialization.serialized_objects import DagSerialization

from aliyun_training.pipelines.task_params import params_copied_once

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from airflow.sdk import Context


class _Base(BaseOperator):
    def __init__(self, *, size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size


class _Derived(_Base):
    """Three classes that define ``__init__``: Airflow copies the DAG's Params three times for it."""

    def __init__(self, *, label: str, **kwargs: Any) -> None:
        super().__init__(size=len(label), **kwargs)
        self.text = label

    def execute(self, context: Context) -> None:
        return None


def _form() -> dict[str, Param]:
    return {
        "nodes": Param(1, type="integer", minimum=1, maximum=16, title="Nodes"),
        "overrides": Param({}, type="object", properties={"priority": {"type": "integer"}}),
        "backend": Param("local", type="string", enum=["local", "dlc"], values_display={"local": "Local"}),
    }


def _dag(copied_once: bool) -> DAG:
    """One DAG of every kind of task: plain, three classes deep, a group's, decorated, a sensor, an
    approval (whose operator keeps only its own params), and one with params of its own."""
    dag = DAG(
        dag_id="form",
        schedule="@weekly",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params=_form(),
        default_args={"owner": "ml-platform", "retries": 2},
    )
    scope: AbstractContextManager[None] = params_copied_once(dag) if copied_once else nullcontext()
    with dag, scope:

        @task
        def configure() -> dict[str, Any]:
            return {}

        @task.branch
        def route() -> list[str]:
            return ["derived"]

        empty = EmptyOperator(task_id="empty")
        derived = _Derived(task_id="derived", label="abc")
        with TaskGroup("checks"):
            checks = [_Base(task_id=f"check_{index}", size=index) for index in range(2)]
        own = _Derived(task_id="own", label="x", params={"extra": Param("e", type="string")})
        wait = TimeDeltaSensor(task_id="wait", delta=pendulum.duration(minutes=1))
        why = {"why": Param("", type="string")}
        approve = ApprovalOperator(task_id="approve", subject="Promote?", params=why)
        configure() >> route() >> [empty, derived] >> checks[0] >> checks[1] >> own >> wait >> approve
    return dag


def _params(task_: Any) -> ParamsDict:
    assert isinstance(task_.params, ParamsDict)
    return task_.params


def test_the_dag_is_the_one_airflow_builds_without_it() -> None:
    copied_once, as_airflow_builds_it = _dag(copied_once=True), _dag(copied_once=False)

    assert DagSerialization.to_dict(copied_once) == DagSerialization.to_dict(as_airflow_builds_it)


def test_every_task_has_its_own_deep_copy_of_the_dags_params_from_the_dag() -> None:
    dag = _dag(copied_once=True)
    originals = [dag.params.get_param(name) for name in dag.params]
    seen = {id(part) for param in originals for part in (param, param.schema, param.value)}
    for task_ in dag.tasks:
        if task_.task_id == "approve":
            continue
        for name in dag.params:
            original, copied = dag.params.get_param(name), _params(task_).get_param(name)
            assert copied.dump() == {**original.dump(), "source": "dag"}, (task_.task_id, name)
            assert original.source is None, "the DAG's own Params are not marked"
            for part in (copied, copied.schema, copied.value):
                if isinstance(part, Param | dict):
                    assert id(part) not in seen, f"{task_.task_id}'s {name} shares an object with another"
                    seen.add(id(part))
            assert copied.schema == original.schema
    assert _params(dag.get_task("own")).get_param("extra").source == "task", "a task's own stay its own"


def test_each_task_records_the_params_it_holds_as_airflow_s_tasks_do() -> None:
    """A task keeps its ``__init__`` arguments (Airflow maps tasks with them); in the DAG Airflow builds
    they name the very Param objects the task holds, and so they do here."""

    def recorded(dag: DAG) -> dict[str, list[str]]:
        """By task, the Params that are one object in its params and in its recorded arguments."""
        result = {}
        for task_ in dag.tasks:
            arguments = vars(task_)["_BaseOperator__init_kwargs"].get("params") or ParamsDict()
            held = _params(task_)
            result[task_.task_id] = sorted(
                name
                for name in arguments
                if name in held and arguments.get_param(name) is held.get_param(name)
            )
        return result

    built = recorded(_dag(copied_once=True))

    assert built == recorded(_dag(copied_once=False))
    assert built["derived"] == ["backend", "nodes", "overrides"]


def test_an_operator_that_drops_the_dags_params_still_does() -> None:
    approve = _dag(copied_once=True).get_task("approve")

    assert list(approve.params) == ["why"], "an approval's form is its own params only"


def test_the_dag_keeps_its_own_params_object_even_when_building_a_task_fails() -> None:
    dag = _dag(copied_once=False)
    params = dag.params

    with pytest.raises(TypeError), dag, params_copied_once(dag):
        _Derived(task_id="broken")  # type: ignore[call-arg]  # label is missing

    assert dag.params is params and type(dag.params) is ParamsDict
