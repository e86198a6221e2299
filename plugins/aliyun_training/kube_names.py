"""Kubernetes' name rules (k8s.io/apimachinery ``pkg/util/validation``), matched on whole strings.

The ACK backend, the static volumes and the environment files all name Kubernetes objects; an
invalid name is refused by the API server only once something is submitted, so each checks it
first with these.
"""

from __future__ import annotations

import re

#: The longest DNS-1123 / DNS-1035 label, and the longest subdomain.
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def json_schema(kind: str) -> dict[str, object]:
    """The rule of ``kind`` (``label`` or ``subdomain``) as JSON Schema keywords, for editors."""
    pattern, longest = (_DNS1123_LABEL, LABEL_MAX) if kind == "label" else (_DNS1123_SUBDOMAIN, SUBDOMAIN_MAX)
    return {"pattern": f"^{pattern.pattern}$", "maxLength": longest}


def is_dns_label(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 label (namespace, PersistentVolume and claim names of ours)."""
    return len(name) <= LABEL_MAX and bool(_DNS1123_LABEL.fullmatch(name))


def is_dns_subdomain(name: str) -> bool:
    """Whether ``name`` is a DNS-1123 subdomain (Secret, ConfigMap and PersistentVolumeClaim names)."""
    return len(name) <= SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.fullmatch(name))


def is_dns1035_label(name: str) -> bool:
    """Whether ``name`` is a DNS-1035 label (a letter first): what Service names must be."""
    return len(name) <= LABEL_MAX and bool(_DNS1035_LABEL.fullmatch(name))


def is_extended_resource_name(name: str) -> bool:
    """Whether ``name`` is an extended resource (k8s.io/kubernetes pkg/apis/core/helper
    ``IsExtendedResourceName``): a qualified ``<domain>/<name>`` outside ``kubernetes.io/``,
    not starting with ``requests.``."""
    prefix, slash, rest = name.partition("/")
    return bool(
        slash
        and "kubernetes.io/" not in name
        and not name.startswith("requests.")
        and is_dns_subdomain(prefix)
        and len(rest) <= LABEL_MAX
        and _QUALIFIED_NAME.fullmatch(rest)
    )
