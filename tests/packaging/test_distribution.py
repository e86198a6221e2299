"""The wheel: what it holds, and that Airflow finds the provider and its plugin once it is installed.

The slow tests share one wheel, built from a copy of the sources (an in-tree build would leave
build/ and an egg-info behind), and one fresh virtual environment it is installed into with its own
dependencies only (Airflow, pinned by constraints.txt, from uv's cache). The first asks Airflow's
ProvidersManager there, in a process that has neither plugins/ nor this project's environment
variables. The same process then runs the README guide's commands, ``airflow db migrate`` and
``airflow dags test``, through the function the ``airflow`` script calls: a fresh environment has no
bytecode yet, so each further interpreter would import (and compile) Airflow again, for nothing the
commands check. A shell then runs the README install section's copy of the example environment files
out of the installed package. The second starts Airflow's API server with Airflow's defaults, as a
deployment that only installed the wheel has it, and signs in to read the plugin and its pages.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import zipfile
from importlib.metadata import EntryPoint
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from aliyun_training.pages.urls import PREFIX
from aliyun_training.plugin import AliyunTrainingPlugin
from aliyun_training.provider_info import PLUGIN_NAME, get_provider_info

PROJECT_DIR = Path(__file__).resolve().parents[2]
PACKAGE_DIR = PROJECT_DIR / "plugins" / "aliyun_training"
#: The environment files with placeholder ids, which the package links to as environment_examples.
EXAMPLES_DIR = PROJECT_DIR / "include" / "config" / "examples"
UV = Path(sys.executable).parent / "uv"
ENTRY_POINT = "provider_info = aliyun_training.provider_info:get_provider_info"
PLUGIN_ENTRY_POINT = f"{PLUGIN_NAME} = aliyun_training.plugin:AliyunTrainingPlugin"
PROVIDER = "aliyun-training-pipelines"
#: The slow tests share the wheel and its environment, so they run on one pytest-xdist worker.
SHARES_THE_WHEEL = pytest.mark.xdist_group("wheel")
pytestmark = pytest.mark.slow
#: The user Airflow's simple auth manager has by default, and the file it writes the password to.
ADMIN = "admin"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"

#: What the installed provider must give Airflow, run by the fresh environment's Python. Each check
#: is an ``assert``; a later one can be appended below the last.
INSTALLED_PROVIDER_CHECKS = """
import aliyun_training
from airflow.providers_manager import ProvidersManager

assert "site-packages" in aliyun_training.__file__, aliyun_training.__file__
manager = ProvidersManager()
assert "aliyun-training-pipelines" in manager.providers, sorted(manager.providers)

hooks = {m.connection_type: m.hook_class_name for m in manager.iter_connection_type_hook_ui_metadata()}
assert hooks.get("alibaba_cloud") == "aliyun_training.hooks.alibaba_cloud.AlibabaCloudHook", hooks

links = set(manager.extra_links_class_names)
assert {"aliyun_training.links.TrainingJobConsoleLink", "aliyun_training.links.RunPlanLink"} <= links, links

widgets = {key for key in manager.connection_form_widgets if key.startswith("extra__alibaba_cloud__")}
fields = {"access_key_id", "access_key_secret", "security_token", "role_arn", "role_session_name", "region",
          "protocol"}
assert widgets == {f"extra__alibaba_cloud__{name}" for name in fields}, widgets
assert manager.field_behaviours["alibaba_cloud"]["hidden_fields"], manager.field_behaviours["alibaba_cloud"]

triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == "aliyun-training-pipelines"}
assert "aliyun_training.triggers.training" in triggers, triggers

from aliyun_training.pipelines import load_pipelines, training_pipeline  # the DAG factory imports
"""

#: The guide's local run on two nodes (the form's defaults otherwise: the newest version, 3 epochs).
GUIDE_CONF = {"nodes": 2}

#: Run after the checks, in their process: the CLI commands, as ``airflow <argv...>`` runs each, then
#: the run's state (``dags test`` exits non-zero only for a failed run, not for one left unfinished).
GUIDE_COMMANDS = f"""
import sys
from airflow.__main__ import main
from airflow.models.dagrun import DagRun

for argv in (["db", "migrate"], ["dags", "test", "digits_retrain", "-c", {json.dumps(GUIDE_CONF)!r}]):
    sys.argv = ["airflow", *argv]
    main()
(run,) = DagRun.find(dag_id="digits_retrain")
assert run.state == "success", run.state
"""

#: The README's guide, run by the fresh environment: the DAG file loads the folder, dag.test runs it.
GUIDE_DAG_FILE = """
\"\"\"The Airflow DAG file of the guide's pipelines (Airflow parses files that name airflow and DAG).\"\"\"
import os
from aliyun_training.pipelines import load_pipelines

globals().update(load_pipelines(os.environ["ALIYUN_TRAINING_PIPELINES_DIR"]))
"""


def test_provider_info_imports_only_the_standard_library() -> None:
    """Every Airflow process calls get_provider_info; it must not import Airflow, an SDK or the package."""
    tree = ast.parse((PACKAGE_DIR / "provider_info.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} <= sys.stdlib_module_names | {"__future__"}


def test_provider_info_names_every_hook_trigger_and_link_module() -> None:
    """A new hook, trigger or link module is registered, or deliberately left out here."""
    info = get_provider_info()
    (hooks,) = (entry["python-modules"] for entry in info["hooks"])
    (triggers,) = (entry["python-modules"] for entry in info["triggers"])
    assert set(hooks) == _modules(
        "hooks", helpers={"paging", "retry", "credentials", "rate_limit", "prometheus"}
    )
    # base: the abstract PollingTrigger; fleet: the poller triggers share
    assert set(triggers) == _modules("triggers", helpers={"base", "fleet"})
    tree = ast.parse((PACKAGE_DIR / "links.py").read_text())
    link_bases = {"BaseOperatorLink", "_StoredUrlLink", "_RunPageLink"}
    links = {
        f"aliyun_training.links.{node.name}"
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and any(ast.unparse(base) in link_bases for base in node.bases)
    }
    assert set(info["extra-links"]) == links


def test_the_distribution_declares_the_plugin_as_an_airflow_plugins_entry_point() -> None:
    """Airflow loads that group in every process with its default settings, and a provider's
    metadata plugins only with ``lazy_discover_providers`` off: declared in both, the plugin would be
    registered twice there, the second time reported as an import error."""
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["entry-points"]
    [(name, value)] = declared["airflow.plugins"].items()

    assert EntryPoint(name, value, "airflow.plugins").load() is AliyunTrainingPlugin
    assert name == AliyunTrainingPlugin.name == PLUGIN_NAME
    assert "plugins" not in get_provider_info()


def test_airflow_prints_every_text_of_the_provider_literally() -> None:
    """``airflow providers get --full`` prints each value's ``str()`` in a rich table, which reads
    ``:name:`` as an emoji (``acs:ram::`` printed a ram) and ``[word]`` as a style tag."""
    info = get_provider_info()
    console = Console()
    texts = [str(value) for value in info.values()] + list(_strings(info))

    assert [text for text in texts if console.render_str(text).plain != text] == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a fresh virtual environment with the wheel installed."""
    return _install(wheel, tmp_path_factory.mktemp("installed") / "venv")


@SHARES_THE_WHEEL
def test_the_wheel_installs_a_provider_airflow_finds(wheel: Path, python: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        declared = archive.read(entry_points).decode()
        assert f"[apache_airflow_provider]\n{ENTRY_POINT}\n" in declared
        assert f"[airflow.plugins]\n{PLUGIN_ENTRY_POINT}\n" in declared
        examples = {
            name.removeprefix("aliyun_training/environment_examples/"): archive.read(name)
            for name in names
            if name.startswith("aliyun_training/environment_examples/")
        }
    packaged = {name for name in names if name.startswith("aliyun_training/")}
    assert "aliyun_training/provider_info.py" in packaged
    assert packaged == _package_files(), "every file of the package, and only those"
    assert examples == {path.name: path.read_bytes() for path in EXAMPLES_DIR.glob("*.json")}
    assert {"dlc.json", "arena.json"} <= set(examples)

    work = tmp_path / "work"
    work.mkdir()
    guide = _write_guide(tmp_path / "guide")
    # Set before the first Airflow command, which writes airflow.cfg (its DAG bundle) from them.
    env = _clean_environment() | {
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(guide),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "ALIYUN_TRAINING_PIPELINES_DIR": str(guide / "pipelines"),
        "ALIYUN_TRAINING_LOCAL_ROOT": str(guide),
    }
    installed = subprocess.run(
        [str(python), "-c", INSTALLED_PROVIDER_CHECKS + GUIDE_COMMANDS],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, f"{installed.stdout[-3000:]}\n{installed.stderr[-3000:]}"

    config = tmp_path / "config"
    copied = subprocess.run(
        ["bash", "-c", _readme_block("install:examples", "bash")],
        cwd=work,
        env=env | {"PATH": f"{python.parent}:{env['PATH']}", "ALIYUN_TRAINING_ENVIRONMENT_DIR": str(config)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert copied.returncode == 0, copied.stderr[-3000:]
    assert {path.name: path.read_bytes() for path in (config / "examples").iterdir()} == examples

    (manifest_path,) = (guide / "artifacts" / "digits" / "v1").glob("*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["dataset"]["version"] == "v1", "an empty version is the newest in the source"
    assert manifest["metrics"]["epochs"] == 3
    assert manifest["metrics"]["final_train_loss"] < manifest["metrics"]["train_loss"][0]


@SHARES_THE_WHEEL
def test_the_installed_plugin_serves_its_pages_with_airflows_defaults(python: Path, tmp_path: Path) -> None:
    """Nothing configured but a fresh home: the lazy provider discovery, no plugins folder holding
    the package, the simple auth manager and its generated admin password, as a user signs in."""
    home = tmp_path / "airflow-home"
    env = _clean_environment() | {"AIRFLOW_HOME": str(home)}
    airflow = python.parent / "airflow"
    _run(airflow, "db", "migrate", env=env)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "api-server.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            cwd=tmp_path,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_until_healthy(url, server, log)
        password = json.loads((home / PASSWORDS_FILE).read_text())[ADMIN]
        credentials = {"username": ADMIN, "password": password}
        signed_in = httpx.post(f"{url}/auth/token", json=credentials, timeout=30)
        assert signed_in.status_code == 201, signed_in.text
        token = signed_in.json()["access_token"]
        with httpx.Client(base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {token}"}) as api:
            plugins = api.get("/plugins", params={"limit": 100}, timeout=60).json()["plugins"]
            errors = api.get("/plugins/importErrors", timeout=60).json()

        [plugin] = (found for found in plugins if found["name"] == PLUGIN_NAME)
        assert plugin["source"].startswith(f"{PROVIDER}=="), "loaded from the wheel's entry point"
        assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == [PREFIX]
        assert [view["url_route"] for view in plugin["external_views"]] == ["aliyun-training"]
        assert errors == {"import_errors": [], "total_entries": 0}

        # The UI's login keeps the token in this cookie; a page opened without it goes to the login.
        page = f"{url}{PREFIX}/"
        index = httpx.get(page, cookies={"_token": token}, headers={"Accept": "text/html"}, timeout=60)
        anonymous = httpx.get(page, headers={"Accept": "text/html"}, timeout=60)
        assert index.status_code == 200 and "<h1>Training pipelines</h1>" in index.text, index.text[:500]
        assert anonymous.status_code == 307 and "login" in anonymous.headers["location"]
    finally:
        _stop(server)


def _clean_environment() -> dict[str, str]:
    """This process's environment less Python's path and every Airflow, project and pytest setting."""
    return {
        name: value
        for name, value in os.environ.items()
        if name != "PYTHONPATH" and not name.startswith(("AIRFLOW", "ALIYUN_TRAINING", "PYTEST"))
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_healthy(url: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> None:
    """Until the server answers its health check; its log when it exits or does not answer in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/api/v2/monitor/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise AssertionError(f"the API server did not answer in {timeout} s: {log.read_text()[-3000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    """The server and the workers it started (its session): what outlives a grace period is killed."""
    with contextlib.suppress(ProcessLookupError):  # the whole session has exited already
        os.killpg(server.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def _write_guide(root: Path) -> Path:
    """The README guide's declaration, script and a version, and a DAG file loading the folder."""
    declaration = _readme_block("guide:declaration", "yaml")
    script = _readme_block("guide:train.py", "python")
    (root / "pipelines" / "digits").mkdir(parents=True)
    (root / "pipelines" / "digits.yaml").write_text(declaration)
    (root / "pipelines" / "digits" / "train.py").write_text(script)
    version = root / "object-store" / "digits" / "v1"
    version.mkdir(parents=True)
    (version / "samples.txt").write_text("1 2 3")
    (version / "_SUCCESS").touch()  # as the guide's upload does: a run takes only a landed version
    (root / "dag.py").write_text(GUIDE_DAG_FILE)
    return root


def _strings(value: object) -> list[str]:
    """Every string inside ``value``, a provider info's nesting of dicts and lists."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _readme_block(marker: str, language: str) -> str:
    """The README's code block under ``<!-- marker -->``, as the reader copies it."""
    readme = (PROJECT_DIR / "README.md").read_text()
    return readme.split(f"<!-- {marker} -->\n```{language}\n", 1)[1].split("```", 1)[0]


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    # The package's link to the examples stays a link, as in the repository the README builds in.
    shutil.copytree(PACKAGE_DIR, source / "plugins" / "aliyun_training", ignore=_ignored, symlinks=True)
    shutil.copytree(EXAMPLES_DIR, source / EXAMPLES_DIR.relative_to(PROJECT_DIR))
    shutil.copy2(PROJECT_DIR / "pyproject.toml", source)
    dist = tmp_path / "dist"
    _run(UV, "build", "--wheel", "--python", sys.executable, "--out-dir", dist, source)
    (wheel,) = dist.glob("*.whl")
    version = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name == f"{PROVIDER.replace('-', '_')}-{version}-py3-none-any.whl"
    return wheel


def _install(wheel: Path, venv: Path) -> Path:
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    _run(UV, "pip", "install", "--quiet", "--python", python, wheel, "-c", PROJECT_DIR / "constraints.txt")
    return python


def _modules(subpackage: str, helpers: set[str]) -> set[str]:
    """The dotted names of the subpackage's modules, less ``__init__`` and the named ``helpers``."""
    names = {path.stem for path in (PACKAGE_DIR / subpackage).glob("*.py")} - {"__init__", *helpers}
    return {f"aliyun_training.{subpackage}.{name}" for name in names}


def _package_files() -> set[str]:
    """The package's files as the wheel names them, less bytecode; a linked folder's files too."""
    return {
        f"aliyun_training/{(Path(folder) / name).relative_to(PACKAGE_DIR).as_posix()}"
        for folder, _, files in os.walk(PACKAGE_DIR, followlinks=True)
        if "__pycache__" not in Path(folder).parts
        for name in files
        if not name.endswith(".pyc")
    }


def _ignored(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc")}


def _run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, f"{command[1]}: {result.stdout[-3000:]}\n{result.stderr[-3000:]}"
