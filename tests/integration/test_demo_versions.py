"""What ``make demo`` trains on: a new synthetic CIFAR-10 version each time, whose samples are its own.

The generator runs as make runs it (its CLI, no ``--seed``); ``include/demo_version.py`` names the
version make asks it for.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

PROJECT = Path(__file__).resolve().parents[2]
GENERATOR = PROJECT / "include" / "training" / "make_synthetic_cifar10.py"
DEMO_VERSION = PROJECT / "include" / "demo_version.py"


def _generate(out: Path) -> None:
    command = [
        sys.executable,
        str(GENERATOR),
        "--out",
        str(out),
        "--train",
        "500",
        "--test",
        "50",
        "--shards",
        "1",
    ]
    subprocess.run(command, check=True, capture_output=True)


def _digest(version: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(version.glob("*.npz")))).hexdigest()


def _class_means(version: Path) -> np.ndarray:
    with np.load(version / "train-00000.npz") as shard:
        images, labels = shard["images"].astype(np.float64), shard["labels"]
    return np.stack([images[labels == label].mean(axis=0).ravel() for label in range(10)])


@pytest.mark.slow
def test_each_version_has_samples_of_its_own_of_the_same_classes(tmp_path: Path) -> None:
    first, second = tmp_path / "2026-11-22", tmp_path / "2026-11-29"
    _generate(first)
    _generate(second)
    digest = _digest(first)
    _generate(first)

    assert _digest(first) == digest, "the same version is generated identically again"
    assert _digest(second) != digest, "another version's samples differ"
    assert json.loads((second / "meta.json").read_text())["seed"] == zlib.crc32(b"2026-11-29")
    # The same ten classes: each class's mean image is closer to its own class in the other version
    # than any two different classes are.
    means = [_class_means(version) for version in (first, second)]
    correlation = np.corrcoef(means[0], means[1])[:10, 10:]
    others = correlation[~np.eye(10, dtype=bool)]
    assert correlation.diagonal().min() > others.max()


def _next_version(folder: Path) -> str:
    """What ``python include/demo_version.py FOLDER`` prints (its function, imported by path)."""
    spec = importlib.util.spec_from_file_location("demo_version", DEMO_VERSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.next_version(folder))


def test_each_demo_trains_on_the_week_after_the_newest_version(tmp_path: Path) -> None:
    store = tmp_path / "object-store" / "cifar10"
    assert _next_version(store) == "2026-11-22", "the first demo's version"
    for name in ("2026-11-22", "2026-11-29", "latest", "2026-11-01"):
        (store / name).mkdir(parents=True)

    assert _next_version(store) == "2026-12-06"
