"""A folder of declarations, as one DAG file loads it: every valid one a DAG, every broken one reported.

Airflow records an import error per DAG file, and a DAG file that raises loses all its DAGs. So
the declarations are validated one by one: the valid ones become DAGs, and the broken ones are
gathered into :class:`InvalidDeclarations`, a DAG that fails Airflow's own validation with every
broken file, key path and fix in its message, which the UI then shows as the DAG file's import error
while the other pipelines load.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG

from aliyun_training.declaration import (
    DeclarationError,
    PipelineDeclaration,
    declaration_files,
    load_declaration,
)

#: The dag_id of the stand-in that carries broken declarations' errors; it is never scheduled.
INVALID_DECLARATIONS_DAG_ID = "invalid_pipeline_declarations"


class InvalidDeclarations(DAG):
    """A DAG that fails validation with the errors of the declarations that did not load."""

    errors: list[str]

    def validate(self) -> None:
        raise DeclarationError(
            f"{len(self.errors)} pipeline declaration(s) did not load; the other pipelines did:\n"
            + "\n".join(self.errors)
        )


def load_pipelines(folder: str | Path, environment_dir: str | Path | None = None) -> dict[str, DAG]:
    """A DAG per declaration in ``folder`` by dag_id, the reconciler of their backends' jobs, and one
    :class:`InvalidDeclarations` if any failed.

    A DAG file assigns the result to its globals (``globals().update(load_pipelines(...))``), which
    is where Airflow looks for DAGs.
    """
    from aliyun_training.pipelines.factory import training_pipeline, watched_backends
    from aliyun_training.pipelines.reconciler import RECONCILER_DAG_ID, reconciler_dag

    dags: dict[str, DAG] = {}
    watched = []
    errors: list[str] = []
    declarations: dict[Path, PipelineDeclaration] = {}
    for path in declaration_files(Path(folder)):
        try:
            declarations[path] = load_declaration(path)
        except Exception as exc:
            errors.append(_error(path, exc))
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
            errors.append(_error(path, exc))
    if watched:
        dags[RECONCILER_DAG_ID] = reconciler_dag(watched)
    if errors:
        invalid = InvalidDeclarations(dag_id=INVALID_DECLARATIONS_DAG_ID, schedule=None)
        invalid.errors = errors
        dags[INVALID_DECLARATIONS_DAG_ID] = invalid
    return dags


def _error(path: Path, exc: Exception) -> str:
    """A declaration's error as the import error lists it, with its file.

    Whatever one file breaks must not hide the other pipelines (a DAG file that raises loses all
    its DAGs): an unexpected error is reported with its file like a declaration error.
    """
    if isinstance(exc, DeclarationError):
        return str(exc)
    return f"pipeline declaration {path}: {type(exc).__name__}: {exc}"


def _conflicts(declarations: dict[Path, PipelineDeclaration], reserved: dict[str, str]) -> dict[Path, str]:
    """Why each declaration that clashes with another, or with the provider's own DAGs, is refused.

    A dag_id of the provider's own DAGs (``reserved``, by the DAG each names) would silently replace
    it. A model name (``artifacts.model``, else ``dataset.name``) is the registered model, the
    champion Asset and its pointer, and the artifact sets' folder: two pipelines of one model would
    move one champion between each other's models. Neither file is more the model's owner than the
    other, and taking the first by file name would let a new file take the model by its name, so
    every file of a shared model is refused, naming the others; the other pipelines load.
    """
    reserved = {**reserved, INVALID_DECLARATIONS_DAG_ID: "broken declarations' stand-in"}
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
        elif others:
            conflicts[path] = (
                f"pipeline declaration {path}: the model {declaration.model_name!r} (artifacts.model, else "
                f"dataset.name) is also declared by {', '.join(others)}; one model has one registry entry "
                "and one champion per deployment, and neither file is its clear owner, so all of them are "
                "refused (fix: give each pipeline its own artifacts.model)"
            )
    return conflicts
