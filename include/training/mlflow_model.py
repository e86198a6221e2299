"""Save a trained PyTorch model as an MLflow model, the folder a pipeline registers and serves.

The job contract's ``OUTPUT_DIR/mlflow-model``: an ``MLmodel`` file with the PyTorch flavour (and
``python_function``, so ``mlflow.pyfunc.load_model`` loads it), a signature from an input example
and the model's output on it, and the example itself. The network is saved as an exported program
(MLflow's ``pt2`` format, ``torch.export``): loading it runs no pickled code and needs none of the
project's. A pipeline that collects the folder gets a registered version that loads and predicts;
one that does not has its files registered as they are.

MLflow (and the pandas it imports) is imported here only, by the rank that saves.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from pathlib import Path

    from mlflow.models import ModelSignature
    from torch import nn

#: The folder's name under OUTPUT_DIR (the pipeline collects it by this name).
MLFLOW_MODEL_DIR = "mlflow-model"


def save_mlflow_model(model: nn.Module, out_dir: Path, example: np.ndarray) -> Path:
    """Save ``model`` (on the CPU, in eval mode) to ``out_dir/mlflow-model``, replacing any earlier one
    whole: it is written beside the target and renamed into place, so a killed save never leaves a
    folder with an MLmodel but half its data.

    ``example`` is a small batch of the model's input: the export traces the network on it, with
    the batch dimension left free.
    """
    import mlflow.pytorch

    model = model.to("cpu").eval()
    with torch.no_grad():
        output = model(torch.from_numpy(example)).numpy()
    target = out_dir / MLFLOW_MODEL_DIR
    partial = out_dir / f".{MLFLOW_MODEL_DIR}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        mlflow.pytorch.save_model(
            model,
            str(partial),
            signature=tensor_signature(example, output),
            input_example=example,
            serialization_format="pt2",
            # Named, not inferred: inferring loads the model again in a subprocess.
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"numpy=={np.__version__}"],
        )
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def tensor_signature(example: np.ndarray, output: np.ndarray) -> ModelSignature:
    """The signature of a model taking batches shaped like ``example`` and answering like ``output``:
    tensors of their dtypes, with the batch dimension free (-1). Written out rather than inferred:
    MLflow's inference imports scipy, which a training image need not carry."""
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    def spec(batch: np.ndarray) -> Schema:
        return Schema([TensorSpec(batch.dtype, (-1, *batch.shape[1:]))])

    return ModelSignature(inputs=spec(example), outputs=spec(output))
