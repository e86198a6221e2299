"""Print the model name (its artifacts folder) of the declared pipeline a demo runs.

Usage: python include/demo_pipeline.py DAG_ID

The pipeline is looked up in the folder the DAG file reads (``ALIYUN_TRAINING_PIPELINES_DIR``, else
``pipelines/``). Fails, saying what to do, when it is not declared there (listing those that are,
and why others did not load) or when its dataset has no version in the local object store yet.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aliyun_training.declaration import DeclarationError, declaration_files, load_declaration
from aliyun_training.settings import local_paths


def main(dag_id: str) -> str:
    folder = Path(os.environ.get("ALIYUN_TRAINING_PIPELINES_DIR") or "pipelines")
    declared, broken = {}, []
    for path in declaration_files(folder):
        try:
            declaration = load_declaration(path)
        except DeclarationError as exc:
            broken.append(str(exc))
            continue
        declared[declaration.dag_id] = declaration
    if dag_id not in declared:
        names = ", ".join(sorted(declared))
        sys.exit("\n".join([f"PIPELINE={dag_id} is not declared in {folder}/ (declared: {names})", *broken]))
    declaration = declared[dag_id]
    store = Path(os.path.relpath(local_paths().object_store / declaration.dataset.name))
    if not any(path.is_dir() for path in store.glob("*")):
        sys.exit(
            f"{dag_id} trains on the newest version of {declaration.dataset.name} in {store}/, which has "
            f"none (fix: put one there, e.g. {store}/v1/ holding the files your training script reads)"
        )
    return declaration.model_name


if __name__ == "__main__":
    print(main(sys.argv[1]))
