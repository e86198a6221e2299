"""How much each DAG file in dags/ costs to parse, against the floor Airflow itself costs for its DAGs.

Every file is measured in its own fresh Python subprocess, so modules imported while measuring one
file cannot make the next one look cheap. Each subprocess first imports what a dag-processor has
already paid for once, not per file: ``airflow``, ``airflow.sdk``, the ``DagBag`` module, and the
``airflow.*`` modules the file itself imports (the dag-processor pre-imports those, see
``[dag_processor] parsing_pre_import_modules``). Files are parsed with
``DagBag(dag_folder=<file>, load_op_links=False)``, the call the dag-processor makes for every file
(as ``BundleDagBag``, which only adds the bundle to ``sys.path``), rather than a bare importlib exec:
it pays the same module exec plus DAG validation, cycle check and cluster policies.

- cold: the first parse; it pays the project's own imports (``aliyun_training.*``). Airflow 3 parses
  every file in a child forked from a manager that has imported only ``airflow.*`` modules, so this
  is what the dag-processor pays on every parse of the file, not only the first.
- hot: the median of ``--repeats`` (default 7) re-parses in the same process, with the project's
  modules in ``sys.modules``: the cost of the DAG file alone.
- twin (issue 37's same-shape twin): a generated file with one DAG for every DAG the real file
  defines, each with that DAG's own number of tasks, all ``EmptyOperator``, its own timetable and
  its own trigger-form ``Param`` definitions; its hot parse is the floor Airflow itself costs for
  those DAG definitions (Airflow validates every Param's JSON schema and copies the params into
  every task, which no operator code can avoid). The twin is checked to have the same DAG shapes as
  the file (task count, timetable and Params per DAG) before anything is timed, then parsed cold
  after the file, and hot alternating with it, so that drift in the machine's load hits both alike.
  The bare twin (the same DAGs, tasks and timetables, no params) alternates with them, for
  comparison: what the trigger forms cost Airflow.

Every parse is timed by the wall clock and by the process's CPU time, and the target reads CPU time:
it is what the dag-processor pays, and on a machine others share the wall clock also counts the time
a parse waited for a core. Timed in processes of their own, minutes apart, the file and its twin
gave wall-clock ratios from 0.8 to 4.4 x for one commit whose CPU-time ratios stayed within 1.4-1.7 x
(``docs/benchmarks.md``, issue 37), so the twin is still parsed in the file's process, alternating
with it. Until issue 37 every twin DAG ran ``@weekly``; now each runs on its
DAG's own timetable.

``dags/training_pipelines.py`` loads every declaration of a pipelines folder, so it is measured with
the project's own ``pipelines/`` folder (as shipped: the pipelines of the README) and with 1, 10
and 50 declared pipelines (copies of ``pipelines/cifar10.yaml`` under other dag_ids, in a temporary
folder named by ``ALIYUN_TRAINING_PIPELINES_DIR``). Its DAGs are not all alike: beside the
pipelines it defines the reconciler DAG (one task, two Params), so its twin has one twin DAG per
pipeline and one for the reconciler, each shaped like its original.

Timings are noisy and machine-dependent, so the headline is the ratio hot / twin hot, both medians
of CPU time. Targets: cold <= 500 ms for one or two pipelines and <= 1 s for 10 or 50, hot <= 1.5 x
twin hot (issue 37), and parsing imports none of the heavy or cloud-SDK modules that belong in task
execution. Exits 1 when any target fails.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DAGS_DIR = PROJECT_ROOT / "dags"

HOT_RATIO_LIMIT = 1.5
#: How many declared pipelines the declarations file is measured with, besides the project's own folder.
PIPELINE_COUNTS = (1, 10, 50)
DECLARATIONS_FILE = DAGS_DIR / "training_pipelines.py"
PROJECT_PIPELINES = PROJECT_ROOT / "pipelines"
TEMPLATE_DECLARATION = PROJECT_PIPELINES / "cifar10.yaml"
#: Top-level packages a DAG file must not import at parse time: each costs seconds or needs cloud
#: credentials, and belongs inside the task that uses it.
FORBIDDEN_ROOTS = frozenset({"torch", "numpy", "pandas", "oss2", "kubernetes"})
FORBIDDEN_PREFIX = "alibabacloud_"
#: Imported once by every dag-processor rather than per file, so imported before any timing starts.
PER_PROCESS_MODULES = ("airflow", "airflow.sdk", "airflow.dag_processing.dagbag")
#: Where the timetable classes a twin may build are (a DAG's timetable ``repr`` names its class).
TIMETABLE_MODULES = (
    "airflow.sdk.definitions.timetables.trigger",
    "airflow.sdk.definitions.timetables.interval",
    "airflow.sdk.definitions.timetables.simple",
)

TWIN_TEMPLATE = '''"""Generated twin of {source}: one DAG per DAG there, as many tasks, all EmptyOperator."""

import datetime

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, chain
from pendulum import Timezone
{imports}

#: (dag_id, task count, dumped Params) of every DAG of the real file, each twinned as it is.
SHAPES = {shapes!r}
#: Every DAG's own timetable, by dag_id.
SCHEDULES = {{
{schedules}
}}

for dag_id, task_count, params in SHAPES:
    with DAG(
        dag_id=f"{{dag_id}}_twin",
        schedule=SCHEDULES[dag_id],
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={{
            name: Param(spec["value"], description=spec["description"], **spec["schema"])
            for name, spec in params.items()
        }},
    ):
        chain(*[EmptyOperator(task_id=f"task_{{index}}") for index in range(task_count)])
'''

#: One DAG as its twin copies it: dag_id, number of tasks, the dumped trigger-form Params and its
#: timetable as source code (its ``repr``: an attrs timetable is built again from it).
DagShape = tuple[str, int, dict[str, Any], str]


def child_env() -> dict[str, str]:
    """The environment `make` gives Airflow, defaulted from the project root when run without make."""
    env = dict(os.environ)
    defaults = {
        "AIRFLOW_HOME": PROJECT_ROOT / ".airflow",
        "AIRFLOW__CORE__DAGS_FOLDER": DAGS_DIR,
        "AIRFLOW__CORE__PLUGINS_FOLDER": PROJECT_ROOT / "plugins",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "ALIYUN_TRAINING_LOCAL_ROOT": PROJECT_ROOT / ".demo",
        "PYTHONPATH": PROJECT_ROOT / "plugins",
    }
    for name, value in defaults.items():
        env.setdefault(name, str(value))
    # DagBag logs every file it fills from; at ERROR only real problems reach the terminal.
    env["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "ERROR"
    return env


def forbidden_modules(names: set[str]) -> list[str]:
    """Top-level forbidden packages among `names`, one entry per package rather than per submodule."""
    roots = {name.partition(".")[0] for name in names}
    return sorted(root for root in roots if root in FORBIDDEN_ROOTS or root.startswith(FORBIDDEN_PREFIX))


def pre_import_airflow_modules(path: Path) -> None:
    """Import the file's ``airflow.*`` imports up front, as the dag-processor manager does before forking."""
    from airflow.utils.file import iter_airflow_imports

    for name in iter_airflow_imports(str(path)):
        importlib.import_module(name)


def timed_parse(path: Path) -> tuple[float, float, DagBag]:
    """Parse `path` into a fresh DagBag; returns its wall-clock and CPU milliseconds, and the bag.

    Garbage from earlier parses is collected first so that it is not charged to this one.
    """
    from airflow.dag_processing.dagbag import DagBag

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    bag = DagBag(dag_folder=str(path), load_op_links=False)
    wall_ms, cpu_ms = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
    if bag.import_errors or not bag.dags:
        raise SystemExit(f"{path.name} did not parse: {bag.import_errors or 'no DAGs found'}")
    return wall_ms, cpu_ms, bag


def dag_shapes(bag: DagBag) -> list[DagShape]:
    """Every DAG of ``bag`` in dag_id order, with its own task count, Params and timetable: what the
    twin copies."""
    shapes = []
    for dag_id in sorted(bag.dags):
        dag = bag.dags[dag_id]
        params = {name: dag.params.get_param(name).dump() for name in dag.params}
        shapes.append((dag_id, len(dag.tasks), params, repr(dag.timetable)))
    return shapes


def write_twin(directory: Path, source: str, shapes: list[DagShape], *, bare: bool = False) -> Path:
    """Write the EmptyOperator twin of a file's DAGs, one twin DAG per DAG with that DAG's task count,
    timetable and (unless ``bare``) Params; its parse cost is the floor Airflow sets."""
    path = directory / f"{Path(source).stem}_twin{'_bare' if bare else ''}.py"
    path.write_text(
        TWIN_TEMPLATE.format(
            source=source,
            imports="\n".join(sorted({_timetable_import(schedule) for *_, schedule in shapes})),
            shapes=[(dag_id, task_count, {} if bare else params) for dag_id, task_count, params, _ in shapes],
            schedules="\n".join(f"    {dag_id!r}: {schedule}," for dag_id, *_, schedule in shapes),
        )
    )
    return path


def _timetable_import(schedule: str) -> str:
    """The import of the timetable class a DAG's timetable ``repr`` names; the twin of a DAG whose
    timetable is none of Airflow's plain ones (an asset schedule, whose watchers hold triggers) stops
    the benchmark instead of comparing another schedule."""
    name = schedule.partition("(")[0]
    for module in TIMETABLE_MODULES:
        if hasattr(importlib.import_module(module), name):
            return f"from {module} import {name}"
    raise SystemExit(
        f"the twin cannot build the timetable {schedule} (none of {', '.join(TIMETABLE_MODULES)})"
    )


def check_twin(real: list[DagShape], twin_bag: DagBag, twin: Path, *, bare: bool = False) -> None:
    """Stop unless the twin has one DAG per real DAG, each with its original's task count, timetable and
    Params (none when ``bare``): a twin of another shape would make the ratios compare the wrong floor."""
    expected = [
        (f"{dag_id}_twin", task_count, {} if bare else params, schedule)
        for dag_id, task_count, params, schedule in real
    ]
    if dag_shapes(twin_bag) != expected:
        raise SystemExit(f"{twin.name} does not mirror the DAGs it twins: {dag_shapes(twin_bag)!r}")


def write_declarations(directory: Path, count: int) -> Path:
    """``count`` copies of the CIFAR-10 declaration under their own dag_ids and model names (a
    deployment refuses two declarations of one model), code paths made absolute."""
    template = TEMPLATE_DECLARATION.read_text().replace("../include/", f"{PROJECT_ROOT}/include/")
    for index in range(count):
        (directory / f"pipeline_{index:02d}.yaml").write_text(
            template.replace("dag_id: cifar10_retrain", f"dag_id: pipeline_{index:02d}").replace(
                "  model: cifar10\n", f"  model: model_{index:02d}\n"
            )
        )
    return directory


def hot_parses(paths: list[Path], repeats: int) -> list[dict[str, float]]:
    """The median hot parse of each file, wall clock and CPU, the files alternating so that drift in
    the machine's load hits all alike."""
    samples: list[list[tuple[float, float]]] = [[] for _ in paths]
    for _ in range(repeats):
        for path, times in zip(paths, samples, strict=True):
            times.append(timed_parse(path)[:2])
    return [
        {
            "hot_ms": statistics.median(wall for wall, _ in times),
            "hot_cpu_ms": statistics.median(cpu for _, cpu in times),
        }
        for times in samples
    ]


def measure(path: Path, repeats: int) -> dict[str, Any]:
    """All measurements for one DAG file and its twins; runs inside the fresh subprocess.

    Forbidden imports are looked for among the modules the cold parse added to ``sys.modules``, so
    whatever Airflow had imported on its own is not charged to the file.
    """
    pre_import_airflow_modules(path)
    modules_before = set(sys.modules)
    cold_ms, cold_cpu_ms, bag = timed_parse(path)
    forbidden = forbidden_modules(set(sys.modules) - modules_before)
    shapes = dag_shapes(bag)
    del bag
    with tempfile.TemporaryDirectory(prefix="parse-time-twin-") as tmp:
        twin = write_twin(Path(tmp), path.name, shapes)
        bare_twin = write_twin(Path(tmp), path.name, shapes, bare=True)
        pre_import_airflow_modules(twin)
        twin_cold_ms, _, twin_bag = timed_parse(twin)
        check_twin(shapes, twin_bag, twin)
        check_twin(shapes, timed_parse(bare_twin)[2], bare_twin, bare=True)
        del twin_bag
        hot, twin_hot, bare_twin_hot = hot_parses([path, twin, bare_twin], repeats)
    return {
        "dags": len(shapes),
        "tasks": sum(task_count for _, task_count, _, _ in shapes),
        "params": sum(len(params) for _, _, params, _ in shapes),
        "shapes": [
            {"dag_id": dag_id, "tasks": task_count, "params": len(params), "schedule": schedule}
            for dag_id, task_count, params, schedule in shapes
        ],
        "cold_ms": cold_ms,
        "cold_cpu_ms": cold_cpu_ms,
        **hot,
        "twin_cold_ms": twin_cold_ms,
        "twin_hot_ms": twin_hot["hot_ms"],
        "twin_hot_cpu_ms": twin_hot["hot_cpu_ms"],
        "bare_twin_hot_ms": bare_twin_hot["hot_ms"],
        "bare_twin_hot_cpu_ms": bare_twin_hot["hot_cpu_ms"],
        "hot_ratio": hot["hot_cpu_ms"] / twin_hot["hot_cpu_ms"],
        "hot_ratio_wall": hot["hot_ms"] / twin_hot["hot_ms"],
        "hot_ratio_bare_twin": hot["hot_cpu_ms"] / bare_twin_hot["hot_cpu_ms"],
        "forbidden_imports": forbidden,
    }


def run_child(path: Path, repeats: int, result_path: Path) -> None:
    """Subprocess entry point: pay the per-process imports, then measure one file."""
    for name in PER_PROCESS_MODULES:
        importlib.import_module(name)
    result_path.write_text(json.dumps(measure(path, repeats)))


def measure_in_subprocess(path: Path, repeats: int, declarations: Path | int | None = None) -> dict[str, Any]:
    """Measure one file in a fresh interpreter; the result comes back through a file, not stdout, so
    anything the DAG prints cannot corrupt it. ``declarations``: the declarations file, loading the
    pipelines of that folder, or as many copies of the CIFAR-10 pipeline."""
    with tempfile.TemporaryDirectory(prefix="parse-time-") as tmp:
        result_path = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--measure", str(path), "--result", str(result_path)]
        command += ["--repeats", str(repeats)]
        env = child_env()
        label, count = path.relative_to(PROJECT_ROOT).as_posix(), 1
        if isinstance(declarations, Path):
            env["ALIYUN_TRAINING_PIPELINES_DIR"] = str(declarations)
            label = f"{path.name} ({declarations.relative_to(PROJECT_ROOT)}/)"
            count = len([*declarations.glob("*.yaml"), *declarations.glob("*.yml")])
        elif declarations is not None:
            folder = Path(tmp, "pipelines")
            folder.mkdir()
            env["ALIYUN_TRAINING_PIPELINES_DIR"] = str(write_declarations(folder, declarations))
            label, count = f"{path.name} x{declarations}", declarations
        completed = subprocess.run(command, env=env, cwd=PROJECT_ROOT, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"measuring {label} failed (exit {completed.returncode}), see above")
        return {"file": label, "pipelines": count, **json.loads(result_path.read_text())}


def cold_limit_ms(pipelines: int) -> float:
    """The cold-parse limit by the number of declared pipelines the file loads."""
    return 500.0 if pipelines <= 2 else 1000.0


def add_verdicts(result: dict[str, Any]) -> dict[str, Any]:
    """Attach PASS/FAIL for each target, so the JSON output carries the same verdicts as the table."""
    cold_limit = cold_limit_ms(result["pipelines"])
    checks = {
        f"cold <= {cold_limit:.0f} ms": result["cold_ms"] <= cold_limit,
        f"hot <= {HOT_RATIO_LIMIT:g} x twin hot (CPU)": result["hot_ratio"] <= HOT_RATIO_LIMIT,
        "no forbidden imports": not result["forbidden_imports"],
    }
    return {**result, "checks": checks, "passed": all(checks.values())}


def format_table(results: list[dict[str, Any]]) -> str:
    """One row per DAG file, each ratio column next to the two timings it comes from."""
    header = (
        f"{'DAG file':<36} {'dags':>4} {'tasks':>5} {'params':>6} {'cold ms':>8} {'hot ms':>7} "
        f"{'twin hot ms':>11} {'hot/twin':>8} {'hot CPU ms':>10} {'twin hot CPU ms':>15} "
        f"{'hot/twin CPU':>12} {'hot/bare twin CPU':>17}  forbidden imports"
    )
    rows = [
        f"{result['file']:<36} {result['dags']:>4} {result['tasks']:>5} {result['params']:>6} "
        f"{result['cold_ms']:>8.1f} {result['hot_ms']:>7.2f} {result['twin_hot_ms']:>11.2f} "
        f"{result['hot_ratio_wall']:>8.2f} {result['hot_cpu_ms']:>10.2f} {result['twin_hot_cpu_ms']:>15.2f} "
        f"{result['hot_ratio']:>12.2f} {result['hot_ratio_bare_twin']:>17.2f}  "
        f"{', '.join(result['forbidden_imports']) or 'none'}"
        for result in results
    ]
    return "\n".join([header, "-" * len(header), *rows])


def format_verdicts(results: list[dict[str, Any]]) -> str:
    """PASS/FAIL per target per file, so a failure names the file and the target it missed."""
    lines = []
    for result in results:
        lines.append(f"{result['file']}: {'PASS' if result['passed'] else 'FAIL'}")
        lines.extend(f"  {'PASS' if ok else 'FAIL'}  {name}" for name, ok in result["checks"].items())
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; --measure and --result are the subprocess's own arguments, hidden from --help."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="hot parses per file (default 7)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure every DAG file, print the table and verdicts; 1 when any target fails."""
    args = parse_args(argv)
    if args.measure is not None:
        run_child(args.measure, args.repeats, args.result)
        return 0
    runs: list[tuple[Path, Path | int | None]] = [
        (path, None) for path in sorted(DAGS_DIR.glob("*.py")) if path != DECLARATIONS_FILE
    ]
    runs += [(DECLARATIONS_FILE, declarations) for declarations in (PROJECT_PIPELINES, *PIPELINE_COUNTS)]
    results = [
        add_verdicts(measure_in_subprocess(path, args.repeats, declarations)) for path, declarations in runs
    ]
    print(format_table(results))
    print()
    print(format_verdicts(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"repeats": args.repeats, "results": results}, indent=2) + "\n")
    return 0 if all(result["passed"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
