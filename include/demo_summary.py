"""Print what the demo run produced; the last line is the path of the run's manifest.json.

Usage: python include/demo_summary.py --artifacts DIR --since STAMP_FILE [--registry MLFLOW_DB]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", type=Path, required=True, help="the model's artifact directory")
    parser.add_argument("--since", type=Path, required=True, help="only manifests newer than this file count")
    parser.add_argument("--registry", type=Path, help="the embedded MLflow registry's SQLite file")
    args = parser.parse_args()
    since = args.since.stat().st_mtime
    manifests = sorted(
        (p for p in args.artifacts.glob("*/*/manifest.json") if p.stat().st_mtime >= since),
        key=lambda p: p.stat().st_mtime,
    )
    if not manifests:
        print(f"error: the run published no manifest under {args.artifacts}", file=sys.stderr)
        return 1
    path = manifests[-1]
    manifest = json.loads(path.read_text())
    metrics, job = manifest["metrics"], manifest["job"]
    losses = " -> ".join(f"{loss:.4f}" for loss in metrics["train_loss"])
    print(f"model            {manifest['model']} {manifest['version']}")
    print(f"dataset version  {manifest['dataset']['version']} ({manifest['dataset']['files']} files)")
    print(
        f"job              {job['job_id']} on {job['backend']}: "
        f"{job['status']} in {job['wall_seconds']:.1f} s"
    )
    print(f"train loss       {losses}")
    print(f"test accuracy    {metrics['final_test_accuracy']:.2%}")
    if decision := manifest.get("promotion"):
        verdict = "PROMOTED to champion" if decision["promoted"] else "not promoted"
        print(f"promotion        {verdict} ({decision.get('basis', 'final metrics')}): {decision['reason']}")
    if args.registry and args.registry.is_file():
        print(f"registry         {registry_line(args.registry, manifest['model'])}")
    print(f"report           {path.with_name(manifest['report'])}")
    print(path)
    return 0


def registry_line(database: Path, model: str) -> str:
    """How many candidates the embedded MLflow registry holds and which version is the champion."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from aliyun_training.installation import installation_id
    from aliyun_training.model_registry.mlflow import champion_alias

    uri = f"sqlite:///{database.resolve()}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = client.search_model_versions(f"name = '{model}'")
    alias = champion_alias(installation_id())  # this deployment's pointer
    try:
        champion = f"version {client.get_model_version_by_alias(model, alias).version} (@{alias})"
    except MlflowException:
        champion = "none"
    return f"{len(versions)} candidate(s) of {model} in MLflow ({database}); champion: {champion}"


if __name__ == "__main__":
    sys.exit(main())
