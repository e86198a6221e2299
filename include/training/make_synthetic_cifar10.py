"""Generate a synthetic, learnable dataset version shaped like CIFAR-10.

The real CIFAR-10 cannot be downloaded everywhere the pipelines run, but training still has to be
exercised end to end. Each class gets a fixed smooth colour template; every sample is that template,
randomly shifted, re-lit and covered in noise, so a small CNN learns it within a few epochs while the
task is not trivially solved by a single pixel.

Every version shows the same ten classes (the templates are fixed) in samples of its own: the
samples' seed defaults to one derived from the version's name (the --out folder's), so successive
versions differ the way new data does, and the same version is generated identically again.

Usage: python make_synthetic_cifar10.py --out DIR [--train 2048] [--test 512] [--shards 4] [--seed N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import zlib
from pathlib import Path

import numpy as np
from atomic_io import write_atomically

CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
IMAGE_SIZE = 32
CHANNELS = 3
WAVES_PER_CHANNEL = 4
MAX_FREQUENCY = 3
MAX_SHIFT = 4
NOISE_STD = 45.0
#: The seed of the classes' templates: every version shows the same classes.
TEMPLATE_SEED = 0
#: Written last, empty: a scheduled run waits for it (the pipeline's ``dataset.version.marker``).
MARKER = "_SUCCESS"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the CLI; defaults are sized so a CPU-only smoke run of training stays short."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, type=Path, help="directory to write the dataset version into")
    parser.add_argument("--train", type=int, default=2048, help="number of training samples")
    parser.add_argument("--test", type=int, default=512, help="number of test samples")
    parser.add_argument("--shards", type=int, default=4, help="number of train-*.npz shards")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the samples (default: derived from the version, the --out folder's name); "
        "the same seed gives identical files",
    )
    args = parser.parse_args(argv)
    if args.train < 1 or args.test < 1:
        parser.error("--train and --test must be at least 1")
    if not 1 <= args.shards <= args.train:
        parser.error("--shards must be between 1 and --train")
    return args


def make_templates(rng: np.random.Generator) -> np.ndarray:
    """Build one smooth [32, 32, 3] pattern per class from a few low-frequency waves.

    Whole-cycle frequencies make every template periodic, so shifting a sample by rolling its
    template never creates a visible seam that a model could latch onto instead of the pattern.
    """
    coords = np.arange(IMAGE_SIZE, dtype=np.float32)
    shape = (len(CLASSES), CHANNELS, WAVES_PER_CHANNEL)
    freq_y = rng.integers(-MAX_FREQUENCY, MAX_FREQUENCY + 1, size=shape)
    freq_x = rng.integers(1, MAX_FREQUENCY + 1, size=shape)
    phase = rng.uniform(0.0, 2.0 * np.pi, size=shape)
    amplitude = rng.uniform(0.5, 1.0, size=shape)
    wavenumber = 2.0 * np.pi / IMAGE_SIZE
    along_y = freq_y[..., None, None] * coords[:, None]
    along_x = freq_x[..., None, None] * coords[None, :]
    angle = wavenumber * (along_y + along_x) + phase[..., None, None]
    waves = (amplitude[..., None, None] * np.cos(angle)).sum(axis=2)
    waves /= np.abs(waves).max(axis=(2, 3), keepdims=True)
    offsets = rng.uniform(-40.0, 40.0, size=(len(CLASSES), CHANNELS, 1, 1))
    templates = 128.0 + offsets + 70.0 * waves
    return templates.transpose(0, 2, 3, 1).astype(np.float32)


def make_samples(
    rng: np.random.Generator, templates: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw balanced, shuffled labels and render their noisy, shifted, re-lit images."""
    labels = rng.permutation(np.arange(count) % len(CLASSES)).astype(np.int64)
    shift_y, shift_x = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=(2, count))
    pixels = np.arange(IMAGE_SIZE)
    rows = (pixels[None, :] - shift_y[:, None]) % IMAGE_SIZE
    cols = (pixels[None, :] - shift_x[:, None]) % IMAGE_SIZE
    images = templates[labels[:, None, None], rows[:, :, None], cols[:, None, :]]
    contrast = rng.uniform(0.7, 1.3, size=(count, 1, 1, 1)).astype(np.float32)
    brightness = rng.normal(0.0, 15.0, size=(count, 1, 1, 1)).astype(np.float32)
    noise = rng.normal(0.0, NOISE_STD, size=images.shape).astype(np.float32)
    images = (images - 128.0) * contrast + 128.0 + brightness + noise
    return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels


def write_npz(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Store one split; uncompressed because noisy pixels barely compress and saving stays fast."""
    write_atomically(path, lambda handle: np.savez(handle, images=images, labels=labels))


def write_meta(out: Path, train: int, test: int, seed: int) -> None:
    """Describe the version so training can reject data it does not understand."""
    meta = {
        "format": "cifar10-npz",
        "classes": CLASSES,
        "train_samples": train,
        "test_samples": test,
        "seed": seed,
        "image_shape": [IMAGE_SIZE, IMAGE_SIZE, CHANNELS],
    }
    payload = (json.dumps(meta, indent=2) + "\n").encode()
    write_atomically(out / "meta.json", lambda handle: handle.write(payload))


def generate(out: Path, train: int, test: int, shards: int, seed: int) -> None:
    """Write the train shards, the test split, meta.json and the empty marker last.

    An earlier marker is removed first: until the new one is written, a run waiting for the version
    must not take a folder being rewritten for a complete one.
    """
    templates = make_templates(np.random.default_rng(TEMPLATE_SEED))
    rng = np.random.default_rng(seed)
    train_images, train_labels = make_samples(rng, templates, train)
    test_images, test_labels = make_samples(rng, templates, test)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    bounds = np.linspace(0, train, shards + 1).astype(int)
    for index, (start, stop) in enumerate(itertools.pairwise(bounds)):
        write_npz(out / f"train-{index:05d}.npz", train_images[start:stop], train_labels[start:stop])
    write_npz(out / "test.npz", test_images, test_labels)
    write_meta(out, train, test, seed)
    (out / MARKER).touch()


def version_seed(version: str) -> int:
    """The samples' seed of a version by its name (CRC-32: stable across processes and machines,
    unlike ``hash``)."""
    return zlib.crc32(version.encode())


def main(argv: list[str] | None = None) -> None:
    """Entry point for the CLI."""
    args = parse_args(argv)
    seed = version_seed(args.out.name) if args.seed is None else args.seed
    generate(args.out, args.train, args.test, args.shards, seed)
    print(f"wrote {args.train} train ({args.shards} shards) and {args.test} test samples to {args.out}")


if __name__ == "__main__":
    main()
