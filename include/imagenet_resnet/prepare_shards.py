r"""Convert a raw ImageNet-style version into WebDataset tar shards: the pipeline's prepare stage.

The bare-metal ImageNet recipe turns the raw class folders into TFRecord shards before training,
because millions of small files read badly from shared storage; this stage does the same with tar
shards that the standard library reads (no TensorFlow):

    python prepare_shards.py --raw "$RAW_DIR" --out "$OUTPUT_DIR" [--shard-size 256] [--seed 0]

The raw version holds ``train/<wnid>/*.ppm`` and ``val/<wnid>/*.ppm`` (binary PPM, one image size),
optionally ``LOC_synset_mapping.txt``; hidden files are ignored. Class indices follow the sorted
wnids, as in ImageNet. Train samples are shuffled once with ``--seed`` (streaming readers only
shuffle within a buffer, so class-sorted shards would train badly); val stays sorted. Output: see
``shards.py``. The same raw version and seed give byte-identical shards and shards.json.

Everything is written into a hidden sibling of the output and renamed into place at the end, so a
killed run never leaves a half-written version; an earlier complete output (it has shards.json) is
replaced, any other non-empty directory refused. A bad input or output exits with status 2 and a
message naming the path. The stage is one process: started on several replicas, every one but
RANK 0 exits at once with status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from shards import (
    FORMAT,
    IMAGE_SUFFIX,
    INDEX_NAME,
    DataError,
    Sample,
    publish_directory,
    read_ppm,
    write_shards,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

SPLITS = ("train", "val")
MAPPING_NAME = "LOC_synset_mapping.txt"
LAYOUT_FIX = "--raw (or RAW_DIR) must point at a raw version laid out as train/<wnid>/*.ppm, val/<wnid>/*.ppm"
#: Exit status for input or output the stage refuses (argparse uses 2 for bad arguments too).
REFUSED = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the CLI; input and output default to env vars, so a job spec sets them once."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--raw", default=os.environ.get("RAW_DIR"), help="raw version dir (default: $RAW_DIR)"
    )
    parser.add_argument(
        "--out", default=os.environ.get("OUTPUT_DIR"), help="shard version dir (default: $OUTPUT_DIR)"
    )
    parser.add_argument("--shard-size", type=int, default=256, help="samples per shard")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train split's one-off shuffle")
    args = parser.parse_args(argv)
    if not args.raw:
        parser.error("--raw is required (or set RAW_DIR)")
    if not args.out:
        parser.error("--out is required (or set OUTPUT_DIR)")
    if args.shard_size < 1:
        parser.error("--shard-size must be at least 1")
    return args


def visible(directory: Path) -> list[Path]:
    """A directory's entries in sorted order, without hidden ones (.DS_Store, editor swap files)."""
    return sorted(path for path in directory.iterdir() if not path.name.startswith("."))


def find_classes(raw: Path) -> list[str]:
    """The sorted class folders of train/, checked against LOC_synset_mapping.txt when it exists."""
    if not raw.is_dir():
        raise DataError(f"raw dir {raw} does not exist; {LAYOUT_FIX}")
    train = raw / "train"
    if not train.is_dir():
        raise DataError(f"{raw} has no train/ directory; {LAYOUT_FIX}")
    classes = [path.name for path in visible(train) if path.is_dir()]
    if not classes:
        raise DataError(f"{train} has no class folders; {LAYOUT_FIX}")
    mapping = raw / MAPPING_NAME
    if mapping.is_file():
        known = {line.split(maxsplit=1)[0] for line in mapping.read_text().splitlines() if line.strip()}
        unknown = [wnid for wnid in classes if wnid not in known]
        if unknown:
            raise DataError(
                f"{train}: folders {unknown} are not classes in {mapping}; remove them or list them"
            )
    return classes


def list_split(raw: Path, split: str, classes: list[str]) -> list[tuple[Path, int]]:
    """Every image file of one split with its class index, in sorted (class, file name) order."""
    split_dir = raw / split
    if not split_dir.is_dir():
        raise DataError(f"{raw} has no {split}/ directory; {LAYOUT_FIX}")
    files: list[tuple[Path, int]] = []
    for class_dir in visible(split_dir):
        if class_dir.name not in classes:
            raise DataError(f"{class_dir} is not a class of train/; every {split}/ folder needs a train/ one")
        for path in visible(class_dir):
            if path.suffix != IMAGE_SUFFIX or not path.is_file():
                raise DataError(f"{path}: only binary PPM files (*.ppm) are supported; convert or remove it")
            files.append((path, classes.index(class_dir.name)))
    if not files:
        raise DataError(f"{split_dir} holds no images; {LAYOUT_FIX}")
    return files


def decode(files: list[tuple[Path, int]], shape: list[tuple[int, ...]]) -> Iterator[Sample]:
    """Decode each file in turn, refusing unreadable ones and any size other than the first image's."""
    for path, label in files:
        try:
            image = read_ppm(path.read_bytes())
        except (OSError, DataError) as error:
            raise DataError(
                f"{path}: unreadable image ({error}); re-export it as binary PPM or remove it"
            ) from None
        if not shape:
            shape.append(image.shape)
        if image.shape != shape[0]:
            raise DataError(f"{path}: image is {list(image.shape)}, others {list(shape[0])}; resize it first")
        yield Sample(f"{path.parent.name}_{path.stem}", image, label)


def prepare(raw: Path, out: Path, shard_size: int, seed: int) -> dict:
    """Write both splits' shards and shards.json (last) into a sibling of ``out``, then publish it."""
    classes = find_classes(raw)
    listed = {split: list_split(raw, split, classes) for split in SPLITS}
    order = np.random.default_rng(seed).permutation(len(listed["train"]))
    listed["train"] = [listed["train"][i] for i in order]
    shape: list[tuple[int, ...]] = []
    with publish_directory(out, INDEX_NAME) as partial:
        splits = {
            split: {
                "shards": write_shards(partial, split, decode(files, shape), shard_size),
                "samples": len(files),
            }
            for split, files in listed.items()
        }
        index = {"format": FORMAT, "classes": classes, "image_shape": list(shape[0]), "splits": splits}
        (partial / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    """Entry point: one replica does the work, refusals exit 2 with the message on stderr."""
    args = parse_args(argv)
    rank = os.environ.get("RANK", "0")
    if rank != "0":
        print(f"RANK={rank}: only RANK 0 prepares the shards; nothing to do", flush=True)
        return 0
    try:
        index = prepare(Path(args.raw), Path(args.out), args.shard_size, args.seed)
    except (DataError, OSError) as error:  # OSError: a raw file or the output place is not accessible
        print(f"error: {error}", file=sys.stderr)
        return REFUSED
    counts = ", ".join(
        f"{split} {entry['samples']} in {len(entry['shards'])}" for split, entry in index["splits"].items()
    )
    print(f"wrote {len(index['classes'])} classes ({counts} shards) to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
