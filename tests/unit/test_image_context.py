"""The build context and its content-addressed tag: same inputs, same tag; any change, a new tag."""

from __future__ import annotations

from pathlib import Path

import pytest

from aliyun_training import runtime_probe
from aliyun_training.image.context import CHECK_SCRIPT, TAG_LENGTH, build_context, image_reference, image_tag
from aliyun_training.validation import SpecError

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONTEXT = {"Dockerfile": "ARG BASE_IMAGE=base:1\nFROM ${BASE_IMAGE}\n", CHECK_SCRIPT: "print('{}')\n"}
ARGS = {"BASE_IMAGE": "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime"}


def test_the_tag_is_a_short_sha256_and_stable_for_identical_inputs():
    tag = image_tag(CONTEXT, ARGS)

    assert len(tag) == TAG_LENGTH and int(tag, 16) >= 0
    assert image_tag(dict(reversed(list(CONTEXT.items()))), dict(ARGS)) == tag


@pytest.mark.parametrize(
    ("context", "args"),
    [
        ({**CONTEXT, "Dockerfile": CONTEXT["Dockerfile"] + "RUN true\n"}, ARGS),
        ({**CONTEXT, CHECK_SCRIPT: "print('[]')\n"}, ARGS),
        ({**CONTEXT, "extra.txt": ""}, ARGS),
        ({"Dockerfile.renamed": CONTEXT["Dockerfile"], CHECK_SCRIPT: CONTEXT[CHECK_SCRIPT]}, ARGS),
        (CONTEXT, {"BASE_IMAGE": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}),
        (CONTEXT, {**ARGS, "NCCL_TESTS": "0"}),
        (CONTEXT, {}),
    ],
)
def test_any_changed_input_changes_the_tag(context, args):
    assert image_tag(context, args) != image_tag(CONTEXT, ARGS)


def test_a_name_and_content_boundary_cannot_be_shifted_without_changing_the_tag():
    assert image_tag({"ab": "c"}, {}) != image_tag({"a": "bc"}, {})
    assert image_tag({}, {"A": "B=C"}) != image_tag({}, {"A=B": "C"})


def test_the_project_context_holds_the_dockerfile_and_the_check_script():
    files = build_context(PROJECT_DIR / "include" / "docker")

    assert "FROM" in files["Dockerfile"]
    assert files[CHECK_SCRIPT] == Path(runtime_probe.__file__).read_text()
    assert "README.md" not in files
    assert image_tag(files, {}) == image_tag(build_context(PROJECT_DIR / "include" / "docker"), {})


def test_a_context_without_a_dockerfile_names_the_field(tmp_path):
    with pytest.raises(SpecError, match=r"^context_dir: .* holds no Dockerfile \(fix: "):
        build_context(tmp_path)


def test_a_changed_context_file_changes_the_tag(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM base:1\n")
    before = image_tag(build_context(tmp_path), {})
    (tmp_path / "Dockerfile").write_text("FROM base:2\n")

    assert image_tag(build_context(tmp_path), {}) != before


def test_the_reference_joins_repository_and_tag():
    repository = "ml-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train"
    assert image_reference(repository, "0123456789abcdef") == f"{repository}:0123456789abcdef"


@pytest.mark.parametrize(
    "repository", ["", "train", "registry.example.com/ml/train:1", "r.example.com/x@sha256:ab"]
)
def test_a_repository_with_a_tag_or_without_a_registry_is_rejected(repository):
    with pytest.raises(SpecError, match=r"^image_build.repository: .*\(fix: give registry/namespace/repo"):
        image_reference(repository, "0123456789abcdef")
