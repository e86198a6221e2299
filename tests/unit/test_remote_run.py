"""remote_run builds the run of a kind and mode from its settings, or names the setting that is wrong."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from aliyun_training.image.acr import AcrBuilder
from aliyun_training.image.kaniko import KanikoBuilder
from aliyun_training.remote_runs import remote_run, remote_runs, runs_by_mode
from aliyun_training.staging.dataflow import DataFlowStager
from aliyun_training.staging.pod import PodStager
from aliyun_training.validation import SpecError

PLUGINS_DIR = Path(__file__).resolve().parents[2] / "plugins"


@pytest.mark.parametrize(
    ("kind", "mode", "message", "modes"),
    [
        (
            "staging",
            "direct",
            "staging.mode: 'direct' is not a staging mode that runs off the worker",
            ["dataflow", "pod"],
        ),
        (
            "image",
            "docker",
            "image_build.mode: 'docker' is not a image mode that runs off the worker",
            ["acr", "kaniko"],
        ),
    ],
)
def test_a_mode_without_a_remote_run_names_the_setting_and_the_modes(
    kind: str, mode: str, message: str, modes: list[str]
) -> None:
    with pytest.raises(SpecError) as excinfo:
        remote_run(kind, mode, {})

    assert str(excinfo.value).startswith(message)
    assert f"(fix: use one of {modes})" in str(excinfo.value)


def test_bad_settings_fail_when_the_run_is_built_naming_the_field() -> None:
    with pytest.raises(SpecError, match="registry_secret"):
        remote_run("image", "kaniko", {"destination": "r.example.com/ml/train:0123456789abcdef"})


def test_every_run_is_found_under_its_kind_and_the_mode_it_names() -> None:
    assert remote_runs("staging") == {"pod": PodStager, "dataflow": DataFlowStager}
    assert remote_runs("image") == {"kaniko": KanikoBuilder, "acr": AcrBuilder}
    assert (PodStager.mode, DataFlowStager.mode) == ("pod", "dataflow")
    assert (KanikoBuilder.mode, AcrBuilder.mode) == ("kaniko", "acr")


def test_a_mode_taken_by_one_run_cannot_be_taken_by_another() -> None:
    class AnotherStager(PodStager):
        pass

    taken = re.escape(
        "staging mode 'pod' is taken by aliyun_training.staging.pod.PodStager; "
        f"{__name__}.{AnotherStager.__qualname__} cannot take it"
    )
    with pytest.raises(ValueError, match=taken):
        runs_by_mode("staging", (PodStager, AnotherStager))

    assert remote_runs("staging")["pod"] is PodStager


@pytest.mark.slow
def test_finding_every_run_imports_no_cloud_sdk() -> None:
    """The scheduler and DAG parsing build runs (configure's checks): that must cost no SDK import."""
    code = (
        f"import sys; sys.path.insert(0, {str(PLUGINS_DIR)!r})\n"
        "from aliyun_training.remote_runs import KINDS, remote_runs\n"
        "assert all(remote_runs(kind) for kind in KINDS)\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(r for r in roots if r.startswith(('alibabacloud_', 'oss2', 'kubernetes'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)

    assert done.stdout.strip() == "[]"
