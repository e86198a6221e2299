"""The deployment's identity among those sharing one cloud account and registry (its installation
id, and whether it keeps MLflow's plain aliases) and how its triggerer watches jobs. Read from
Airflow's configuration wherever the package runs (tasks, triggers, the API server's pages, the
command line), so every component of one deployment names it alike.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

from aliyun_training.provider_info import (
    BATCHED_STATUS_OPTION,
    CONFIG_SECTION,
    INSTALLATION_OPTION,
    PLAIN_ALIASES_OPTION,
    STEADY_LOG_OPTION,
)
from aliyun_training.spec import INSTALLATION_PATTERN
from aliyun_training.validation import SpecError


def installation_id() -> str:
    """The deployment's ``[aliyun_training] installation_id``, else one derived from its API server.

    The default hashes the address of the deployment's API server, which every worker needs to run a
    task (``[core] execution_api_server_url``, else ``[api] base_url``, as Airflow itself derives
    the one from the other): two deployments have two API servers. The metadata database would be
    the natural identity, but Airflow 3 hides its address from task, callback and trigger processes.
    """
    from airflow.providers.common.compat.sdk import conf

    configured = (conf.get(CONFIG_SECTION, INSTALLATION_OPTION, fallback="") or "").strip()
    if configured:
        if not re.fullmatch(INSTALLATION_PATTERN, configured):
            raise SpecError(
                f"[{CONFIG_SECTION}] {INSTALLATION_OPTION}: {configured!r} is not an installation id "
                "(fix: lower-case letters, digits and '-', at most 40 characters, e.g. ml-prod)"
            )
        return configured
    execution = conf.get("core", "execution_api_server_url", fallback=None)
    return derived_installation_id(
        execution or conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL
    )


#: The API server's address Airflow assumes when neither setting names one.
DEFAULT_BASE_URL = "http://localhost:8080"


def plain_registry_aliases() -> bool:
    """Whether this deployment also keeps MLflow's plain ``champion``/``challenger`` aliases
    (``[aliyun_training] plain_registry_aliases``): one deployment per store, its production one."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean(CONFIG_SECTION, PLAIN_ALIASES_OPTION, fallback=False)


#: Seconds between reads of a steadily running job's logs when the triggerer watches it with others
#: (``[aliyun_training] steady_log_seconds``): at 90 s and a 10 s poll, a thousand running one-node
#: DLC jobs cost 0.73 requests per job a minute (docs/benchmarks.md).
DEFAULT_STEADY_LOG_SECONDS = 90.0


def batched_status() -> bool:
    """Whether a triggerer's training triggers share one status listing per account and workspace
    or namespace (``[aliyun_training] batched_status``, default True; ``triggers/fleet.py``)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean(CONFIG_SECTION, BATCHED_STATUS_OPTION, fallback=True)


def steady_log_seconds() -> float:
    """Seconds between log reads of a watched job whose state has not changed
    (``[aliyun_training] steady_log_seconds``)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getfloat(CONFIG_SECTION, STEADY_LOG_OPTION, fallback=DEFAULT_STEADY_LOG_SECONDS)


def derived_installation_id(api_url: str) -> str:
    """``af-<hash>`` of the API server's scheme, host, port and path (the execution API's
    ``/execution/`` suffix left off, so a component that sets only the base URL agrees)."""
    url = urlsplit(api_url.strip())
    path = url.path.rstrip("/").removesuffix("/execution")
    address = f"{url.scheme.lower()}://{(url.hostname or '').lower()}:{url.port or ''}{path}"
    return f"af-{hashlib.sha256(address.encode()).hexdigest()[:10]}"
