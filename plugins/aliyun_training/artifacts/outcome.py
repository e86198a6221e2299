"""Record the promotion's final outcome in the artifact set a run published before it was known.

``publish_artifacts`` writes manifest.json and report.html before a person answers the approval and
before ``promote`` moves the champion, so they say what was known then (``promotion.Outcome``: held
by the gate, awaiting approval, awaiting promote). Once ``promote`` decided, ``record_outcome``
rewrites those two files, and nothing else of the set, with the final outcome. The manifest's list
of files never holds the manifest or the report, so its checksums stay true.

Only the set this run published is rewritten: its manifest must name this DAG run. A set another
run published at the same place since then is left as it is, with a warning: publishing never
changes what it did not publish. The rewrite holds the set's publication lock, as a publisher does,
so it never mixes with a publication of the same set; and each file is replaced whole (a local file
by a rename over it, an OSS object by one PutObject), report first and manifest last, so a reader
gets the old file or the new one, never part of one.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from aliyun_training.artifacts.manifest import FIELD, MANIFEST_NAME, REPORT_NAME, require_oss
from aliyun_training.artifacts.report import render_report
from aliyun_training.promotion import manifest_promotion
from aliyun_training.staging.publish import publication_lock, refuse_link

if TYPE_CHECKING:
    from collections.abc import Callable

    from aliyun_training.promotion import Decision, Outcome
    from aliyun_training.stage_records import ArtifactSet
    from aliyun_training.staging.oss import OssClientConfig

log = logging.getLogger(__name__)


def record_outcome(
    published: ArtifactSet,
    decision: Decision,
    outcome: Outcome,
    run: tuple[str, str],
    oss: OssClientConfig | None = None,
) -> bool:
    """Rewrite the manifest and the report of the set ``published`` with ``outcome``; whether they
    were rewritten (False: they say it already, or the set is not the one that the DAG run ``run``,
    its DAG id and run id, published). ``oss`` is required for a set on OSS."""

    def revise(current: bytes | None) -> dict[str, bytes]:
        return _revised(current, decision, outcome, run, published.uri)

    if published.uri.startswith("oss://"):
        from aliyun_training.artifacts.oss_publication import revise_on_oss

        return revise_on_oss(published.uri, require_oss(oss, FIELD), revise)
    return _revise_locally(Path(published.uri), revise)


def _revised(
    current: bytes | None, decision: Decision, outcome: Outcome, run: tuple[str, str], where: str
) -> dict[str, bytes]:
    """The report and the manifest, in the order they are written, that record ``outcome`` in the
    set whose manifest is ``current`` (None: it has none); none when they record it already, or
    when the manifest is not the run's."""
    try:
        manifest = json.loads(current or b"null")
        publisher = (manifest["run"]["dag_id"], manifest["run"]["run_id"])
    except (ValueError, TypeError, KeyError):
        publisher = None
    if publisher != run:
        log.warning(
            "Not recording the promotion's outcome (%s) in %s: its manifest is not the one run %s of %s "
            "published (%s), so its files are left as they are",
            outcome.headline,
            where,
            run[1],
            run[0],
            f"published by run {publisher[1]} of {publisher[0]}" if publisher else "none that names a run",
        )
        return {}
    promotion = manifest_promotion(decision, outcome)
    if manifest.get("promotion") == promotion:
        return {}
    updated = {**manifest, "promotion": promotion}
    return {
        REPORT_NAME: render_report(updated).encode(),
        MANIFEST_NAME: json.dumps(updated, indent=2).encode(),
    }


def _revise_locally(target: Path, revise: Callable[[bytes | None], dict[str, bytes]]) -> bool:
    """Replace files of the set at ``target`` with what ``revise`` makes of its manifest, under
    the set's publication lock (waiting for a publisher that holds it: the set may be another
    once it is done)."""
    refuse_link(target, FIELD)
    if not target.is_dir():
        return bool(revise(None))  # removed since: revise says so, and there is nothing to write
    with publication_lock(target, FIELD, wait=True):
        files = revise(_read_plain_file(target / MANIFEST_NAME))
        for name, data in files.items():
            _replace(target / name, data)
    return bool(files)


def _read_plain_file(path: Path) -> bytes | None:
    """The file at ``path``; None when there is none, or a link is there (read nowhere else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with open(fd, "rb") as opened:
        return opened.read()


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file beside ``path`` and rename it over ``path``: a reader opens the
    old file or the new one, whole. A link at ``path`` is replaced, never written through."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666), "wb") as out:
            out.write(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
