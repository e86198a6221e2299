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

A person may roll the pointer back (:meth:`ChampionPointer.roll_back`, from the command line or the
pipeline page: ``rollback``): to the champion the current one replaced, or to any the pointer
named before. The stored pointer keeps those past champions with it, so one write moves the
champion and its history together; the registry's copy moves first here too.

What became of a candidate is one record, ``promotion.Outcome``: the published manifest and report
carry it, and so does what ``promote`` leaves in XCom (:func:`promote_outcome`), which the pages
read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from aliyun_training.promotion import Champion, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from aliyun_training.model_registry.base import ModelRegistry, RegisteredVersion, RegistrySettings

#: The key of the champion pointer in the champion Asset's state.
CHAMPION_KEY = "champion"
#: The XCom key of the outcome ``promote`` leaves when it skips (a Reject, or an approval that timed
#: out): a skipped task returns nothing, and the pages still show what became of the candidate.
OUTCOME_KEY = "outcome"
#: The field of the stored pointer that holds the champions before it, newest first.
HISTORY_FIELD = "history"
#: How many past champions the pointer keeps: what a rollback can go back to.
HISTORY_LIMIT = 10


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


class PastChampion(BaseModel):
    """A champion the pointer named before: until when, and how it stopped being the champion."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    champion: Champion
    until: datetime
    #: "replaced": a promotion replaced it, so a rollback goes back to it unless told otherwise;
    #: "rolled back": a person rolled the pointer back from it, so it is a target only when named.
    left: Literal["replaced", "rolled back"]
    #: Who rolled the pointer back from it; None where a promotion replaced it.
    by: str | None = None

    @property
    def version(self) -> str | None:
        """Its registered version, as a team names the model; None without a registry."""
        return self.champion.registered.version if self.champion.registered else None


class RollbackRefused(Exception):
    """The rollback cannot be done as asked: the message names what and the fix; nothing moved."""


@dataclass(frozen=True)
class RolledBack:
    """What a rollback did: ``champion`` is the champion again, in place of ``replaced``."""

    champion: Champion
    replaced: Champion


def announcement(champion: Champion, replaced: str | None) -> dict[str, Any]:
    """The champion Asset event's extra when the pointer moves to ``champion`` in place of the run
    ``replaced``: what a deployment DAG scheduled on the Asset reads (a promotion's and a rollback's)."""
    registered = champion.registered
    return {
        "run_id": champion.run_id,
        "dataset_version": champion.dataset_version,
        "manifest_uri": champion.artifacts.manifest_uri,
        "model_version": registered.version if registered else None,
        "registry_uri": registered.uri if registered else None,
        "metrics": champion.metrics,
        "replaced": replaced,
    }


def named(champion: Champion) -> str:
    """A champion as a person knows it: its registered version and dataset version, and its run."""
    registered = champion.registered
    model = f"version {registered.version} of {registered.model}, " if registered else ""
    return f"{model}dataset {champion.dataset_version} (run {champion.run_id})"


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
        history = self.history()
        if current is not None:
            replaced = PastChampion(
                champion=_with_registry(current, champion.registry), until=datetime.now(UTC), left="replaced"
            )
            history = [replaced, *_without(history, current, champion)]
        self._write(champion, history)

    def history(self) -> list[PastChampion]:
        """The champions the pointer named before the current one, newest first."""
        stored = self._state.get(CHAMPION_KEY) or {}
        return [PastChampion.model_validate(past) for past in stored.get(HISTORY_FIELD, [])]

    def roll_back(
        self, to: str | None, by: str, open_registry: Callable[[RegistrySettings], ModelRegistry]
    ) -> RolledBack:
        """Make a past champion the champion again, for the person ``by``: the one named ``to`` (its
        registered version or its run id), else the newest a promotion replaced. The registry's
        pointer moves first (``open_registry`` opens the registry the past champion was promoted
        in), the state last, as a promotion moves them; :class:`RollbackRefused` with nothing
        moved where there is nothing to go back to.

        The champion rolled back from stays in the history, marked so: naming it undoes the
        rollback, and a rollback without ``to`` goes further back rather than to it.
        """
        current = self.read()
        if current is None:
            raise RollbackRefused("there is no champion to roll back from: no model was promoted yet")
        past = self.history()
        target = _target(past, to, current)
        champion = target.champion.model_copy(update={"rolled_back_by": by})
        if champion.registered is not None:
            if champion.registry is None:
                raise RollbackRefused(
                    f"version {champion.registered.version} of {champion.registered.model} was promoted "
                    "before champions recorded their registry, so its pointer cannot be moved from here "
                    "(fix: roll back to a later champion, or move the alias or label by hand)"
                )
            open_registry(champion.registry).promote(champion.registered)
        left = PastChampion(champion=current, until=datetime.now(UTC), left="rolled back", by=by)
        self._write(champion, [left, *_without(past, current, champion)])
        return RolledBack(champion=champion, replaced=current)

    def _write(self, champion: Champion, history: list[PastChampion]) -> None:
        """Store ``champion`` and the newest of ``history`` in one write."""
        kept = [past.model_dump(mode="json") for past in history[:HISTORY_LIMIT]]
        self._state.set(CHAMPION_KEY, {**champion.model_dump(mode="json"), HISTORY_FIELD: kept})


def _without(history: list[PastChampion], *champions: Champion) -> list[PastChampion]:
    """``history`` less the entries of ``champions`` (each run is in the history once)."""
    runs = {champion.run_id for champion in champions}
    return [past for past in history if past.champion.run_id not in runs]


def _with_registry(champion: Champion, settings: RegistrySettings | None) -> Champion:
    """``champion`` with the registry it is a version in: a record from before champions recorded
    it takes ``settings`` (the promoting run's) where they name the same registered model."""
    registered = champion.registered
    if champion.registry is not None or registered is None or settings is None:
        return champion
    if (settings.kind, settings.model) != (registered.registry, registered.model):
        return champion
    return champion.model_copy(update={"registry": settings})


def past_champion(history: list[PastChampion], to: str) -> PastChampion | None:
    """The past champion ``to`` names, by its registered version or its run id; None if none."""
    return next((past for past in history if to in (past.champion.run_id, past.version)), None)


def _target(history: list[PastChampion], to: str | None, current: Champion) -> PastChampion:
    """The past champion a rollback goes back to (see ``ChampionPointer.roll_back``)."""
    names = ", ".join(f"{past.version or '-'} (run {past.champion.run_id})" for past in history)
    known = f"its past champions: {names}" if names else "it has none"
    if to is None:
        found = next((past for past in history if past.left == "replaced"), None)
        if found is None:
            raise RollbackRefused(
                f"no champion before run {current.run_id} to roll back to ({known}; fix: name one as to)"
                if names
                else f"no champion before run {current.run_id} to roll back to: it was the first"
            )
        return found
    current_version = current.registered.version if current.registered else None
    if to in (current.run_id, current_version):
        raise RollbackRefused(f"to: {to} is the champion already (fix: name a past champion; {known})")
    found = past_champion(history, to)
    if found is None:
        raise RollbackRefused(f"to: {to!r} is no past champion of this pipeline (fix: name one of {known})")
    return found


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
