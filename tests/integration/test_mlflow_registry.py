"""MLflow's model registry as the pipelines use it: the embedded SQLite store, through MLflow's client."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from aliyun_training.model_registry import open_registry
from aliyun_training.model_registry.base import Candidate, PublishedFiles, RegistryError, RegistrySettings
from aliyun_training.model_registry.mlflow import embedded_tracking_uri


def _settings(folder: Path, model: str = "digits") -> RegistrySettings:
    return RegistrySettings(kind="mlflow", model=model, tracking_uri=embedded_tracking_uri(folder))


def _candidate(
    run_id: str, accuracy: float = 0.9, installation: str = "team-a", passed_gate: bool = True
) -> Candidate:
    return Candidate(
        installation=installation,
        run_id=run_id,
        dag_id="digits_retrain",
        dataset_version="2026-11-22",
        metrics={"test_accuracy": accuracy},
        artifacts_uri=f"/artifacts/digits/{run_id}",
        manifest_uri=f"/artifacts/digits/{run_id}/manifest.json",
        job_id=f"job-{run_id}",
        image="local",
        code_digest="0123456789ab",
        passed_gate=passed_gate,
    )


def _files(folder: Path) -> PublishedFiles:
    """A published set with no MLflow model: a state file, its manifest and its report."""
    root = folder / "set"
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.pt").write_bytes(b"state")
    manifest = {
        "run": {"params": {"epochs": 3, "backend": "local"}, "url": "/dags/digits_retrain/runs/r"},
        "metrics": {"epochs": 2, "series": ["test_accuracy"], "test_accuracy": [0.8, 0.9]},
        "dataset": {"uri": "/cpfs/digits/2026-11-22", "version": "2026-11-22", "checksum": "ab" * 32},
    }
    documents = (root / "manifest.json", root / "report.html")
    documents[0].write_text(json.dumps(manifest))
    documents[1].write_text("<html></html>")
    return PublishedFiles(root, manifest, documents)


@pytest.mark.slow
def test_a_candidate_is_registered_once_per_run_of_its_deployment_whatever_its_run_id_holds(
    tmp_path: Path,
) -> None:
    registry = open_registry(_settings(tmp_path), "team-a")
    odd = "manual__2026-11-22T00:00:00+00:00 it's \"quoted\" and tags.x = 'y'"

    first = registry.register(_candidate(odd), _files(tmp_path))
    again = registry.register(_candidate(odd, accuracy=0.1), _files(tmp_path))  # a retry of the same run
    other = registry.register(_candidate("scheduled__2026-11-29"), _files(tmp_path))

    elsewhere = registry.register(
        _candidate(odd, installation="team-b"), _files(tmp_path)
    )  # another deployment's run

    assert again == first and first.run_id == odd and first.metrics == {"test_accuracy": 0.9}
    assert (first.version, other.version, elsewhere.version) == ("1", "2", "3"), "never adopts another's"
    assert first.uri == f"models:/digits/1 at {embedded_tracking_uri(tmp_path)}"


@pytest.mark.slow
def test_the_champion_alias_moves_only_on_promote_and_promoting_twice_changes_nothing(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    registry = open_registry(_settings(tmp_path), "team-a")
    assert registry.champion() is None, "no model yet"
    first = registry.register(_candidate("manual__1"), _files(tmp_path))
    assert registry.champion() is None, "registered is not promoted"
    second = registry.register(_candidate("manual__2"), _files(tmp_path))

    registry.promote(first)
    registry.promote(first)
    assert registry.champion() == first
    registry.promote(second)

    client = MlflowClient(tracking_uri=registry.settings.tracking_uri)  # type: ignore[attr-defined]
    assert int(client.get_model_version_by_alias("digits", "champion-team-a").version) == 2
    assert int(client.get_model_version_by_alias("digits", "challenger-team-a").version) == 2, "the newest"
    # A candidate the gate held (or a backfill's) is registered, and the challenger stays.
    held = registry.register(_candidate("backfill__3", passed_gate=False), _files(tmp_path))
    assert held.version == "3"
    assert int(client.get_model_version_by_alias("digits", "challenger-team-a").version) == 2
    tags = client.get_model_version("digits", "1").tags
    assert tags["lineage.dataset_version"] == "2026-11-22" and tags["metric.test_accuracy"] == "0.9"


def _register_many(folder: str, prefix: str, count: int) -> None:
    registry = open_registry(_settings(Path(folder)), "team-a")
    for number in range(count):
        registry.register(_candidate(f"{prefix}{number}"), _files(Path(folder)))


@pytest.mark.slow
def test_two_deployments_registering_at_once_into_one_embedded_store_lose_nothing(tmp_path: Path) -> None:
    """Both create the store's tables on first use and write in turn: every candidate is there once."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_register_many, args=(str(tmp_path), name, 5)) for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=embedded_tracking_uri(tmp_path))
    versions = client.search_model_versions("name = 'digits'")
    assert sorted(v.tags["lineage.run_id"] for v in versions) == [f"{p}{n}" for p in "ab" for n in range(5)]
    assert sorted(int(v.version) for v in versions) == list(range(1, 11))


@pytest.mark.slow
def test_an_unreachable_tracking_server_fails_naming_the_registry_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # MLflow's client retries a refused connection with backoff for minutes by default.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    settings = RegistrySettings(kind="mlflow", model="digits", tracking_uri="http://127.0.0.1:9")

    with pytest.raises(RegistryError, match=r"MLflow model registry at http://127\.0\.0\.1:9.*fix:"):
        open_registry(settings, "team-a").champion()


@pytest.mark.slow
def test_deployments_sharing_a_store_each_move_their_own_champion_and_only_their_own_versions(
    tmp_path: Path,
) -> None:
    """Staging and production, one store, the same model name: each has its own alias, and neither
    may point its alias at the other's version."""
    from mlflow.tracking import MlflowClient

    production, staging = (
        open_registry(_settings(tmp_path), "ml-prod"),
        open_registry(_settings(tmp_path), "ml-staging"),
    )
    good = production.register(
        _candidate("scheduled__1", accuracy=0.9, installation="ml-prod"), _files(tmp_path)
    )
    production.promote(good)
    bad = staging.register(
        _candidate("scheduled__1", accuracy=0.1, installation="ml-staging"), _files(tmp_path)
    )
    staging.promote(bad)

    assert production.champion() == good and staging.champion() == bad
    client = MlflowClient(tracking_uri=embedded_tracking_uri(tmp_path))
    assert (
        client.get_model_version_by_alias("digits", "champion-ml-prod").tags["metric.test_accuracy"] == "0.9"
    )
    with pytest.raises(RegistryError, match=r"registered by installation ml-prod, not ml-staging"):
        staging.promote(good)
    assert production.champion() == good, "refused before anything moved"


@pytest.mark.slow
def test_a_rejected_version_says_why_and_stops_being_the_challenger(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    registry = open_registry(_settings(tmp_path), "team-a")
    older = registry.register(_candidate("manual__1"), _files(tmp_path))
    newest = registry.register(_candidate("manual__2"), _files(tmp_path))
    theirs = open_registry(_settings(tmp_path), "team-b").register(
        _candidate("manual__3", installation="team-b"), _files(tmp_path)
    )

    registry.reject(older, "the approval was answered 'Reject' by alice")
    client = MlflowClient(tracking_uri=embedded_tracking_uri(tmp_path))
    assert int(client.get_model_version_by_alias("digits", "challenger-team-a").version) == 2, "not older"
    registry.reject(newest, "the approval was answered 'Reject' by bob")

    tags = client.get_model_version("digits", newest.version).tags
    assert tags["aliyun_training.rejected"] == "the approval was answered 'Reject' by bob"
    assert "challenger-team-a" not in client.get_registered_model("digits").aliases
    with pytest.raises(RegistryError, match="registered by installation team-b, not team-a"):
        registry.reject(theirs, "not ours")
    assert "aliyun_training.rejected" not in client.get_model_version("digits", theirs.version).tags


@pytest.mark.slow
def test_the_deployment_that_keeps_the_plain_aliases_moves_them_with_its_own(tmp_path: Path) -> None:
    """Production keeps ``champion``/``challenger`` too (``[aliyun_training] plain_registry_aliases``);
    staging, sharing the store, keeps only its own, and a hand move of ``champion`` is what
    production reads as its registry's pointer."""
    from mlflow.tracking import MlflowClient

    plain = RegistrySettings(
        kind="mlflow", model="digits", tracking_uri=embedded_tracking_uri(tmp_path), plain_aliases=True
    )
    production, staging = open_registry(plain, "ml-prod"), open_registry(_settings(tmp_path), "ml-staging")
    first = production.register(_candidate("scheduled__1", installation="ml-prod"), _files(tmp_path))
    production.promote(first)
    theirs = staging.register(_candidate("scheduled__1", installation="ml-staging"), _files(tmp_path))
    staging.promote(theirs)
    second = production.register(_candidate("scheduled__2", installation="ml-prod"), _files(tmp_path))

    client = MlflowClient(tracking_uri=embedded_tracking_uri(tmp_path))
    aliases = client.get_registered_model("digits").aliases
    assert {
        alias: int(aliases[alias]) for alias in ("champion", "champion-ml-prod", "champion-ml-staging")
    } == {
        "champion": 1,
        "champion-ml-prod": 1,
        "champion-ml-staging": 2,
    }
    assert int(aliases["challenger"]) == 3 == int(aliases["challenger-ml-prod"]), "the newest passed"
    client.set_registered_model_alias("digits", "champion", second.version)  # moved by hand
    assert production.champion() == second and staging.champion() == theirs
    production.promote(first)
    assert int(client.get_registered_model("digits").aliases["champion"]) == 1, "moved back by a promotion"
