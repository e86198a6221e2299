"""Does an image exist in its registry? One HEAD request of the Docker Registry HTTP API v2.

:func:`image_digest` answers the digest of ``host/namespace/repo:tag`` (or ``...@sha256:...``), or
None when the registry does not have it, so a build can be skipped for a tag that already exists.
The protocol, the connection (``registry_conn_id``: host, login, password) and the errors are
those of ``hooks.container_registry.ContainerRegistryHook``; they are named here too for the callers.
"""

from __future__ import annotations

from aliyun_training.hooks.container_registry import (
    DEFAULT_ATTEMPTS,
    DEFAULT_TIMEOUT,
    MANIFEST_MEDIA_TYPES,
    ContainerRegistryHook,
    ImageReference,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
)

__all__ = [
    "MANIFEST_MEDIA_TYPES",
    "ImageReference",
    "RegistryAuthError",
    "RegistryError",
    "RegistryUnavailableError",
    "image_digest",
]


def image_digest(
    reference: str,
    registry_conn_id: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    attempts: int = DEFAULT_ATTEMPTS,
) -> str | None:
    """The manifest digest (``sha256:...``) of ``reference`` in its registry, or None if absent;
    anonymous without ``registry_conn_id``."""
    ref = ImageReference.parse(reference)
    return ContainerRegistryHook(registry_conn_id).manifest_digest(ref, timeout=timeout, attempts=attempts)
