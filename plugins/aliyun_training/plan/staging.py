"""The staging settings both cloud planners check alike: where versions come from and go."""

from __future__ import annotations

from aliyun_training.environments import StagingSettings
from aliyun_training.validation import SpecError


def staged_source(block: StagingSettings, dataset: str, version: str) -> tuple[str, str]:
    """The version's OSS source and the staging root; SpecError names a missing setting."""
    if not block.source_uri:
        raise SpecError(
            "staging.source_uri: give the OSS location of each version "
            "(fix: e.g. oss://my-bucket/datasets/{dataset}/{version}/)"
        )
    if not block.target_root:
        raise SpecError(
            "staging.target_root: give where the versions go on CPFS "
            "(fix: an absolute path, e.g. /mnt/cpfs/datasets/cifar10)"
        )
    return block.source_uri.format(dataset=dataset, version=version), block.target_root


def versions_directory(path: str | None) -> str:
    """``staging.cpfs_path``: the directory holding the versions inside the file system."""
    if not path or not path.startswith("/"):
        raise SpecError(
            "staging.cpfs_path: give the directory holding the versions inside the file system "
            "(fix: an absolute path such as /datasets/cifar10)"
        )
    return path
