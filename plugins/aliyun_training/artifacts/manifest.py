"""What every part of an artifact set's publication agrees on: the names of its files, the setting
that places it, and the one error that says nothing was published.

Collecting a set (``collect``), uploading it to OSS (``oss_publication``) and recording the
promotion's outcome in it (``outcome``) all read and write these files by name. The names live here,
below all three, so the upload is reached from collecting without the upload reaching back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aliyun_training.staging.oss import OssClientConfig

MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.html"
METRICS_NAME = "metrics.json"
#: The setting that chose the target, named in every refusal.
FIELD = "artifact_root"


class ArtifactError(RuntimeError):
    """The job's outputs are missing or unreadable; nothing was published."""


def require_oss(oss: OssClientConfig | None, field: str) -> OssClientConfig:
    """The OSS settings an ``oss://`` location of ``field`` needs; ArtifactError when none were given."""
    if oss is None:
        raise ArtifactError(f"{field} is an oss:// URI but no OSS connection settings were given")
    return oss
