"""A remote run found by its kind and mode: how the scheduler checks a run's settings and the
triggerer rebuilds it.

The package that owns a kind lists its runs (``staging.runs``, ``image.runs``) with imports the
import contracts see. This module imports a kind's list only when the kind is looked up, so
importing it (at DAG parse, in the scheduler) imports no run module; and no run module imports a
cloud SDK or the Kubernetes client at its top, so a lookup costs module imports and no client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aliyun_training.remote import RunKind
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from aliyun_training.remote import RemoteRun


def _staging() -> RunKind:
    from aliyun_training.staging.runs import RUNS

    return RUNS


def _image() -> RunKind:
    from aliyun_training.image.runs import RUNS

    return RUNS


#: Each kind of remote run, and how its runs are imported when the kind is looked up.
KINDS: dict[str, Callable[[], RunKind]] = {"staging": _staging, "image": _image}

#: A kind that is not in KINDS has no runs; its error names the setting as plain "mode".
_UNKNOWN_KIND = RunKind("mode", ())


def remote_runs(kind: str) -> dict[str, type[RemoteRun]]:
    """The run classes of ``kind`` by mode, sorted by mode."""
    return runs_by_mode(kind, _run_kind(kind).runs)


def remote_run(kind: str, mode: str, config: dict[str, Any]) -> RemoteRun:
    """The run of ``kind`` (``staging`` or ``image``) in ``mode``, built (and validated) from its settings."""
    run_kind = _run_kind(kind)
    runs = runs_by_mode(kind, run_kind.runs)
    if mode not in runs:
        raise SpecError(
            f"{run_kind.setting}: {mode!r} is not a {kind} mode that runs off the worker "
            f"(fix: use one of {list(runs)})"
        )
    return runs[mode](**config)


def runs_by_mode(kind: str, runs: Iterable[type[RemoteRun]]) -> dict[str, type[RemoteRun]]:
    """``runs`` by the mode each names, sorted by mode; two runs of one mode would hide one of them."""
    by_mode: dict[str, type[RemoteRun]] = {}
    for run in runs:
        taken = by_mode.setdefault(run.mode, run)
        if taken is not run:
            raise ValueError(
                f"{kind} mode {run.mode!r} is taken by {_path(taken)}; {_path(run)} cannot take it"
            )
    return dict(sorted(by_mode.items()))


def _run_kind(kind: str) -> RunKind:
    return KINDS[kind]() if kind in KINDS else _UNKNOWN_KIND


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
