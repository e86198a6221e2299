"""The command line: ``python -m aliyun_training plan ...`` shows a run's dry run, no deployment needed.

::

    python -m aliyun_training plan --pipeline pipelines/cifar10.yaml --backend dlc \\
        --environment include/config/examples/dlc.json --dataset-version 2026-11-22 \\
        [--params '{"nodes": 4}'] [--no-preflight] [--format text|json|html]

resolves the run's plan from the pipeline's declaration, the environment file (default: the
declared one in ``include/config``) and the trigger-form values (``--params`` over the form's
defaults), runs the preflight checks (read-only calls, through the Airflow connections
the environment names; ``--no-preflight`` makes no call at all) and prints the dry run on stdout:
every request the run would make, then exits. Nothing is created, copied, built or submitted.
``--format text`` (the default) is for the person deciding the spend: the summary, the cost
ceiling, the checks in words, each stage's requests with wrapped commands and decoded inline
scripts (``plan.render_text``). ``--format json`` is the document itself, for programs: stdout is
exactly one JSON document, with the preflight as without it. ``--format html`` is the page a DAG
run's dry run writes as ``plan.html``. A bad value exits with status 2 and the error on stderr.

``python -m aliyun_training champion rollback <pipeline> [--to VERSION]`` makes a past champion of the
pipeline (the DAG id) the champion again: the one the champion replaced, or the one whose registered
version (or run id) ``--to`` names. It moves the registry's pointer and the champion Asset's state,
announces the champion event and records the shell's user as who did it (``rollback``); it runs
where ``airflow`` commands run, with the deployment's configuration. ``champion show <pipeline>``
lists the champion and the past champions a rollback can go back to.

``python -m aliyun_training schema --backend dlc`` prints the JSON Schema of that backend's
environment file (``docs/schema/`` holds them, for editors that validate JSON as it is typed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aliyun_training.backend_catalog import BACKENDS, backend_record
from aliyun_training.validation import SpecError, parse_json_settings

#: The run a dry run's job names are derived from, as if it were a run of the pipeline's DAG.
DRY_RUN_ID = "dry_run"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        from aliyun_training.environments import environment_schema

        print(json.dumps(environment_schema(args.backend), indent=2, sort_keys=True))
        return 0
    if args.command == "champion":
        return champion_command(args)
    try:
        # What the planning and the preflight log (Airflow's handlers write to whatever sys.stdout
        # is when they emit) goes to stderr: stdout carries only the rendering, so --format json
        # parses as JSON with the preflight as without it.
        with contextlib.redirect_stdout(sys.stderr):
            document = plan_command(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(rendered(document, args.format))
    return 0


def rendered(document: dict[str, Any], form: str) -> str:
    """The dry run as ``--format`` asks: the document for a program, or read for a person."""
    if form == "json":
        return json.dumps(document, indent=2, sort_keys=True, default=str)
    if form == "html":
        from aliyun_training.plan.render_html import render_html

        return render_html(document)
    from aliyun_training.plan.render_text import render_text

    return render_text(document)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aliyun_training")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="show every request a run would make, and stop (a dry run)")
    plan.add_argument(
        "--pipeline",
        type=Path,
        default=Path("pipelines", "cifar10.yaml"),
        help="the pipeline's declaration (default: pipelines/cifar10.yaml)",
    )
    plan.add_argument("--backend", required=True, choices=[record.name.value for record in BACKENDS])
    plan.add_argument(
        "--environment",
        type=Path,
        help="the backend's environment file (local: optional, the defaults apply without one)",
    )
    plan.add_argument(
        "--dataset-version",
        default=None,
        help="the dataset version to train on (default: the newest landed one, as the form's empty field)",
    )
    plan.add_argument(
        "--params", default="{}", help="trigger-form values as a JSON object, over the defaults"
    )
    plan.add_argument("--no-preflight", action="store_true", help="make no call to any platform")
    plan.add_argument(
        "--format",
        choices=["text", "json", "html"],
        default="text",
        help="text: read by a person (default); json: the whole document, for programs; html: plan.html",
    )
    plan.add_argument(
        "--environment-dir",
        type=Path,
        default=Path("include", "config"),
        help="the directory of the declared environment files (default: include/config)",
    )
    champion = commands.add_parser("champion", help="show a pipeline's champion, or roll it back")
    actions = champion.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the champion and the past champions a rollback can go back to")
    show.add_argument("pipeline", help="the pipeline's DAG id")
    rollback = actions.add_parser("rollback", help="make a past champion the champion again")
    rollback.add_argument("pipeline", help="the pipeline's DAG id")
    rollback.add_argument(
        "--to",
        metavar="VERSION",
        help="the past champion's registered version or run id (default: the one the champion replaced)",
    )
    schema = commands.add_parser("schema", help="print the JSON Schema of a backend's environment file")
    schema.add_argument("--backend", required=True, choices=[record.name.value for record in BACKENDS])
    return parser


def plan_command(args: argparse.Namespace) -> dict[str, Any]:
    """The dry run's document for the command line's arguments."""
    from aliyun_training.declaration import load_declaration
    from aliyun_training.installation import installation_id, plain_registry_aliases
    from aliyun_training.kubernetes.names import job_name
    from aliyun_training.params import param_defaults
    from aliyun_training.plan.dry_run import dry_run_document
    from aliyun_training.plan.inputs import RunContext
    from aliyun_training.plan.resolve import resolve_run
    from aliyun_training.settings import local_paths

    fix = "fix: give the trigger-form values as a JSON object, e.g. '{\"nodes\": 4}'"
    given = parse_json_settings(args.params, "--params", SpecError)
    if not isinstance(given, dict):
        raise SpecError(f"--params: a JSON {type(given).__name__}, not an object ({fix})")
    # The command's own arguments say these; a value in --params would be silently replaced.
    own = {
        "backend": "--backend",
        "dataset_version": "--dataset-version",
        "dry_run": "plan (always a dry run)",
    }
    given_twice = sorted(set(own) & set(given))
    if given_twice:
        raise SpecError(
            f"--params: {', '.join(given_twice)} are set by the command line, not --params (fix: give "
            + ", ".join(f"{name} as {own[name]}" for name in given_twice)
            + ")"
        )
    if args.dataset_version is None and args.no_preflight:
        raise SpecError(
            "--dataset-version: the newest landed version is found by listing the source, which "
            "--no-preflight does not do (fix: name the version, or drop --no-preflight)"
        )
    declaration = load_declaration(args.pipeline)
    params = {
        **param_defaults(declaration),
        **given,
        "backend": args.backend,
        "dataset_version": args.dataset_version,
        "dry_run": True,
    }
    run = RunContext(
        datetime.now(UTC),
        installation_id(),
        list_sources=not args.no_preflight,
        plain_registry_aliases=plain_registry_aliases(),
    )
    plan = resolve_run(params, run, declaration, local_paths(), args.environment_dir, args.environment)
    preflight = None if args.no_preflight else run_preflight(plan)
    return dry_run_document(
        plan,
        lambda task_id: job_name(declaration.dag_id, DRY_RUN_ID, task_id, installation=plan.installation),
        preflight=preflight,
        check_platform=not args.no_preflight,
    )


def run_preflight(plan: Any) -> dict[str, Any]:
    """Every preflight group of the plan's backend, as the DAG's preflight task group runs them."""
    from aliyun_training.findings import Finding, PreflightReport
    from aliyun_training.operators.preflight import group_findings, group_table

    findings: list[Finding] = []
    for group in backend_record(plan.backend).preflight_groups:
        found = group_findings(group, plan.job, plan.preflight)
        print(group_table(group, found), file=sys.stderr)
        findings += found
    return PreflightReport(findings=findings).model_dump(mode="json")


def champion_command(args: argparse.Namespace) -> int:
    """``champion show`` and ``champion rollback``, against the deployment's metadata database."""
    import getpass

    from airflow.utils.session import create_session

    from aliyun_training.champion import RollbackRefused, named
    from aliyun_training.rollback import champion_standing, roll_back_champion

    with create_session() as session:
        if args.action == "show":
            standing = champion_standing(session, args.pipeline)
            print(f"champion: {named(standing.current) if standing.current else 'none yet'}")
            for past in standing.history:
                how = f"rolled back by {past.by}" if past.left == "rolled back" else "replaced"
                print(f"  before: {named(past.champion)}, {how} {past.until:%Y-%m-%d %H:%M} UTC")
            return 0
        try:
            done = roll_back_champion(session, args.pipeline, args.to, getpass.getuser())
        except RollbackRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    again = f"the champion is {named(done.champion)} again, in place of {named(done.replaced)}"
    print(f"{args.pipeline}: {again}")
    return 0
