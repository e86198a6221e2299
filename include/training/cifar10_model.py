"""The CIFAR-10 example's network, apart from its training: the training script builds it and
evaluate_cifar10.py rebuilds it to load a saved state, neither importing the other's code."""

from __future__ import annotations

import torch
from torch import nn

IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10


class Standardise(nn.Module):
    """Centre and scale each channel by the training data's statistics, kept as buffers: saved in
    the model's state, so whoever loads the model applies the statistics it was trained with."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.reshape(1, -1, 1, 1).clone())
        self.register_buffer("std", std.reshape(1, -1, 1, 1).clone())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean) / self.std


def build_model(mean: torch.Tensor | None = None, std: torch.Tensor | None = None) -> nn.Module:
    """A deliberately small CNN, so an epoch on CPU takes seconds rather than minutes, taking images
    scaled to [0, 1] (``Split``) and standardising them itself. ``mean``/``std`` are the training
    data's; a model about to load a saved state leaves them out (the state holds them).

    BatchNorm keeps SGD at lr 0.05 with momentum from spiking the loss in the first epochs.
    """
    channels = IMAGE_SHAPE[2]
    mean = mean if mean is not None else torch.zeros(channels)
    std = std if std is not None else torch.ones(channels)
    return nn.Sequential(
        Standardise(mean, std),
        nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 64),
        nn.ReLU(),
        nn.Linear(64, NUM_CLASSES),
    )
