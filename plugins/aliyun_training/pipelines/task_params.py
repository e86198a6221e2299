"""A DAG's trigger form, deep-copied into each of its tasks once instead of once per class of the task.

Airflow deep-copies a DAG's Params into every task as the task is built (``apply_defaults`` in
``airflow.sdk.bases.operator``), and it does so for each class of the operator's hierarchy that
defines ``__init__``, since it wraps every one of them: once for an ``EmptyOperator``, twice for
most operators of ours, three times for a sensor or a subclass of the training job's operator,
four or five times for a ``@task`` or ``@task.branch``. A task keeps only the outermost copy (or
what its operator makes of it: an approval keeps none of the DAG's Params), and each copy copies
every Param's JSON schema: a declared pipeline's form has 14 to 17 Params, and the copies its tasks
threw away cost more than everything the package itself does to build the DAG.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.param import ParamsDict

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.sdk import DAG, Param


@contextmanager
def params_copied_once(dag: DAG) -> Iterator[None]:
    """Build ``dag``'s tasks inside this block: each task's copy of the DAG's Params is made once.

    While the block runs, a deep copy of the DAG's Params copies each Param shallowly (sharing its
    default and schema with the DAG's); on leaving it, each such copy a task kept is made deep. Every
    task ends with what Airflow gives it, Params that share nothing with the DAG's, and every operator
    still sees the DAG's Params as it is built, and does with its copy what it does (an approval keeps
    only its own).
    """
    params = dag.params
    # Not through the DAG's attrs converter, which would make it a plain ParamsDict again; the same
    # Param objects, already validated when the DAG was created.
    object.__setattr__(dag, "params", _ShallowlyCopied(params, params.suppress_exception))
    built_before = set(dag.task_dict)
    try:
        yield
    finally:
        object.__setattr__(dag, "params", params)
    for task_id, task in dag.task_dict.items():
        # BaseOperator makes every task's params a ParamsDict; its annotation allows a dict too.
        if task_id not in built_before and isinstance(task.params, ParamsDict):
            _copy_deeply(task.params, params)


class _ShallowlyCopied(ParamsDict):
    """The DAG's Params while its tasks are built: a deep copy of them is a copy of each Param."""

    def __deepcopy__(self, memo: dict[int, Any] | None) -> ParamsDict:
        return ParamsDict({name: _copy(param) for name, param in self.items()}, self.suppress_exception)


def _copy(param: Param) -> Param:
    """A new Param with ``param``'s attributes; unlike ``Param.__copy__``, it does not check again that
    the default is JSON, which it was when ``param`` was made."""
    clone = object.__new__(type(param))
    vars(clone).update(vars(param))
    return clone


def _copy_deeply(task_params: ParamsDict, dag_params: ParamsDict) -> None:
    """Make the task's Params that are shallow copies of the DAG's deep copies, in place: the task's
    record of its ``__init__`` arguments holds the same Param objects, as it does in Airflow. One memo
    for all of them, as Airflow's one deep copy has: what several of them share, their copies share."""
    memo: dict[int, Any] = {}
    for name, param in task_params.items():
        original = dag_params.get_param(name) if name in dag_params else None
        if original is not None and param is not original and param.schema is original.schema:
            vars(param).update(copy.deepcopy(vars(param), memo))
