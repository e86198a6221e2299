"""Declared pipelines as DAGs: :func:`training_pipeline` builds one, :func:`load_pipelines` a folder's."""

from aliyun_training.pipelines.factory import training_pipeline
from aliyun_training.pipelines.folder import load_pipelines

__all__ = ["load_pipelines", "training_pipeline"]
