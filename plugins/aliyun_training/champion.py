"""The champion pointer: which run's model is a pipeline's champion, read and moved only here.

The pointer is kept in two places. The champion Asset's state holds the :class:`Champion` record
under :data:`CHAMPION_KEY`: the evaluation job scores the champion it names, the gate compares with
it and ``promote`` moves it. The model registry holds a copy for whoever deploys from the registry
(MLflow's alias ``champion-<installation>``, PAI's ``champion`` label: ``model_registry``). Every
task reads the pointer with :meth:`ChampionPointer.read` and only ``promote`` moves it, with
:meth:`ChampionPointer.compare_and_set`: the registry's copy first and the state last, and only
while the state still names the champion the gate compared with, so a retry at any point converges
and the state never names a champion the registry does not.

Airflow's asset state store has no atomic compare-and-set of its own. ``promote`` runs one task of
its DAG at a time (``max_active_tis_per_dag=1``), so no other promotion of the pipeline writes
between the compare and the write; the compare refuses a pointer that moved since the gate read it
(another run promoted while this one waited for its approval, or while ``promote`` recorded its
outcome).

What became of a candidate is one record, ``promotion.Outcome``: the published manifest and report
carry it, and so does what ``promote`` leaves in XCom (:func:`promote_outcome`), which the pages
read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from aliyun_training.promotion import Champion, Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aliyun_training.model_registry.base import ModelRegistry, RegisteredVersion

#: The key of the champion pointer in the champion Asset's state.
CHAMPION_KEY = "champion"
#: The XCom key of the outcome ``promote`` leaves when it skips (a Reject, or an approval that timed
#: out): a skipped task returns nothing, and the pages still show what became of the candidate.
OUTCOME_KEY = "outcome"


class AssetState(Protocol):
    """One Asset's state, as a task gets it (``context["asset_state_store"][asset]``)."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


class ChampionChanged(Exception):
    """The pointer no longer names the champion the gate compared with: nothing was moved."""

    def __init__(self, found: Champion | None, compared_with: str | None) -> None:
        super().__init__(
            f"the champion changed to {found.run_id if found else 'none'} after the gate compared "
            f"with {compared_with or 'none'}"
        )
        self.found = found


def moved_since(current: Champion | None, compared_with: str | None) -> bool:
    """Whether ``current`` is another champion than the run the gate compared with (None: none)."""
    return (current.run_id if current else None) != compared_with


class ChampionPointer:
    """The champion pointer of one pipeline, kept in its champion Asset's ``state``."""

    def __init__(self, state: AssetState) -> None:
        self._state = state

    def read(self) -> Champion | None:
        """The champion the pointer names; None before the pipeline's first promotion."""
        stored = self._state.get(CHAMPION_KEY)
        return Champion.model_validate(stored) if stored else None

    def compare_and_set(
        self, compared_with: str | None, champion: Champion, registry: ModelRegistry | None
    ) -> None:
        """Make ``champion`` the champion if the pointer still names the run ``compared_with``
        (None: no champion); :class:`ChampionChanged` otherwise, with nothing moved.

        The registry's pointer moves first (``registry``, where ``champion`` has a registered
        version), the state last: a failure in between leaves the state on the old champion, and the
        retry compares again and moves both.
        """
        current = self.read()
        if moved_since(current, compared_with):
            raise ChampionChanged(current, compared_with)
        if champion.registered is not None:
            if registry is None:
                raise ValueError(
                    f"version {champion.registered.version} is registered, but no registry was given"
                )
            registry.promote(champion.registered)
        self._state.set(CHAMPION_KEY, champion.model_dump(mode="json"))


def pointer_drift(champion: Champion | None, registered: RegisteredVersion | None) -> str | None:
    """How the registry's champion pointer (``registered``, as the registry reads it now) disagrees
    with the champion record the gate compares with; None where they agree, or where the record
    names no registered version (a champion promoted without a registry).

    A person may move MLflow's alias or PAI's label by hand, in MLflow's UI or PAI's console. The
    pipeline does not adopt such a move: the record is what the evaluation scored and what
    ``promote`` compares and sets. So the move is said before the gate decides, in its log and in
    the decision, with what the next promotion will do to it.
    """
    recorded = champion.registered if champion else None
    if champion is None or recorded is None:
        return None
    if registered is not None and registered.version == recorded.version:
        return None
    found = f"version {registered.version}" if registered is not None else "no version"
    return (
        f"the registry's champion pointer names {found} of {recorded.model}, not version "
        f"{recorded.version} of the champion (run {champion.run_id}): it was moved outside the pipeline, "
        f"which compares with run {champion.run_id}'s model, and a promotion moves the pointer to the "
        f"new champion (fix: move the pointer back to version {recorded.version})"
    )


def promote_outcome(returned: Mapping[str, Any] | None, left: Mapping[str, Any] | None) -> Outcome | None:
    """What ``promote`` recorded of the candidate: the outcome in what it returned, or the one it
    left under :data:`OUTCOME_KEY` when it skipped; None when it recorded nothing (yet). A record
    from before ``promote`` returned its outcome says only whether it promoted, and why."""
    if returned is not None:
        if returned.get("outcome") is not None:
            return Outcome.model_validate(returned["outcome"])
        return Outcome(
            state="promoted" if returned.get("promoted") else "held", reason=str(returned["reason"])
        )
    return Outcome.model_validate(left) if left is not None else None
