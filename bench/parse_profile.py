"""Where a hot parse of dags/training_pipelines.py goes, the package's share apart from Airflow's.

``parse_time.py`` says how much the file costs against its same-shape twin; this says where the
difference goes. In a fresh subprocess, after the imports ``parse_time.py`` pays first, the file
(loading the project's ``pipelines/``) and its twin (``parse_time.write_twin``) are parsed cold, then
``--repeats`` times hot each, alternating so that both see the same load, with the functions below
wrapped: each parse's CPU time is charged to the innermost wrapped function running (its exclusive
time), or to Python's garbage collector while it runs. The wrappers cost time of their own, so the
totals are higher than ``parse_time.py``'s; the shares are what to read.

Airflow's share is what it spends on the DAGs and tasks the file defines: the ``DagBag`` (module
exec, validation, cycle check), ``DAG()`` (it validates every Param), copying the DAG's Params into
each task (``get_merged_defaults``, once per class of the operator that defines ``__init__``),
``BaseOperator.__init__``, its own operator classes (``@task``, sensors, approvals) and ``>>``. The
package's share is reading the declarations and environment files, the trigger form, the docs and
schedule, its operators' own ``__init__`` and the rest of the loader's and factory's own code.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import parse_time

#: The pipelines folder the file loads: the project's own, as ``parse_time.py``'s headline row.
PIPELINES = parse_time.PROJECT_PIPELINES
AIRFLOW, OURS = "Airflow", "ours"
#: Where parse time goes, by category: (whose, what).
DAGBAG = (AIRFLOW, "DagBag: module exec, validation, cycle check")
DAG_INIT = (AIRFLOW, "DAG(): validating every Param")
PARAMS_ONCE = (AIRFLOW, "the DAG's Params copied into each task, once")
PARAMS_AGAIN = (AIRFLOW, "... and again per class of its operator")
BASE_OPERATOR = (AIRFLOW, "BaseOperator.__init__")
AIRFLOW_OPERATORS = (AIRFLOW, "Airflow's operator classes (@task, sensors, approval)")
DEPENDENCIES = (AIRFLOW, "task dependencies (>>)")
DAG_PARTS = (AIRFLOW, "calling @task functions, task groups, assets")
COLLECTOR = (AIRFLOW, "Python's garbage collector")
DECLARATIONS = (OURS, "reading and validating declarations")
ENVIRONMENTS = (OURS, "environment files, watched backends")
FORM = (OURS, "the trigger form (run_params)")
DOCS = (OURS, "docs, schedule, inlets")
OUR_OPERATORS = (OURS, "our operators' own __init__")
OUR_CODE = (OURS, "loader and factory code, the reconciler's DAG")
Category = tuple[str, str]


class Ledger:
    """Exclusive CPU time by category: every span between two events is charged to the innermost
    category running."""

    def __init__(self) -> None:
        self.totals: defaultdict[Category, float] = defaultdict(float)
        self._stack: list[Category | None] = [None]
        self._last = time.process_time()

    def enter(self, category: Category | None) -> None:
        self._charge()
        self._stack.append(category)

    def leave(self) -> None:
        self._charge()
        self._stack.pop()

    def on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        """A ``gc.callbacks`` hook: a collection during a parse is the collector's, whoever set it off."""
        if len(self._stack) > 1:
            self.enter(COLLECTOR) if phase == "start" else self.leave()

    def _charge(self) -> None:
        now = time.process_time()
        if self._stack[-1] is not None:
            self.totals[self._stack[-1]] += now - self._last
        self._last = now

    def wrap(self, owner: Any, name: str, category: Category | Any) -> None:
        """Charge ``owner.name``'s exclusive time to ``category``, or to what ``category(args, kwargs)``
        returns."""
        function = getattr(owner, name)

        @functools.wraps(function)
        def charged(*args: Any, **kwargs: Any) -> Any:
            self.enter(category(args, kwargs) if callable(category) else category)
            try:
                return function(*args, **kwargs)
            finally:
                self.leave()

        setattr(owner, name, charged)


def _copy_category(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Category:
    """``get_merged_defaults(dag, task_group, task_params, task_default_args)``: the outermost class's
    call gets no default_args, the classes below it get the outer one's."""
    nested = (args[3] if len(args) > 3 else kwargs.get("task_default_args")) is not None
    return PARAMS_AGAIN if nested else PARAMS_ONCE


def wrap_airflow(ledger: Ledger) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import DAG, Asset, BaseOperator, TaskGroup
    from airflow.sdk.bases import decorator, operator

    ledger.wrap(DagBag, "__init__", DAGBAG)
    ledger.wrap(DAG, "__init__", DAG_INIT)
    ledger.wrap(operator, "get_merged_defaults", _copy_category)
    ledger.wrap(BaseOperator, "__init__", BASE_OPERATOR)
    for name in ("set_downstream", "set_upstream"):
        ledger.wrap(BaseOperator, name, DEPENDENCIES)
    ledger.wrap(decorator._TaskDecorator, "__call__", DAG_PARTS)
    for owner in (TaskGroup, Asset):
        ledger.wrap(owner, "__init__", DAG_PARTS)


def wrap_operators(ledger: Ledger) -> None:
    """Every operator class that defines ``__init__`` (what ``apply_defaults`` wraps), ours or Airflow's."""
    from airflow.sdk import BaseOperator

    classes, pending = set(), [BaseOperator]
    while pending:
        subclasses = pending.pop().__subclasses__()
        classes.update(subclasses)
        pending += subclasses
    for cls in classes:
        if "__init__" in vars(cls):
            ours = cls.__module__.startswith("aliyun_training.")
            ledger.wrap(cls, "__init__", OUR_OPERATORS if ours else AIRFLOW_OPERATORS)


def wrap_package(ledger: Ledger) -> None:
    import aliyun_training.pipelines
    from aliyun_training.pipelines import factory, folder, reconciler, task_params

    # The DAG file calls the package's name for it.
    ledger.wrap(aliyun_training.pipelines, "load_pipelines", OUR_CODE)
    ledger.wrap(folder, "load_declaration", DECLARATIONS)
    ledger.wrap(factory, "_build", OUR_CODE)
    ledger.wrap(reconciler, "reconciler_dag", OUR_CODE)
    ledger.wrap(factory, "run_params", FORM)
    for name in ("unconfigured_backends", "check_environment_use", "watched_backends"):
        ledger.wrap(factory, name, ENVIRONMENTS)
    for name in ("_doc", "pipeline_schedule", "_timetable", "version_inlets"):
        ledger.wrap(factory, name, DOCS)
    # The copies of the DAG's Params that a task keeps, made after the factory built it.
    ledger.wrap(task_params, "_copy_deeply", PARAMS_ONCE)


def profile(repeats: int) -> dict[str, Any]:
    """Runs in a fresh subprocess: parse the file and its twin cold, then each ``repeats`` times hot,
    alternating so that both see the same load, the ledger charging each parse's time to its side."""
    for name in parse_time.PER_PROCESS_MODULES:
        importlib.import_module(name)
    file = parse_time.DECLARATIONS_FILE
    parse_time.pre_import_airflow_modules(file)
    shapes = parse_time.dag_shapes(parse_time.timed_parse(file)[2])
    with tempfile.TemporaryDirectory(prefix="parse-profile-twin-") as tmp:
        twin = parse_time.write_twin(Path(tmp), file.name, shapes)
        parse_time.pre_import_airflow_modules(twin)
        parse_time.timed_parse(twin)
        ledger = Ledger()
        wrap_airflow(ledger)
        wrap_operators(ledger)
        wrap_package(ledger)
        gc.callbacks.append(ledger.on_gc)
        sides: dict[Path, tuple[defaultdict[Category, float], list[float]]] = {
            path: (defaultdict(float), []) for path in (file, twin)
        }
        for _ in range(repeats):
            for path, (totals, parses) in sides.items():
                ledger.totals = totals
                parses.append(parse_time.timed_parse(path)[1])
    return {
        side: {
            "total_ms": statistics.mean(parses),
            "categories": [[*category, 1000 * seconds / repeats] for category, seconds in totals.items()],
        }
        for side, (totals, parses) in zip(("file", "twin"), sides.values(), strict=True)
    }


def format_table(file: dict[str, Any], twin: dict[str, Any]) -> str:
    """One row per category with the file's and the twin's ms per parse, then each side's sums."""
    rows: dict[Category, list[float]] = {}
    for column, result in enumerate((file, twin)):
        for whose, what, ms in result["categories"]:
            rows.setdefault((whose, what), [0.0, 0.0])[column] = ms
    width = max(len(what) for _, what in rows) + 2

    def line(whose: str, what: str, file_ms: float, twin_ms: float) -> str:
        return f"{whose:<8} {what:<{width}} {file_ms:>8.2f} {twin_ms:>8.2f} {file_ms - twin_ms:>11.2f}"

    lines = [f"{'whose':<8} {'where':<{width}} {'file ms':>8} {'twin ms':>8} {'file - twin':>11}"]
    for whose in (AIRFLOW, OURS):
        share = sorted(((what, ms) for (w, what), ms in rows.items() if w == whose), key=lambda r: -r[1][0])
        lines += [line(whose, what, *ms) for what, ms in share]
        lines.append(line(whose, "(all of it)", sum(ms[0] for _, ms in share), sum(ms[1] for _, ms in share)))
    lines.append(line("", "the parse, wrappers included", file["total_ms"], twin["total_ms"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Profile in a fresh subprocess and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="hot parses profiled of each (default 30)")
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.result is not None:
        args.result.write_text(json.dumps(profile(args.repeats)))
        return 0
    env = {**parse_time.child_env(), "ALIYUN_TRAINING_PIPELINES_DIR": str(PIPELINES)}
    with tempfile.TemporaryDirectory(prefix="parse-profile-") as tmp:
        result = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--result", str(result), "--repeats", str(args.repeats)]
        if subprocess.run(command, env=env, cwd=parse_time.PROJECT_ROOT, check=False).returncode:
            raise SystemExit("profiling failed, see above")
        sides = json.loads(result.read_text())
    print(f"{parse_time.DECLARATIONS_FILE.name} ({PIPELINES.name}/) and its twin: CPU ms per hot parse")
    print(format_table(sides["file"], sides["twin"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
