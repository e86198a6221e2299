"""Names and labels of Kubernetes objects: the API server's rules, and how this package makes names.

The rules (k8s.io/apimachinery ``pkg/util/validation``) are matched on whole strings. The ACK
backend, the static volumes and the environment files all name Kubernetes objects; an invalid name
is refused by the API server only once something is submitted, so each checks it first with these.

Every name this package derives (a job's, a bare pod's, a dataset version's volume) is one
``stable_name``: a readable part plus a hash of what identifies the object, so every try of one
task computes the same name and two inputs whose readable parts coincide never share one. Plain
string functions, no client: the spec's layer and the environment files may use them.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

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


# -- names this package derives -------------------------------------------------------------------

#: Job names leave room for the longest suffix put after them: ``-worker-127`` (a replica's Service)
#: or ``-pytorchjob`` (arena's ConfigMap), within a 63-character DNS label.
JOB_NAME_MAX = LABEL_MAX - len("-worker-127")


def readable_part(text: str) -> str:
    """``text`` in DNS-1123 label characters: lowercased, every other run of characters one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def stable_name(readable: str, identity: str, *, longest: int = LABEL_MAX, digest_length: int = 8) -> str:
    """``<readable>-<hash of identity>`` as a DNS-1123 label of at most ``longest`` characters.

    The readable part (made of label characters by ``readable_part``) is cut to fit; the hash keeps
    apart objects whose readable parts are the same, and makes the name the same for every try of
    one input.
    """
    digest = hashlib.sha256(identity.encode()).hexdigest()[:digest_length]
    return f"{readable_part(readable)[: longest - len(digest) - 1].rstrip('-')}-{digest}"


def job_name(
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int | None = -1,
    first_try: int = 1,
    *,
    installation: str,
) -> str:
    """Deterministic job name for one installation's task instance and round of tries.

    Every try of a round gets the same name, so a retry (or a worker that died between submitting
    and saving the job id) finds the job it already launched instead of starting a second one.
    Clearing a task starts a new round, whose ``first_try`` is past the earlier round's tries: the
    new name makes a cleared task run its job again instead of finding the one it ran before. The
    first round's name leaves ``first_try`` out.

    The result is a readable prefix from the DAG and task ids plus a hash of the full identity, and
    a DNS-1035 label (a letter first) of at most ``JOB_NAME_MAX`` characters: the training-operator
    names a Service ``<job>-<replica type>-<index>`` after every replica and arena a ConfigMap
    ``<job>-<type>``, and both must stay DNS-1035 labels of at most 63 characters. The same name
    serves DLC display names and local run directories. The installation is part of the identity:
    two deployments running the same scheduled run get two jobs, two output directories and two
    artifact sets.
    """
    parts = [installation, dag_id, run_id, task_id, str(map_index)] + (
        [str(first_try)] if first_try > 1 else []
    )
    readable = readable_part(f"{dag_id}-{task_id}")
    if not readable[:1].isalpha():
        readable = f"job-{readable}"
    return stable_name(readable, "\n".join(parts), longest=JOB_NAME_MAX, digest_length=10)


# -- labels ---------------------------------------------------------------------------------------

#: The labels that mark an object as this pipeline's, and which of its components made it.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "aliyun-training"
COMPONENT_LABEL = "app.kubernetes.io/component"


#: The label naming the installation (the Airflow deployment) that created an object.
INSTALLATION_LABEL = "aliyun-training/installation"


def managed_labels(component: str, installation: str | None, **labels: str) -> dict[str, str]:
    """This pipeline's labels of a ``component``'s object created by ``installation``, then ``labels``
    (values made valid)."""
    values = {name: label_value(value) for name, value in labels.items()}
    created_by = {INSTALLATION_LABEL: installation} if installation else {}
    return {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: component, **created_by, **values}


def label_value(text: str) -> str:
    """A label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:LABEL_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


# -- owners ---------------------------------------------------------------------------------------

#: The label of a job launched for a task instance, which its annotations name: what the reconciler
#: selects on. The owner itself cannot be a label: run ids hold ':' and '+', which label values may
#: not (at most 63 of [A-Za-z0-9._-]), so it goes into annotations, which take any string.
OWNED_LABEL = "aliyun-training/owned"
OWNED = "task-instance"
#: The domain of this package's annotations: ``aliyun-training/<name>``.
ANNOTATION_PREFIX = "aliyun-training/"


def owner_annotations(tags: Mapping[str, str]) -> dict[str, str]:
    """An owner's tags (``JobOwner.tags()``) as annotations under this package's domain."""
    return {f"{ANNOTATION_PREFIX}{name}": value for name, value in tags.items()}


def owner_tags(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """An object's annotations under this package's domain, the domain taken off: the tags
    ``owner_annotations`` wrote are among them."""
    return {
        name.removeprefix(ANNOTATION_PREFIX): value
        for name, value in (annotations or {}).items()
        if name.startswith(ANNOTATION_PREFIX)
    }
