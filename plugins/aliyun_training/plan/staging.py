"""The staging settings both cloud planners check alike: where versions come from and go."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.environments import StagingSettings
    from aliyun_training.plan.inputs import PlanRequest


def staged_source(block: StagingSettings, request: PlanRequest) -> tuple[str, str]:
    """The version's OSS source and the staging root; SpecError names a missing setting.

    The source is the declaration's ``dataset.source_uri``, else the block's (``resolve.dataset_sources``).
    """
    source_uri = request.chosen.source_uri
    if not source_uri:
        raise no_source()
    if not block.target_root:
        raise SpecError(
            "staging.target_root: give where the versions go on CPFS "
            "(fix: an absolute path, e.g. /mnt/cpfs/datasets/cifar10)"
        )
    return source_uri, block.target_root


def no_source() -> SpecError:
    """The error of a staging block whose versions' source is named nowhere."""
    return SpecError(
        "staging.source_uri: give the OSS location of each version, in the environment's staging block "
        "or the declaration's dataset.source_uri (fix: e.g. oss://my-bucket/datasets/{dataset}/{version}/)"
    )


def versions_directory(path: str | None) -> str:
    """``staging.cpfs_path``: the directory holding the versions inside the file system."""
    if not path or not path.startswith("/"):
        raise SpecError(
            "staging.cpfs_path: give the directory holding the versions inside the file system "
            "(fix: an absolute path such as /datasets/cifar10)"
        )
    return path
