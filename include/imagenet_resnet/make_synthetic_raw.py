"""Generate a small synthetic raw dataset version laid out like ImageNet's, for the prepare stage.

The real ImageNet is too large (and too restricted) to fetch wherever the pipeline is exercised, but
the prepare stage still needs raw images in ImageNet's layout to convert. This writes

    <out>/train/<wnid>/<n>.ppm, <out>/val/<wnid>/<n>.ppm   binary PPM (P6) images
    <out>/LOC_synset_mapping.txt                           "<wnid> <label names>" per class
    <out>/_SUCCESS                                         empty, written last

with the first ImageNet class ids. Each class is a striped pattern at its own angle and tint; each
image shifts the stripes randomly and adds strong noise, so a small ResNet learns the classes within
a few CPU epochs but no single pixel gives the label away. The version appears complete or not at
all: it is written into a hidden sibling directory and renamed into place. ``_SUCCESS`` is the
completion marker a scheduled run waits for (the pipeline's ``dataset.version.marker``); it is
written last so that a copy of the folder that keeps the order (an upload of it to OSS) lands only
once complete too.

Usage: python make_synthetic_raw.py --out DIR [--classes 4] [--train-per-class 100]
           [--val-per-class 25] [--seed 0] [--size 32]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from shards import DataError, publish_directory, write_ppm

#: The first lines of ImageNet's LOC_synset_mapping.txt (ILSVRC 2012 class order).
SYNSETS = [
    ("n01440764", "tench, Tinca tinca"),
    ("n01443537", "goldfish, Carassius auratus"),
    ("n01484850", "great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias"),
    ("n01491361", "tiger shark, Galeocerdo cuvieri"),
    ("n01494475", "hammerhead, hammerhead shark"),
    ("n01496331", "electric ray, crampfish, numbfish, torpedo"),
    ("n01498041", "stingray"),
    ("n01514668", "cock"),
    ("n01514859", "hen"),
    ("n01518878", "ostrich, Struthio camelus"),
]
MAPPING_NAME = "LOC_synset_mapping.txt"
MARKER = "_SUCCESS"
STRIPE_CYCLES = 3.0
STRIPE_AMPLITUDE = 60.0
NOISE_STD = 40.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the CLI; the defaults give 400 train and 100 val images, written in well under a second."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, type=Path, help="directory the raw version becomes")
    parser.add_argument("--classes", type=int, default=4, help=f"number of classes, 2..{len(SYNSETS)}")
    parser.add_argument("--train-per-class", type=int, default=100, help="train images per class")
    parser.add_argument("--val-per-class", type=int, default=25, help="val images per class")
    parser.add_argument("--seed", type=int, default=0, help="seed; the same seed gives identical files")
    parser.add_argument("--size", type=int, default=32, help="image height and width in pixels")
    args = parser.parse_args(argv)
    if not 2 <= args.classes <= len(SYNSETS):
        parser.error(f"--classes must be between 2 and {len(SYNSETS)}")
    if args.train_per_class < 1 or args.val_per_class < 1:
        parser.error("--train-per-class and --val-per-class must be at least 1")
    if args.size < 8:
        parser.error("--size must be at least 8")
    return args


def class_style(classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One stripe angle per class, evenly spread over half a turn, and one random RGB tint per class."""
    angles = np.pi * np.arange(classes) / classes
    tints = rng.uniform(0.3, 1.0, size=(classes, 3))
    return angles, tints


def render(
    label: int, angles: np.ndarray, tints: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw one image of class ``label``: its tinted stripes, randomly shifted, contrasted and noised."""
    coords = np.arange(size, dtype=np.float64) / size
    along = np.cos(angles[label]) * coords[None, :] + np.sin(angles[label]) * coords[:, None]
    phase = rng.uniform(0.0, 2.0 * np.pi)
    stripes = np.sin(2.0 * np.pi * STRIPE_CYCLES * along + phase)
    contrast = rng.uniform(0.7, 1.3)
    image = 128.0 + contrast * STRIPE_AMPLITUDE * stripes[..., None] * tints[label]
    image += rng.normal(0.0, NOISE_STD, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def write_split(
    root: Path,
    split: str,
    per_class: int,
    style: tuple[np.ndarray, np.ndarray],
    size: int,
    rng: np.random.Generator,
) -> None:
    """Write ``per_class`` images of every class into ``<root>/<split>/<wnid>/<n>.ppm``."""
    angles, tints = style
    for label, (wnid, _) in enumerate(SYNSETS[: len(angles)]):
        class_dir = root / split / wnid
        class_dir.mkdir(parents=True)
        for n in range(per_class):
            (class_dir / f"{n:05d}.ppm").write_bytes(write_ppm(render(label, angles, tints, size, rng)))


def generate(out: Path, classes: int, train: int, val: int, seed: int, size: int) -> None:
    """Write both splits, the synset mapping and the marker (last) into a sibling, renamed to ``out``."""
    rng = np.random.default_rng(seed)
    style = class_style(classes, rng)
    with publish_directory(out, MAPPING_NAME) as partial:
        write_split(partial, "train", train, style, size, rng)
        write_split(partial, "val", val, style, size, rng)
        lines = "".join(f"{wnid} {names}\n" for wnid, names in SYNSETS[:classes])
        (partial / MAPPING_NAME).write_text(lines)
        (partial / MARKER).touch()


def main(argv: list[str] | None = None) -> None:
    """Entry point for the CLI."""
    args = parse_args(argv)
    try:
        generate(args.out, args.classes, args.train_per_class, args.val_per_class, args.seed, args.size)
    except DataError as error:
        raise SystemExit(f"error: {error}") from None
    print(
        f"wrote {args.classes} classes x ({args.train_per_class} train + {args.val_per_class} val) "
        f"{args.size}x{args.size} images to {args.out}"
    )


if __name__ == "__main__":
    main()
