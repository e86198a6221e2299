"""A real Airflow 3 deployment on loopback, shaped like docker-compose.yaml, for end-to-end tests.

Each service (api-server, scheduler, dag-processor, triggerer and, with the CeleryExecutor, a Celery
worker) is its own process group with its own log file, in a throwaway AIRFLOW_HOME and a fresh
metadata database. PostgreSQL and Redis on 127.0.0.1 give the compose shape (CeleryExecutor);
without them the deployment falls back to the LocalExecutor on SQLite and says so.

Tests talk to it as users do: the public REST API (``/api/v2``, with a token from ``/auth/token``)
and the ``airflow`` CLI. Killing a service kills its whole process group, the way a container dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

PROJECT_DIR = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
ADMIN = "admin"
#: A user who may trigger runs and edit task instances, XComs and task state, and is no administrator
#: (the simple auth manager's ``user`` role): what the REST API lets such a user write is not believed.
USER = "mallory"
TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class DeploymentError(AssertionError):
    """The deployment did not reach the state a test waited for; the message says where to look."""


@dataclass(frozen=True)
class Backing:
    """The metadata database and executor the deployment runs on."""

    executor: str
    sql_alchemy_conn: str
    broker_url: str | None = None
    result_backend: str | None = None
    database: str | None = None

    @property
    def description(self) -> str:
        if self.executor == "CeleryExecutor":
            return "CeleryExecutor on PostgreSQL and Redis (127.0.0.1)"
        return "LocalExecutor on SQLite (PostgreSQL or Redis not reachable on 127.0.0.1)"


def _reachable(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def choose_backing(home: Path) -> Backing:
    """PostgreSQL + Redis when both answer on 127.0.0.1, each test session in its own database."""
    if _reachable(5432) and _reachable(6379):
        name = f"airflow_e2e_{uuid.uuid4().hex[:12]}"
        _postgres_admin(f'CREATE DATABASE "{name}"')
        url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
        return Backing(
            executor="CeleryExecutor",
            sql_alchemy_conn=url,
            broker_url="redis://127.0.0.1:6379/0",
            result_backend=f"db+postgresql+psycopg2://postgres@127.0.0.1:5432/{name}",
            database=name,
        )
    return Backing(executor="LocalExecutor", sql_alchemy_conn=f"sqlite:///{home / 'airflow.db'}")


def _postgres_admin(statement: str) -> None:
    import psycopg2

    connection = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1, below the kernel's ephemeral range.

    A service binds its port only after the database is migrated, tens of seconds after the port
    was picked; an ephemeral port (what binding port 0 returns) could meanwhile go to any emulator
    or client socket on the host. Ports below the ephemeral range are only ever taken by an
    explicit bind, so a deployment's ports stay its own until its services bind them.
    """
    low, _high = _ephemeral_range()
    candidates = list(range(max(1024, low - 12000), low))
    random.SystemRandom().shuffle(candidates)
    picked: list[int] = []
    for port in candidates:
        with contextlib.closing(socket.socket()) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        picked.append(port)
        if len(picked) == count:
            return picked
    raise RuntimeError(f"no {count} free ports below the ephemeral range starting at {low}")


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


class Deployment:
    """Airflow services as processes; REST and CLI access; kill and restart of single services."""

    def __init__(
        self,
        root: Path,
        env: Mapping[str, str],
        tuning: Mapping[str, str] | None = None,
        *,
        dags_folder: Path = PROJECT_DIR / "dags",
        worker_concurrency: int = 8,
        triggerer: bool = True,
    ) -> None:
        self.root = root
        #: Whether the deployment runs a triggerer (one whose tests defer nothing they wait on need none).
        self.triggerer = triggerer
        self.dags_folder = dags_folder
        self.worker_concurrency = worker_concurrency
        self.home = root / "airflow"
        self.logs = root / "service-logs"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.backing = choose_backing(self.home)
        # The API server's and, on ports of their own since deployments of several test modules
        # run side by side on this host, the worker's and the triggerer's log servers.
        self.port, self._worker_log_port, self._trigger_log_port = _free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        self.passwords = {ADMIN: self.password, USER: secrets.token_urlsafe(16)}
        self.queue = f"e2e-{uuid.uuid4().hex[:8]}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._restarts: dict[str, int] = {}
        self._tokens: dict[str, str] = {}
        (self.home / "passwords.json").write_text(json.dumps(self.passwords))
        self.env = self._environment(env, tuning or {})

    # -- configuration -----------------------------------------------------------------------------

    def _environment(self, extra: Mapping[str, str], tuning: Mapping[str, str]) -> dict[str, str]:
        """The services' whole environment: nothing of the test process's Airflow settings leaks in."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ALIYUN_TRAINING"))}
        settings = {
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_DIR / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": self.backing.executor,
            "AIRFLOW__CORE__FERNET_KEY": _fernet_key(),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin,{USER}:user",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.backing.sql_alchemy_conn,
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.root / "task-logs"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._worker_log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._trigger_log_port),
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            "PYTHONPATH": str(PROJECT_DIR / "plugins"),
        }
        if self.backing.executor == "CeleryExecutor":
            settings |= {
                "AIRFLOW__CELERY__BROKER_URL": self.backing.broker_url or "",
                "AIRFLOW__CELERY__RESULT_BACKEND": self.backing.result_backend or "",
            }
        return {**base, **settings, **tuning, **extra}

    def services(self) -> list[str]:
        names = ["api-server", "scheduler", "dag-processor", *(["triggerer"] if self.triggerer else [])]
        return [*names, "worker"] if self.backing.executor == "CeleryExecutor" else names

    def _command(self, name: str) -> list[str]:
        if name == "worker":
            return [
                AIRFLOW,
                "celery",
                "worker",
                "--queues",
                self.queue,
                # Its own node name on the shared broker, as each deployment's container would have.
                "--celery-hostname",
                f"{self.queue}@%h",
                "--concurrency",
                str(self.worker_concurrency),
            ]
        return [AIRFLOW, name]

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> None:
        self.cli("db", "migrate", timeout=timeout)
        for name in self.services():
            self.start_service(name)
        self._wait(lambda: self._healthy(), timeout, "every service to report healthy")

    def start_service(self, name: str) -> None:
        count = self._restarts.get(name, 0)
        self._restarts[name] = count + 1
        log = open(self.logs / f"{name}{f'.{count}' if count else ''}.log", "wb")  # noqa: SIM115
        self.processes[name] = subprocess.Popen(
            self._command(name),
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def kill_service(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill the service and every process it started, the way a container dies."""
        process = self.processes.pop(name, None)
        if process is not None:
            _kill([process], sig)

    def stop(self) -> None:
        """Stop every service, all at once, then drop the database: also when the tests failed."""
        processes, self.processes = list(self.processes.values()), {}
        _kill(processes, signal.SIGTERM)
        if self.backing.database:
            with contextlib.suppress(Exception):
                _postgres_admin(f'DROP DATABASE IF EXISTS "{self.backing.database}" WITH (FORCE)')

    def alive(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.poll() is None

    def service_pids(self, name: str) -> list[int]:
        """The service's process and every process it started, task processes included."""
        return list(process_tree(self.processes[name].pid))

    def _healthy(self) -> bool:
        for name in self.processes:
            if not self.alive(name):
                raise DeploymentError(f"{name} exited; see {self.logs / (name + '.log')}")
        try:
            health = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
        except httpx.HTTPError:
            return False
        parts = ["metadatabase", "scheduler", "dag_processor", *(["triggerer"] if self.triggerer else [])]
        return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

    # -- REST API ----------------------------------------------------------------------------------

    def api(self, method: str, path: str, *, user: str = ADMIN, **kwargs: Any) -> httpx.Response:
        """A request to the REST API as ``user`` (the administrator unless named)."""
        if user not in self._tokens:
            answer = httpx.post(
                f"{self.url}/auth/token",
                json={"username": user, "password": self.passwords[user]},
                timeout=30,
            )
            answer.raise_for_status()
            self._tokens[user] = answer.json()["access_token"]
        headers = {"Authorization": f"Bearer {self._tokens[user]}"}
        return httpx.request(method, f"{self.url}/api/v2{path}", headers=headers, timeout=60, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.api(method, path, **kwargs)
        if answer.status_code >= 300:
            raise DeploymentError(f"{method} {path}: {answer.status_code} {answer.text[:500]}")
        return answer.json() if answer.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        self._wait(lambda: self.api("GET", f"/dags/{dag_id}").status_code == 200, timeout, f"{dag_id} parsed")

    def unpause(self, dag_id: str) -> None:
        self.ok("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.ok("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def mark_run_failed(self, dag_id: str, run_id: str) -> None:
        """Mark the run failed as the UI's button does, once more after a second where the API
        server answered a database error: marking a run failed while one of its tasks starts can
        fail in the metadata database (seen once in CI: the UPDATE of the run failed after one
        second, the time PostgreSQL waits before it reports a deadlock), as a person would click
        again."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}"
        for _ in range(2):
            answer = self.api("PATCH", path, json={"state": "failed"})
            if answer.status_code != 500 or "Database error" not in answer.text:
                break
            time.sleep(1)
        if answer.status_code >= 300:
            raise DeploymentError(f"PATCH {path}: {answer.status_code} {answer.text[:500]}")

    def delete_run(self, dag_id: str, run_id: str) -> None:
        """Delete a run as the UI does; Airflow deletes only runs that are not running (409)."""
        self.ok("DELETE", f"/dags/{dag_id}/dagRuns/{run_id}")

    def trigger(self, dag_id: str, conf: dict[str, Any], logical_date: str, run_id: str | None = None) -> str:
        """Trigger a run (``run_id``: its id, else Airflow's ``manual__<now>``); the run's id."""
        body: dict[str, Any] = {"conf": conf, "logical_date": logical_date}
        if run_id:
            body["dag_run_id"] = run_id
        return self.ok("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"]

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        answer = self.ok("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.ok("GET", path, params={"deserialize": True})["value"]

    def mark_failed(self, dag_id: str, run_id: str, task_id: str) -> None:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        self.ok("PATCH", path, json={"new_state": "failed"})

    def clear_task(self, dag_id: str, run_id: str, task_id: str) -> None:
        """Clear the task and everything downstream of it, as the UI's default clear does."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": [task_id],
            "only_failed": False,
            "include_downstream": True,
        }
        self.ok("POST", f"/dags/{dag_id}/clearTaskInstances", json=body)

    def asset_events(self, asset_name: str) -> list[dict[str, Any]]:
        assets = self.ok("GET", "/assets", params={"name_pattern": asset_name})["assets"]
        if not assets:
            return []
        return self.ok("GET", "/assets/events", params={"asset_id": assets[0]["id"], "limit": 100})[
            "asset_events"
        ]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        state: dict[str, str] = {}

        def finished() -> bool:
            state["now"] = self.run_state(dag_id, run_id)
            return state["now"] in TERMINAL_RUN_STATES

        self._wait(finished, timeout, f"run {run_id} to finish", lambda: self.task_states(dag_id, run_id))
        return state["now"]

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, states: set[str], timeout: float) -> str:
        seen: dict[str, str | None] = {}

        def reached() -> bool:
            seen["now"] = self.task_instance(dag_id, run_id, task_id)["state"]
            return seen["now"] in states

        self._wait(reached, timeout, f"{task_id} in {sorted(states)}", lambda: seen)
        return str(seen["now"])

    # -- CLI ---------------------------------------------------------------------------------------

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [AIRFLOW, *args], env=self.env, cwd=self.root, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise DeploymentError(
                f"airflow {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}"
            )
        return result

    # -- helpers -----------------------------------------------------------------------------------

    def _wait(
        self,
        condition: Callable[[], bool],
        timeout: float,
        what: str,
        details: Callable[[], Any] | None = None,
    ) -> None:
        wait_until(condition, timeout, what, details, where=f"logs in {self.logs}")


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    details: Callable[[], Any] | None = None,
    *,
    interval: float = 1.0,
    where: str = "",
) -> None:
    """Poll ``condition`` until it holds; past ``timeout`` fail naming ``what`` and the last ``details``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    extra = f"; last seen: {details()}" if details else ""
    raise DeploymentError(
        f"timed out after {timeout:.0f} s waiting for {what}{extra}" + (f"; {where}" if where else "")
    )


def parent_pids() -> dict[int, int]:
    """The parent pid of every live process, from /proc (the command name in ``stat`` may hold spaces)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                table[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
    return table


def process_tree(root: int, parent_of: Mapping[int, int] | None = None) -> dict[int, int]:
    """``root`` and every live process below it, by parent pid, each with its depth below ``root``."""
    children: defaultdict[int, list[int]] = defaultdict(list)
    for pid, parent in (parent_pids() if parent_of is None else parent_of).items():
        children[parent].append(pid)
    depth, queue = {root: 0}, [root]
    for pid in queue:
        for child in children[pid]:
            depth[child] = depth[pid] + 1
            queue.append(child)
    return depth


def _kill(processes: list[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    """Send ``sig`` to the services' process groups, give them 10 s, then SIGKILL what is left.

    Airflow's task supervisor puts each task process in a process group of its own, so a
    service's descendants are found by parent pid (before the signal: a dead parent's children
    are orphans no tree leads to), not by its process group.
    """
    trees = [process_tree(process.pid) for process in processes]
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
    for process, tree in zip(processes, trees, strict=True):
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        for pid in [*tree, *process_tree(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


@contextlib.contextmanager
def deployment(
    root: Path, env: Mapping[str, str], tuning: Mapping[str, str], **options: Any
) -> Iterator[Deployment]:
    """A started deployment that is stopped, with its database dropped, however the block exits."""
    airflow = Deployment(root, env, tuning, **options)
    try:
        airflow.start()
        yield airflow
    finally:
        airflow.stop()
