"""The object source for a dataset URI: ``file://`` is read in place, ``oss://`` through the OSS
client (``staging.oss``, imported only when an OSS source is opened: it loads the OSS SDK).
``staging.sources`` defines the sources and imports neither this module nor ``staging.oss``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from aliyun_training.staging.sources import LocalObjectSource, ObjectSource
from aliyun_training.validation import SpecError


def open_source(uri: str, **oss_options: Any) -> ObjectSource:
    """The object source for ``uri``; ``oss_options`` configure the OSS client (see OssObjectSource)."""
    parsed = urlparse(uri)
    scheme = parsed.scheme
    if parsed.query or parsed.fragment or parsed.params:
        raise SpecError(
            f"source_uri: {uri!r} contains '?', '#' or ';', which would cut the path short "
            "(fix: rename the folder without them)"
        )
    if scheme == "file":
        return LocalObjectSource(uri)
    if scheme == "oss":
        from aliyun_training.staging.oss import OssObjectSource

        return OssObjectSource(uri, **oss_options)
    raise SpecError(
        f"source_uri: scheme {scheme or '(none)'!r} of {uri!r} is not supported "
        "(fix: use oss://bucket/prefix/ or file:///path/)"
    )


def open_connected_source(uri: str, alibaba_cloud_conn_id: str, pool_size: int = 16) -> ObjectSource:
    """The object source for ``uri``; an ``oss://`` one reaches OSS through the connection."""
    if not uri.startswith("oss://"):
        return open_source(uri)
    from aliyun_training.staging.oss import OssClientConfig

    return open_source(uri, config=OssClientConfig.from_connection(alibaba_cloud_conn_id, pool_size))
