"""A folder of declarations, as one DAG file loads it: every valid one a DAG, every broken one its own.

A DAG file that raises, or holds a DAG that fails validation, is an import error, and Airflow 3.3
then marks every DAG of that file stale: one team's typo would take every team's pipelines off the
UI and strand their runs in flight. So nothing a declaration holds makes the file fail. Each valid
declaration becomes its pipeline's DAG; each broken file becomes a DAG of its own
(:func:`broken_declaration_dag`) whose description and docs are the error, naming the file, the key
path and the fix, and whose one run fails at once with it, so the file shows red in the DAG list
beside the pipelines that loaded.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

from aliyun_training.declaration import (
    DeclarationError,
    PipelineDeclaration,
    declaration_files,
    load_declaration,
)
from aliyun_training.pages.runs import BROKEN_DECLARATION_TAG
from aliyun_training.task_ids import DECLARATION_ERROR

#: Every broken declaration file's DAG id starts with this; no declared pipeline may take it.
BROKEN_DECLARATION_PREFIX = "invalid_declaration__"
#: How long a broken declaration's DAG description may be: the DAG list shows it in one line.
DESCRIPTION_LENGTH = 300


def load_pipelines(folder: str | Path, environment_dir: str | Path | None = None) -> dict[str, DAG]:
    """A DAG per declaration in ``folder`` by dag_id, the reconciler of their backends' jobs, and a
    DAG per declaration file that did not load.

    A DAG file assigns the result to its globals (``globals().update(load_pipelines(...))``), which
    is where Airflow looks for DAGs.
    """
    from aliyun_training.pipelines.factory import training_pipeline, watched_backends
    from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID, reconciler_dag

    dags: dict[str, DAG] = {}
    watched = []
    errors: dict[Path, str] = {}
    declarations: dict[Path, PipelineDeclaration] = {}
    for path in declaration_files(Path(folder)):
        try:
            declarations[path] = load_declaration(path)
        except Exception as exc:
            errors[path] = _error(path, exc)
    conflicts = _conflicts(declarations, reserved={RECONCILER_DAG_ID: "job reconciler's"})
    for path, declaration in declarations.items():
        try:
            if path in conflicts:
                raise DeclarationError(conflicts[path])
            if declaration.dag_id in dags:
                raise DeclarationError(
                    f"pipeline declaration {path}: pipeline.dag_id {declaration.dag_id!r} is declared twice "
                    "(fix: give each pipeline its own dag_id)"
                )
            dags[declaration.dag_id] = training_pipeline(declaration, environment_dir=environment_dir)
            watched += watched_backends(declaration, environment_dir)
        except Exception as exc:
            errors[path] = _error(path, exc)
    if watched:
        dags[RECONCILER_DAG_ID] = reconciler_dag(watched)
    for path, error in errors.items():
        broken = broken_declaration_dag(path, error)
        dags[broken.dag_id] = broken
    return dags


def broken_declaration_dag(path: Path, error: str) -> DAG:
    """The DAG that stands for a declaration file that did not load: its error, visible and failing.

    Scheduled ``@once`` and not paused, its one run fails at once with the error (the run's failure
    is what the DAG list and a deployment's alerting show); its description is the error on one
    line (the file's name, then its first items) and its docs the whole error. The file's own
    pipeline, if it ever loaded, is gone from the DAG list until the file is fixed: nothing of a
    broken declaration can be trusted to run.
    """
    with DAG(
        dag_id=broken_dag_id(path),
        description=_one_line(error.replace(f"pipeline declaration {path}", path.name, 1)),
        doc_md=f"### Pipeline declaration `{path.name.replace('`', '')}` did not load\n\n"
        f"{_code_block(error)}\n\nThe folder's other pipelines loaded. Fix the file: at the next parse "
        "this DAG goes and the pipeline it declares takes its place.",
        schedule="@once",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        is_paused_upon_creation=False,
        tags=[BROKEN_DECLARATION_TAG],
        default_args={"owner": "ml-platform", "retries": 0},
    ) as dag:
        _declaration_error(error)
    return dag


def _code_block(text: str) -> str:
    """``text`` as a Markdown code block whose fence no backticks in it can close: the error quotes
    the file, and the docs must show it as it is, not render what it holds."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def _one_line(error: str) -> str:
    """The error on one line, cut after its last whole item (``- key: problem (fix: ...)``) that fits,
    else after a whole word."""
    line = " ".join(error.split())
    if len(line) <= DESCRIPTION_LENGTH:
        return line
    cut = line.rfind(" - ", 0, DESCRIPTION_LENGTH - 2)
    if cut <= line.find(" - "):
        cut = line.rfind(" ", 0, DESCRIPTION_LENGTH - 2)
    return line[: cut if cut > 0 else DESCRIPTION_LENGTH - 2] + " …"


def broken_dag_id(path: Path) -> str:
    """The DAG id of a broken declaration file: the prefix and the file's name, made a valid id.

    A name with characters a DAG id refuses gets them replaced and a digest of the whole name added,
    so two files whose names differ only there (``a b.yaml``, ``a_b.yaml``) keep ids of their own.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", path.name)
    if safe != path.name:
        safe += "_" + hashlib.sha256(path.name.encode()).hexdigest()[:8]
    return BROKEN_DECLARATION_PREFIX + safe


@task(task_id=DECLARATION_ERROR)
def _declaration_error(error: str) -> None:
    """Fail with the declaration's error: what the file's run shows in its log and on its task."""
    raise AirflowFailException(error)


def _error(path: Path, exc: Exception) -> str:
    """A declaration's error as its file's DAG shows it, with its file.

    Whatever one file breaks must not hide the other pipelines: an unexpected error is reported with
    its file like a declaration error.
    """
    if isinstance(exc, DeclarationError):
        return str(exc)
    return f"pipeline declaration {path}: {type(exc).__name__}: {exc}"


def _conflicts(declarations: dict[Path, PipelineDeclaration], reserved: dict[str, str]) -> dict[Path, str]:
    """Why each declaration that clashes with another, or with the provider's own DAGs, is refused.

    A dag_id of the provider's own DAGs (``reserved``, by the DAG each names), or one of the broken
    declarations' ids, would silently replace it. A model name (``artifacts.model``, else
    ``dataset.name``) is the registered model, the champion Asset and its pointer, and the artifact
    sets' folder: two pipelines of one model would move one champion between each other's models.
    Neither file is more the model's owner than the other, and taking the first by file name would
    let a new file take the model by its name, so every file of a shared model is refused, naming
    the others; the other pipelines load.
    """
    by_model: dict[str, list[Path]] = {}
    for path, declaration in declarations.items():
        by_model.setdefault(declaration.model_name, []).append(path)
    conflicts = {}
    for path, declaration in declarations.items():
        others = [str(other) for other in by_model[declaration.model_name] if other != path]
        if declaration.dag_id in reserved:
            conflicts[path] = (
                f"pipeline declaration {path}: pipeline.dag_id {declaration.dag_id!r} is the id of the "
                f"provider's own {reserved[declaration.dag_id]} DAG, which it would replace (fix: choose "
                "another dag_id, e.g. with your team's prefix)"
            )
        elif declaration.dag_id.startswith(BROKEN_DECLARATION_PREFIX):
            conflicts[path] = (
                f"pipeline declaration {path}: pipeline.dag_id {declaration.dag_id!r} starts with "
                f"{BROKEN_DECLARATION_PREFIX!r}, which names the DAGs of declaration files that did not "
                "load (fix: choose another dag_id, e.g. with your team's prefix)"
            )
        elif others:
            conflicts[path] = (
                f"pipeline declaration {path}: the model {declaration.model_name!r} (artifacts.model, else "
                f"dataset.name) is also declared by {', '.join(others)}; one model has one registry entry "
                "and one champion per deployment, and neither file is its clear owner, so all of them are "
                "refused (fix: give each pipeline its own artifacts.model)"
            )
    return conflicts
