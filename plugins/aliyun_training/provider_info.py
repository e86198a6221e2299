"""What Airflow's ProvidersManager learns about this distribution, without importing any of it.

pyproject.toml registers :func:`get_provider_info` as the ``apache_airflow_provider`` entry point.
Every Airflow process that lists providers (API server, scheduler, triggerer, workers, the CLI)
calls it, so this module imports nothing: hooks, links and triggers are named by path and imported
only where they are used.

The ``alibaba_cloud`` connection form is declared here (``conn-fields``, ``ui-field-behaviour``),
which is how Airflow 3.2+ reads a form: from the provider's metadata, with no hook import and no
wtforms (Airflow 3 installs neither wtforms nor Flask-AppBuilder unless the FAB provider is
installed). A field's name is the extra the hook reads; the form writes it unprefixed, and writes
``null`` for a field left empty, which ``AlibabaCloudHook.load_extras`` treats as absent.

``airflow providers get --full`` prints these texts through rich, which reads ``:name:`` as an emoji
and ``[word]`` as a style tag: a role ARN example (``acs:ram::...``, a ram) or an Airflow option
written ``[core] name`` would be printed changed, so the texts name neither that way.
"""

from __future__ import annotations

from typing import Any

#: The distribution's name: Airflow refuses a provider whose ``package-name`` differs from it.
PACKAGE_NAME = "aliyun-training-pipelines"
CONNECTION_TYPE = "alibaba_cloud"
HOOK_CLASS = "aliyun_training.hooks.alibaba_cloud.AlibabaCloudHook"
#: The plugin's name, and its entry point's in the ``airflow.plugins`` group (pyproject.toml). The
#: metadata below declares no plugin: Airflow would load it besides the entry point when providers
#: are discovered eagerly, and reports a second plugin of one name as an import error.
PLUGIN_NAME = "aliyun_training"

_TEXT = {"type": ["string", "null"]}
_SECRET = {"type": ["string", "null"], "format": "password"}

#: The form's fields, each an extra of the connection (``hooks/alibaba_cloud.py`` documents them).
#: ``endpoints``, ``retry`` and the timeouts are objects or rarely set, so they stay in the JSON extra.
CONNECTION_FIELDS: dict[str, dict[str, Any]] = {
    "access_key_id": {
        "label": "AccessKey ID",
        "description": "A RAM user's AccessKey ID. Empty (with the secret): the default credential chain "
        "(environment, ECS instance role, RRSA on ACK).",
        "schema": _TEXT,
    },
    "access_key_secret": {"label": "AccessKey secret", "schema": _SECRET},
    "security_token": {
        "label": "STS security token",
        "description": "A fixed STS token issued with the AccessKey pair above; it cannot be renewed, "
        "so prefer a role ARN for long runs.",
        "schema": _SECRET,
    },
    "role_arn": {
        "label": "RAM role ARN",
        "description": "Assume this role through STS (renewed during long waits): its ARN, as the role's "
        "page in the RAM console shows it.",
        "schema": _TEXT,
    },
    "role_session_name": {
        "label": "Role session name",
        "description": "The STS session name when a role is assumed (default airflow-aliyun-training).",
        "schema": _TEXT,
    },
    "region": {"label": "Region", "description": "e.g. cn-wulanchabu.", "schema": _TEXT},
    "protocol": {
        "label": "Protocol",
        "description": "http only for a local emulator or a trusted VPC endpoint.",
        "schema": {"type": "string", "enum": ["https", "http"], "default": "https"},
    },
}

#: The standard fields the connection does not use; ``extra`` stays for ``endpoints`` and ``retry``.
HIDDEN_FIELDS = ["host", "schema", "login", "password", "port"]
PLACEHOLDERS = {
    "extra": '{"endpoints": {"dlc": "pai-dlc-vpc.cn-wulanchabu.aliyuncs.com"}, '
    '"retry": {"max_attempts": 8}, "read_timeout_ms": 10000}'
}

_HOOK_MODULES = [
    f"aliyun_training.hooks.{name}"
    for name in (
        "alibaba_cloud",
        "aiworkspace",
        "cms",
        "cr",
        "dlc",
        "ecs",
        "nas",
        "oss",
        "paistudio",
        "ram",
        "vpc",
        "container_registry",
        "kubernetes",
    )
]
_INTEGRATION = "Alibaba Cloud training"
#: The provider's section of the Airflow configuration (``AIRFLOW__ALIYUN_TRAINING__<OPTION>``).
CONFIG_SECTION = "aliyun_training"
INSTALLATION_OPTION = "installation_id"
PLAIN_ALIASES_OPTION = "plain_registry_aliases"
SEAL_SECRET_OPTION = "seal_secret"
RATE_LIMITS_OPTION = "api_rate_limits"
BATCHED_STATUS_OPTION = "batched_status"
STEADY_LOG_OPTION = "steady_log_seconds"


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata, in the shape of Airflow's ``provider_info.schema.json``.

    The version is not repeated here: Airflow reads it from the installed distribution.
    """
    return {
        "package-name": PACKAGE_NAME,
        "name": "Aliyun training pipelines",
        "description": "Distributed GPU training pipelines on Alibaba Cloud PAI-DLC, ACK, or one machine.",
        "integrations": [{"integration-name": _INTEGRATION, "tags": ["alibaba"]}],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": _HOOK_MODULES}],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "aliyun_training.triggers.dataset_version",
                    "aliyun_training.triggers.new_version",
                    "aliyun_training.triggers.quota",
                    "aliyun_training.triggers.remote_run",
                    "aliyun_training.triggers.training",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": CONNECTION_TYPE,
                "hook-class-name": HOOK_CLASS,
                "hook-name": "Alibaba Cloud",
                "conn-fields": CONNECTION_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": HIDDEN_FIELDS,
                    "relabeling": {},
                    "placeholders": PLACEHOLDERS,
                },
            }
        ],
        "extra-links": [
            "aliyun_training.links.TrainingJobConsoleLink",
            "aliyun_training.links.RunPageLink",
            "aliyun_training.links.RunPlanLink",
            "aliyun_training.links.RunReportLink",
        ],
        "config": {
            CONFIG_SECTION: {
                "description": "Settings every component of a deployment shares.",
                "options": {
                    INSTALLATION_OPTION: {
                        "description": (
                            "Names this Airflow deployment on every job, pod, volume and staging or build "
                            "run it creates, so deployments that share a PAI workspace, an ACK namespace "
                            "or buckets act only on their own. Set the same value on every component "
                            "(scheduler, dag-processor, triggerer, workers); lower-case letters, digits "
                            "and '-', at most 40 characters. Empty: derived from the address of the "
                            "deployment's API server (execution_api_server_url of the core section, else "
                            "base_url of the api section), which every worker knows; deployments whose API "
                            "servers share an address (two hosts both using http://localhost:8080) must "
                            "set it."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "ml-prod",
                        "default": "",
                    },
                    PLAIN_ALIASES_OPTION: {
                        "description": (
                            "Whether this deployment also keeps MLflow's plain champion and challenger "
                            "aliases (models:/<model>@champion), besides its own champion-<installation "
                            "id> and challenger-<installation id>: what a team's serving reads by "
                            "default. Set it on one deployment per MLflow store (production); two "
                            "deployments sharing a store with it set would move each other's."
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    SEAL_SECRET_OPTION: {
                        "description": (
                            "The secret the records a pipeline's tasks pass each other are sealed with "
                            "(an HMAC key is derived from it), so a record changed through the REST API "
                            "is refused by the task that reads it. Set the same value on every component "
                            "that runs tasks or serves the provider's pages. Empty: the jwt_secret of the "
                            "api_auth section, else the fernet_key of the core section; set it where "
                            "neither reaches the workers (asymmetric JWT keys)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "sensitive": True,
                        "example": None,
                        "default": "",
                    },
                    RATE_LIMITS_OPTION: {
                        "description": (
                            "Requests per second this process sends to each Alibaba Cloud API of one "
                            "account, and to each Kubernetes cluster connection: a JSON object of service "
                            "or service.Action to a rate (the more specific key wins). Services: dlc, "
                            "paistudio, aiworkspace, vpc, ecs, nas, cr, cms, oss, sts, ram, kubernetes. "
                            "Empty: PAI-DLC's published quotas (100 per second, CreateJob 150), "
                            "CloudMonitor's (cms: 50 per second), our 50 per second "
                            "(bursts of 100) for Kubernetes, and our 10 per second for the services that "
                            "publish none. A quota is the account's, shared by every deployment and "
                            "team of it, and every process (each triggerer, each task, the reconciler's "
                            "included) keeps its own limits: where several share an account, set each "
                            "one's share. Throttling answers are still retried with backoff."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": '{"dlc": 50, "dlc.ListJobs": 20, "kubernetes": 20}',
                        "default": "",
                    },
                    BATCHED_STATUS_OPTION: {
                        "description": (
                            "Whether the triggerer's training triggers that watch jobs of one account, "
                            "region and workspace (DLC), or of one cluster connection and namespace (ACK), "
                            "share one status listing a poll (DLC ListJobs by JobIds, 100 jobs a request; "
                            "ACK's jobs and pods by label selector) instead of each asking about its own "
                            "job. A job's details are then read when its state changes or it ends. Set it "
                            "to False where the RAM policy allows GetJob but not ListJobs."
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    STEADY_LOG_OPTION: {
                        "description": (
                            "Seconds between reads of the logs of a job the triggerer watches with others "
                            "(batched_status) while its state does not change. For as long after a change "
                            "of state (it starts running, restarts, fails), and at its end, they are read "
                            "every poll; no line is lost, lines only arrive in batches. At 90 seconds a "
                            "thousand running one-node DLC jobs cost about 0.73 requests per job a minute."
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "30",
                        "default": "90",
                    },
                },
            }
        },
    }
