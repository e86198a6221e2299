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

from aliyun_training.declaration import DeclarationError, declaration_files, load_declaration

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
    for path in declaration_files(Path(folder)):
        try:
            declaration = load_declaration(path)
            if declaration.dag_id in dags:
                raise DeclarationError(
                    f"pipeline declaration {path}: pipeline.dag_id {declaration.dag_id!r} is declared twice "
                    "(fix: give each pipeline its own dag_id)"
                )
            dags[declaration.dag_id] = training_pipeline(declaration, environment_dir=environment_dir)
            watched += watched_backends(declaration, environment_dir)
        except DeclarationError as exc:
            errors.append(str(exc))
        except Exception as exc:
            # Whatever one file breaks must not hide the other pipelines (a DAG file that raises loses
            # all its DAGs): it is reported with its file like a declaration error.
            errors.append(f"pipeline declaration {path}: {type(exc).__name__}: {exc}")
    if watched:
        dags[RECONCILER_DAG_ID] = reconciler_dag(watched)
    if errors:
        invalid = InvalidDeclarations(dag_id=INVALID_DECLARATIONS_DAG_ID, schedule=None)
        invalid.errors = errors
        dags[INVALID_DECLARATIONS_DAG_ID] = invalid
    return dags
