"""Form values never escape their quoting, on any backend's command path.

Each pipeline parameter's value reaches a shell: the local backend's node supervisor runs the
command with ``bash -c``, PAI-DLC runs the CreateJob ``UserCommand`` (``cd <code dir> && <command>``)
in the image's shell, and the ACK pods run ``sh -c <command>``. Here hostile values of every
parameter type go through the trigger form's checks and the run's plan, then through each backend
as far as the platform receives them (the real local job; the body the DLC emulator stored; the CR
the Kubernetes fake stored), and that exact text runs in ``sh`` and ``bash``: the program gets each
value as one argument, byte for byte, and nothing the value says is executed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from aliyun_training.backends.ack.backend import AckBackend
from aliyun_training.backends.local import LocalBackend
from aliyun_training.declaration import DeclarationError, PipelineDeclaration, declare
from aliyun_training.plan.inputs import RunContext
from aliyun_training.plan.resolve import resolve_run
from aliyun_training.settings import LocalPaths
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.cloud import arena_job, dlc_backend, dlc_job, use_alibaba_connection
from fakes.dlc import DlcEmulator
from fakes.environment_files import INSTALLATION
from fakes.kube import NS, kubernetes_fake

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fakes.kubernetes_fake import KubernetesFake

AK, SK = "LTAI-injection-test", "injection-test-secret"
#: What a triggerer could type into a string parameter to run something or break the command.
HOSTILE_TEMPLATES = [
    "$(touch {canary})",
    "`touch {canary}`",
    "x'y",
    'say "hi"',
    "'; touch {canary}; '",
    '"; touch {canary}; "',
    "a;touch {canary}",
    "a|touch {canary}",
    "a&&touch {canary}",
    "a\ntouch {canary}",
    ">{canary}",
    "\\",
    "\\'",
    "$HOME ${IFS} $$",
    "*",
    "~root",
    "--help",
    "-n",
    " leading and trailing ",
    "",
    "é 中 \t tab",
    "{not a placeholder}",
]
#: An enum's values are the administrator's, but quoted like any value.
ENUM = ["plain", "two words", "it's"]
#: Values of the other types that try to smuggle shell text: refused by the form's schema.
REFUSED = [
    ("count", "1; touch /tmp/x"),
    ("count", "$(id)"),
    ("rate", "0.5 && id"),
    ("flag", "true; id"),
    ("mode", "plain; id"),
]


def _declaration(code_dir: Path) -> PipelineDeclaration:
    names = [f"s{index}" for index in range(len(HOSTILE_TEMPLATES))]
    arguments = " ".join(f"{{{name}}}" for name in [*names, "mode", "count", "rate", "flag"])
    parameters: dict[str, Any] = {name: {"type": "string", "default": "x"} for name in names}
    parameters |= {
        "mode": {"type": "string", "default": "plain", "enum": ENUM},
        "count": {"type": "integer", "default": 1, "minimum": -5, "maximum": 5},
        "rate": {"type": "number", "default": 0.5},
        "flag": {"type": "boolean", "default": False},
    }
    return declare(
        {
            "pipeline": {"dag_id": "injection_probe"},
            "dataset": {"name": "probe"},
            "training": {
                "code_dir": str(code_dir),
                "command": f"""printf '%s\\0' {arguments} > "$OUTPUT_DIR/argv" """,
            },
            "parameters": parameters,
        },
        base_dir=code_dir,
    )


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The declaration, the hostile form, the values the program must receive and the canary file."""
    canary = tmp_path / "PWNED"
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    values = [template.replace("{canary}", str(canary)) for template in HOSTILE_TEMPLATES]
    form = {f"s{index}": value for index, value in enumerate(values)}
    form |= {"mode": "it's", "count": -3, "rate": 2.5e-3, "flag": True}
    expected = [*values, "it's", "-3", "0.0025", "true"]
    yield {"declaration": _declaration(code_dir), "form": form, "expected": expected, "canary": canary}
    assert not canary.exists(), "a value ran as a command"


def _command(probe: dict[str, Any], tmp_path: Path) -> str:
    """The job command the run's plan renders from the hostile form (configure's own path)."""
    version = tmp_path / "local" / "object-store" / "probe" / "v1"
    version.mkdir(parents=True)
    (version / "_SUCCESS").touch()
    plan = resolve_run(
        {"backend": "local", "dataset_version": "v1", **probe["form"]},
        RunContext(datetime.now(UTC), INSTALLATION),
        probe["declaration"],
        LocalPaths(tmp_path / "local"),
        tmp_path / "config",
    )
    return plan.job.spec.command


def _received(output_dir: Path) -> list[str]:
    return (output_dir / "argv").read_bytes().decode().split("\0")[:-1]


def _run_in_shells(argv: list[str], output_dir: Path, cwd: Path) -> dict[str, list[str]]:
    """Run a platform's shell invocation (``[shell, "-c", text]``) in sh and in bash."""
    received = {}
    for shell in ("/bin/sh", "/bin/bash"):
        (output_dir / "argv").unlink(missing_ok=True)
        env = {"PATH": os.environ["PATH"], "OUTPUT_DIR": str(output_dir), "HOME": str(cwd)}
        subprocess.run([shell, *argv[1:]], cwd=cwd, env=env, check=True, timeout=30)
        received[shell] = _received(output_dir)
    return received


def test_every_hostile_value_reaches_a_local_job_as_one_argument(
    probe: dict[str, Any], tmp_path: Path
) -> None:
    spec = TrainingJobSpec(
        command=_command(probe, tmp_path),
        working_dir=str(tmp_path / "code"),
        output_dir=str(tmp_path / "out"),
    )
    (tmp_path / "out").mkdir()
    backend = LocalBackend(root=str(tmp_path / "runs"), stop_grace_seconds=2)

    handle = backend.submit(spec, "injection-probe")
    deadline = time.monotonic() + 60
    while not (status := backend.status(handle)).state.is_terminal and time.monotonic() < deadline:
        time.sleep(0.1)

    assert status.state.value == "succeeded", backend.tail(handle, 0)
    assert _received(tmp_path / "out") == probe["expected"]


@pytest.fixture
def dlc(monkeypatch: pytest.MonkeyPatch) -> Iterator[DlcEmulator]:
    with DlcEmulator({AK: SK}) as emulator:
        use_alibaba_connection(monkeypatch, {"dlc": emulator.endpoint}, AK, SK)
        yield emulator
        assert emulator.internal_errors == []


def test_every_hostile_value_reaches_a_dlc_job_as_one_argument(
    probe: dict[str, Any], tmp_path: Path, dlc: DlcEmulator
) -> None:
    workdir = tmp_path / "workspace"  # the image's code_dir, which UserCommand changes into
    workdir.mkdir()
    spec = TrainingJobSpec.parse(dlc_job(command=_command(probe, tmp_path), working_dir=str(workdir)))

    dlc_backend(workspace_id="ws-1").submit(spec, "injection-probe")

    (create,) = dlc.requests_for("CreateJob")
    user_command = create.body["UserCommand"]
    assert user_command.startswith(f"cd {workdir} && printf")
    received = _run_in_shells(["sh", "-c", user_command], tmp_path, workdir)
    assert received == {"/bin/sh": probe["expected"], "/bin/bash": probe["expected"]}


@pytest.fixture
def ack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, conn_id="ack_probe") as server:
        yield server


@pytest.mark.slow
def test_every_hostile_value_reaches_an_ack_job_as_one_argument(
    probe: dict[str, Any], tmp_path: Path, ack: KubernetesFake
) -> None:
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    spec = TrainingJobSpec.parse(arena_job(command=_command(probe, tmp_path), working_dir=str(workdir)))

    backend = AckBackend(kubernetes_conn_id="ack_probe", namespace=NS)
    backend.submit(spec, "injection-probe")

    listed = backend._hook().custom_object_client.list_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs"
    )
    (job,) = listed["items"]
    containers = [
        replica["template"]["spec"]["containers"][0]
        for replica in job["spec"]["pytorchReplicaSpecs"].values()
    ]
    for container in containers:
        assert container["command"][:2] == ["sh", "-c"] and container["workingDir"] == str(workdir)
        received = _run_in_shells(container["command"], tmp_path, workdir)
        assert received == {"/bin/sh": probe["expected"], "/bin/bash": probe["expected"]}


@pytest.mark.parametrize(("field", "value"), REFUSED, ids=[f"{f}={v!r}" for f, v in REFUSED])
def test_values_of_other_types_that_carry_shell_text_are_refused_before_anything_runs(
    probe: dict[str, Any], tmp_path: Path, field: str, value: Any
) -> None:
    probe["form"][field] = value

    with pytest.raises(SpecError, match=rf"^Invalid trigger form values:\n  - {field}: "):
        _command(probe, tmp_path)
    assert not (tmp_path / "local" / "runs").exists()


def test_the_rendered_command_is_the_form_values_shell_quoted(probe: dict[str, Any], tmp_path: Path) -> None:
    """What the dry run shows is the text the shells above ran: no other rendering exists."""
    command = _command(probe, tmp_path)

    assert "'$(touch " in command and "'x'\"'\"'y'" in command
    assert json.dumps(command)  # one JSON string: the dry run and the manifest carry it as is


#: Templates where bash reads a shell-quoted value as code: each ran ``a[$(touch canary)]``.
CODE_CONTEXTS = [
    "[[ {x} -eq 1 ]]",
    "(( {x} ))",
    "echo $(( {x} + 1 ))",
    "let n={x}",
    "printf -v {x} %s 1",
    "declare -n ref={x}; echo $ref",
    "declare -i n={x}",
    "read {x} < /dev/null",
    "[ -v {x} ]",
    "eval {x}",
    "sh -c {x}",
    "bash -c {x}",
    "echo {x} | bash",
    "echo {x} | sh",
]
#: The fixes the refusals name, which run nothing whatever the value.
SAFE_FORMS = [
    "[ {x} -eq 1 ]",
    "sh -c 'echo \"$1\"' sh {x}",
    'export X={x}; printf %s "$X"',
    "printf -v name %s {x}",
]


def _declare_command(template: str, code_dir: Path) -> PipelineDeclaration:
    """A pipeline whose command is ``template``, with one string parameter ``x``."""
    return declare(
        {
            "pipeline": {"dag_id": "code_context"},
            "dataset": {"name": "probe"},
            "training": {"code_dir": str(code_dir), "command": template},
            "parameters": {"x": {"type": "string", "default": "1"}},
        },
        base_dir=code_dir,
    )


def _render(template: str, value: str) -> str:
    """The template rendered as ``render_command`` renders a parameter: shell-quoted."""
    return template.format(x=shlex.quote(value))


@pytest.mark.parametrize("template", CODE_CONTEXTS)
def test_a_placeholder_where_bash_reads_code_is_refused_at_load_and_would_have_run(
    tmp_path: Path, template: str
) -> None:
    canary = tmp_path / "PWNED"

    with pytest.raises(
        DeclarationError, match=r"training\.command: \{x\} is .*where bash reads a value as code \(fix: "
    ):
        _declare_command(template, tmp_path)
    # What the refusal prevents: rendered anyway, the quoted value runs its command in bash.
    subprocess.run(["bash", "-c", _render(template, f"a[$(touch {canary})]")], cwd=tmp_path, check=False)
    assert canary.exists(), f"{template!r} would not have run the value: the refusal is not needed"
    canary.unlink()


@pytest.mark.parametrize("template", SAFE_FORMS)
def test_the_fixes_the_refusals_name_load_and_run_nothing(tmp_path: Path, template: str) -> None:
    canary = tmp_path / "PWNED"

    assert _declare_command(template, tmp_path).training.command == template
    for shell in ("sh", "bash"):
        subprocess.run([shell, "-c", _render(template, f"a[$(touch {canary})]")], cwd=tmp_path, check=False)
    assert not canary.exists(), f"{template!r} ran the value"
