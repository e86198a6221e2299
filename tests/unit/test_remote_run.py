"""remote_run builds the run of a kind and mode from its settings, or names the setting that is wrong."""

from __future__ import annotations

import pytest

from aliyun_training.remote import RUNS, remote_run
from aliyun_training.spec import SpecError


@pytest.mark.parametrize(
    ("kind", "mode", "message"),
    [
        ("staging", "direct", "staging.mode: 'direct' is not a staging mode that runs off the worker"),
        ("image", "docker", "image_build.mode: 'docker' is not a image mode that runs off the worker"),
    ],
)
def test_a_mode_without_a_remote_run_names_the_setting_and_the_modes(
    kind: str, mode: str, message: str
) -> None:
    with pytest.raises(SpecError) as excinfo:
        remote_run(kind, mode, {})

    assert str(excinfo.value).startswith(message)
    assert f"(fix: use one of {[m for k, m in RUNS if k == kind]})" in str(excinfo.value)


def test_bad_settings_fail_when_the_run_is_built_naming_the_field() -> None:
    with pytest.raises(SpecError, match="registry_secret"):
        remote_run("image", "kaniko", {"destination": "r.example.com/ml/train:0123456789abcdef"})
