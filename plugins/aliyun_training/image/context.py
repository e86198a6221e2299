"""The training image's build context and its content-addressed tag.

The tag is a short sha256 of every context file (name and bytes) and every build argument, so the
same inputs always name the same image and any change names a new one. A build is skipped when the
registry already holds the tag: a backfill over many dataset versions builds once, and a rebuild
never overwrites an image a finished run used.

The context is ``include/docker/`` (the Dockerfile), the check script, which lives in the package
as ``aliyun_training/runtime_probe.py`` (the local runtime stage runs the same file) and goes into
the context as ``check_image.py``, and the training code (``include/training``) as ``training/``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aliyun_training.validation import SpecError

#: Hex digits of the sha256 in the tag: 64 bits, no collision across any realistic number of builds.
TAG_LENGTH = 16
CHECK_SCRIPT = "check_image.py"
CODE_PREFIX = "training/"


def build_context(context_dir: str | Path, code_dir: str | Path | None = None) -> dict[str, str]:
    """File name -> text of every file the build sees.

    The directory's files, the check script, and the training code of ``code_dir`` (its ``*.py``
    files) under ``training/``, which the Dockerfile copies to where the job's command runs it.
    """
    from aliyun_training import runtime_probe

    directory = Path(context_dir)
    if not (directory / "Dockerfile").is_file():
        raise SpecError(
            f"context_dir: {directory} holds no Dockerfile (fix: point at include/docker or a copy of it)"
        )
    files = {
        path.relative_to(directory).as_posix(): path.read_text()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != "README.md"
    }
    files[CHECK_SCRIPT] = Path(runtime_probe.__file__).read_text()
    if code_dir is not None:
        for path in sorted(Path(code_dir).rglob("*.py")):
            files[f"{CODE_PREFIX}{path.relative_to(code_dir).as_posix()}"] = path.read_text()
    return files


def image_tag(context: dict[str, str], build_args: dict[str, str]) -> str:
    """Short sha256 of the context files and build arguments, independent of their order."""
    digest = hashlib.sha256()
    for name in sorted(context):
        digest.update(b"file\0" + name.encode() + b"\0" + context[name].encode() + b"\0")
    for key in sorted(build_args):
        digest.update(b"arg\0" + key.encode() + b"\0" + str(build_args[key]).encode() + b"\0")
    return digest.hexdigest()[:TAG_LENGTH]


def image_reference(repository: str, tag: str) -> str:
    """``registry/namespace/repo:tag``; the repository must not carry a tag or digest of its own."""
    last = repository.rsplit("/", 1)[-1]
    if not repository or "/" not in repository or ":" in last or "@" in repository:
        raise SpecError(
            f"image_build.repository: {repository!r} is not a repository "
            "(fix: give registry/namespace/repo without a tag, e.g. "
            "myinst-registry.cn-wulanchabu.cr.aliyuncs.com/ml/train)"
        )
    return f"{repository}:{tag}"


def image_repository(image: str) -> str:
    """The repository of an image reference: ``registry/ns/repo`` of ``registry/ns/repo:tag@sha256:...``.

    A ``:`` after the last ``/`` starts a tag; one before it is the registry's port.
    """
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
