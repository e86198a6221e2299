"""Where an object lives in OSS: ``oss://`` URIs and the endpoints of a region.

Rules only (no oss2, no Airflow, no I/O), so the environment files, the DLC backend's mounts, the
OSS hook and the staging pod's CLI all check a URI and name an endpoint the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

from aliyun_training.validation import SpecError


@dataclass(frozen=True)
class OssLocation:
    """``oss://bucket/prefix/``: the prefix always ends with ``/`` so ``v1`` never matches ``v10``.

    ``bucket`` is the URI's host as written: the bucket, or ``<bucket>.<endpoint>`` where the URI
    names the bucket's endpoint (DLC mounts do).
    """

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"oss://{self.bucket}/{self.prefix}"

    @property
    def bucket_name(self) -> str:
        """The bucket alone (bucket names have no dot)."""
        return self.bucket.partition(".")[0]

    @property
    def endpoint(self) -> str:
        """The endpoint the URI names after the bucket, or ``""``."""
        return self.bucket.partition(".")[2]


def parse_oss_uri(uri: str, field: str = "source_uri") -> OssLocation:
    """Split and check an ``oss://bucket/prefix/`` URI; ``field`` names it in errors."""
    parsed = urlparse(uri)
    prefix = parsed.path.lstrip("/")
    if parsed.scheme != "oss" or not parsed.netloc:
        raise SpecError(f"{field}: {uri!r} is not an OSS URI (fix: use oss://bucket/prefix/)")
    if parsed.query or parsed.fragment or parsed.params:
        # urlparse would cut the prefix at '?', '#' or ';' and silently stage a wider folder.
        raise SpecError(f"{field}: {uri!r} contains '?', '#' or ';' (fix: rename the folder without them)")
    if not prefix.strip("/"):
        raise SpecError(
            f"{field}: {uri!r} names a whole bucket (fix: point at the version's folder, "
            "e.g. oss://bucket/cifar10/v1/)"
        )
    if ".." in PurePosixPath(prefix).parts:
        raise SpecError(f"{field}: {uri!r} contains '..' (fix: use the folder's plain key prefix)")
    location = OssLocation(parsed.netloc, prefix.rstrip("/") + "/")
    if not _BUCKET_NAME.fullmatch(location.bucket_name):
        raise SpecError(
            f"{field}: {location.bucket_name!r} in {uri!r} is not an OSS bucket name (fix: bucket names "
            "are 3 to 63 lower-case letters, digits and hyphens, starting and ending with a letter or digit)"
        )
    if location.endpoint and not _OSS_ENDPOINT.fullmatch(location.endpoint):
        raise SpecError(
            f"{field}: {location.endpoint!r} in {uri!r} is not an OSS endpoint (fix: write "
            "oss://bucket/prefix/, or name the bucket's endpoint as "
            "oss://bucket.oss-<region>[-internal].aliyuncs.com/prefix/)"
        )
    return location


#: OSS bucket naming rules: 3-63 characters of lower-case letters, digits and hyphens, starting and
#: ending with a letter or digit (OSS "Bucket naming conventions").
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_OSS_ENDPOINT = re.compile(r"oss-[a-z0-9-]+\.aliyuncs\.com")


def oss_endpoint(region: str, internal: bool = False) -> str:
    """The OSS endpoint of ``region`` (OSS "Regions and endpoints"): ``-internal`` is reached from
    inside the region (ECS, DLC and ACK nodes) without internet traffic."""
    return f"oss-{region}{'-internal' if internal else ''}.aliyuncs.com"
