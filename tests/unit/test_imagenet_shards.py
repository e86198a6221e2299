"""The ImageNet-style example's shard format, its prepare stage and how training finds its rank."""

from __future__ import annotations

import importlib
import io
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "include" / "imagenet_resnet"


def _import(name: str) -> ModuleType:
    """Import a script of the example; they import each other by name, as when run by path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        return importlib.import_module(name)


shards = _import("shards")
prepare_shards = _import("prepare_shards")
make_synthetic_raw = _import("make_synthetic_raw")

#: The training script imports torch (about 2 s of CPU per process): its tests run on the xdist
#: worker of the other tests that import it, not on every worker that collects this module.
IMPORTS_TORCH = pytest.mark.xdist_group("torch")


@pytest.fixture
def train_resnet() -> ModuleType:
    """The training script, imported by the tests that use it only."""
    return _import("train_resnet")


def _image(seed: int, height: int = 6, width: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _raw(root: Path, classes: int = 3, train: int = 7, val: int = 2) -> Path:
    raw = root / "raw"
    make_synthetic_raw.generate(raw, classes, train, val, seed=1, size=8)
    return raw


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_ppm_round_trips_and_accepts_header_comments() -> None:
    image = _image(0)

    assert np.array_equal(shards.read_ppm(shards.write_ppm(image)), image)
    commented = b"P6\n# made by hand\n5 6\n# max\n255\n" + image.tobytes()
    assert np.array_equal(shards.read_ppm(commented), image)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"P3\n1 1\n255\n1 2 3", "not a binary PPM"),
        (b"P6\n2 2\n255\n" + bytes(5), "needs 12"),
        (b"P6\n1 1\n65535\n" + bytes(6), "maxval"),
        (b"P6\n1", "truncated"),
    ],
)
def test_read_ppm_refuses_what_it_cannot_decode(data: bytes, message: str) -> None:
    with pytest.raises(shards.DataError, match=message):
        shards.read_ppm(data)


def test_shards_round_trip_in_order_with_pairs_per_key(tmp_path: Path) -> None:
    samples = [shards.Sample(f"n0_{i}", _image(i), i % 3) for i in range(5)]

    names = shards.write_shards(tmp_path, "train", samples, shard_size=2)

    assert names == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
    with tarfile.open(tmp_path / names[0]) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == ["n0_0.ppm", "n0_0.cls", "n0_1.ppm", "n0_1.cls"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    back = list(shards.read_samples(tmp_path / name for name in names))
    assert [(s.key, s.label) for s in back] == [(s.key, s.label) for s in samples]
    assert all(np.array_equal(a.image, b.image) for a, b in zip(back, samples, strict=True))


def test_read_samples_refuses_a_sample_without_its_label(tmp_path: Path) -> None:
    shard = tmp_path / "train-000000.tar"
    with tarfile.open(shard, "w") as archive:
        payload = shards.write_ppm(_image(0))
        info = tarfile.TarInfo("lonely.ppm")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))

    with pytest.raises(shards.DataError, match=r"'lonely' has \['.ppm'\], needs .ppm and .cls"):
        list(shards.read_samples([shard]))


def test_prepare_is_byte_identical_on_the_same_raw_version(tmp_path: Path) -> None:
    raw = _raw(tmp_path)

    assert prepare_shards.main(["--raw", str(raw), "--out", str(tmp_path / "a"), "--shard-size", "8"]) == 0
    assert prepare_shards.main(["--raw", str(raw), "--out", str(tmp_path / "b"), "--shard-size", "8"]) == 0

    first = _files(tmp_path / "a")
    assert first == _files(tmp_path / "b")
    assert sorted(first) == [
        "shards.json",
        "train-000000.tar",
        "train-000001.tar",
        "train-000002.tar",
        "val-000000.tar",
    ]
    index = shards.read_index(tmp_path / "a", ("train", "val"))
    assert index["classes"] == ["n01440764", "n01443537", "n01484850"]
    assert index["image_shape"] == [8, 8, 3]
    assert {split: entry["samples"] for split, entry in index["splits"].items()} == {"train": 21, "val": 6}
    train = list(shards.read_samples(tmp_path / "a" / name for name in index["splits"]["train"]["shards"]))
    labels = [sample.label for sample in train]
    assert sorted(labels) == [0] * 7 + [1] * 7 + [2] * 7
    assert labels != sorted(labels), "train samples must be shuffled across shards, not class-sorted"
    val = list(shards.read_samples([tmp_path / "a" / "val-000000.tar"]))
    assert [s.key for s in val][:2] == ["n01440764_00000", "n01440764_00001"]


def test_prepare_replaces_its_own_earlier_output_but_refuses_a_foreign_directory(tmp_path: Path) -> None:
    raw = _raw(tmp_path)
    out = tmp_path / "out"
    assert prepare_shards.main(["--raw", str(raw), "--out", str(out), "--shard-size", "100"]) == 0
    assert prepare_shards.main(["--raw", str(raw), "--out", str(out), "--shard-size", "4"]) == 0
    assert len(shards.read_index(out, ("train",))["splits"]["train"]["shards"]) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw"], "no partial or old sibling left"

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert prepare_shards.main(["--raw", str(raw), "--out", str(foreign)]) == 2
    assert _files(foreign) == {"notes.txt": b"keep me"}


def test_prepare_refuses_a_raw_dir_without_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _raw(tmp_path)
    (raw / "train").rename(raw / "training")

    assert prepare_shards.main(["--raw", str(raw), "--out", str(tmp_path / "out")]) == 2

    error = capsys.readouterr().err
    assert f"{raw} has no train/ directory" in error and "train/<wnid>/*.ppm" in error
    assert not (tmp_path / "out").exists()


def test_prepare_refuses_an_unreadable_image_and_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _raw(tmp_path)
    broken = raw / "val" / "n01443537" / "00001.ppm"
    broken.write_bytes(b"\xff\xd8\xff\xe0 a JPEG, not a PPM")

    assert prepare_shards.main(["--raw", str(raw), "--out", str(tmp_path / "out")]) == 2

    error = capsys.readouterr().err
    assert f"{broken}: unreadable image" in error and "re-export it as binary PPM" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"], "neither the output nor a partial"


def test_prepare_refuses_images_of_different_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _raw(tmp_path)
    odd = raw / "train" / "n01484850" / "00003.ppm"
    odd.write_bytes(shards.write_ppm(_image(0, 9, 8)))

    assert prepare_shards.main(["--raw", str(raw), "--out", str(tmp_path / "out")]) == 2
    assert f"{odd}: image is [9, 8, 3], others [8, 8, 3]" in capsys.readouterr().err


def test_prepare_does_nothing_on_replicas_other_than_rank_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")

    assert prepare_shards.main(["--raw", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out").exists()


def test_synthetic_raw_version_has_imagenet_layout(tmp_path: Path) -> None:
    raw = _raw(tmp_path, classes=2, train=3, val=1)

    assert (raw / "LOC_synset_mapping.txt").read_text().splitlines() == [
        "n01440764 tench, Tinca tinca",
        "n01443537 goldfish, Carassius auratus",
    ]
    assert sorted(p.relative_to(raw).as_posix() for p in raw.glob("*/*/*.ppm")) == [
        *(f"train/{wnid}/{n:05d}.ppm" for wnid in ("n01440764", "n01443537") for n in range(3)),
        "val/n01440764/00000.ppm",
        "val/n01443537/00000.ppm",
    ]
    assert shards.read_ppm((raw / "val/n01440764/00000.ppm").read_bytes()).shape == (8, 8, 3)


TORCHRUN_ENV = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "none"}
MPI_ENV = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "16",
    "OMPI_COMM_WORLD_LOCAL_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "8",
    # What DLC and ACK set per node: they count nodes, not processes.
    "RANK": "0",
    "WORLD_SIZE": "2",
}


@IMPORTS_TORCH
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (TORCHRUN_ENV, (3, 4, 1, "torchrun")),
        (MPI_ENV, (5, 16, 5, "mpirun")),
        ({**MPI_ENV, **TORCHRUN_ENV}, (3, 4, 1, "torchrun")),  # one torchrun per node, started by mpirun
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, (0, 1, 0, "torchrun")),
    ],
)
def test_placement_comes_from_torchrun_or_open_mpi(
    train_resnet: ModuleType, env: dict[str, str], expected: tuple
) -> None:
    placement = train_resnet.placement_from_env(env)

    assert (placement.rank, placement.world_size, placement.local_rank, placement.launcher) == expected


@IMPORTS_TORCH
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "missing LOCAL_RANK; launch this script with torchrun or mpirun"),
        ({}, "missing RANK, WORLD_SIZE, LOCAL_RANK"),
        ({**TORCHRUN_ENV, "RANK": "4"}, r"RANK=4 must lie in 0..WORLD_SIZE-1 \(3\)"),
        ({**MPI_ENV, "OMPI_COMM_WORLD_SIZE": "x"}, "OMPI_COMM_WORLD_SIZE='x' is not"),
    ],
)
def test_placement_refuses_an_incomplete_or_inconsistent_launch(
    train_resnet: ModuleType, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        train_resnet.placement_from_env(env)


@IMPORTS_TORCH
def test_rendezvous_is_torchruns_own_or_master_addr_for_mpirun(train_resnet: ModuleType) -> None:
    def url(env: dict[str, str]) -> str:
        return train_resnet.rendezvous_url(env, train_resnet.placement_from_env(env))

    assert url(TORCHRUN_ENV) == "env://"
    assert (
        url({**MPI_ENV, "MASTER_ADDR": "job-worker-0", "MASTER_PORT": "23456"}) == "tcp://job-worker-0:23456"
    )
    assert url({**MPI_ENV, "MASTER_ADDR": "fd00::1"}) == "tcp://[fd00::1]:29500"
    one_node = {**MPI_ENV, "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "2"}
    assert url(one_node) == "tcp://127.0.0.1:29500"
    with pytest.raises(ValueError, match="mpirun across nodes needs MASTER_ADDR"):
        url(MPI_ENV)


@IMPORTS_TORCH
def test_each_rank_trains_on_a_disjoint_equal_share_and_scores_all_of_val(
    train_resnet: ModuleType, tmp_path: Path
) -> None:
    samples = [shards.Sample(f"k{i}", _image(i, 4, 4), i) for i in range(10)]
    names = shards.write_shards(tmp_path, "s", samples, shard_size=4)
    entry = {"shards": names, "samples": 10}

    def labels(rank: int, drop_remainder: bool) -> list[int]:
        placement = train_resnet.Placement(rank, 3, 0, "torchrun")
        return train_resnet.load_split(tmp_path, entry, placement, drop_remainder).labels.tolist()

    assert [labels(rank, True) for rank in range(3)] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert [labels(rank, False) for rank in range(3)] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(shards.DataError, match=r"hold 10 samples, shards\.json promises 12"):
        train_resnet.load_split(
            tmp_path, {**entry, "samples": 12}, train_resnet.Placement(0, 3, 0, "x"), True
        )
