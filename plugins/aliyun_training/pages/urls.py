"""Where the provider's pages live: one prefix, under the API server's own base path.

Task links and the UI's navigation entries point here. A link is a path on the API server's origin
(the UI draws same-origin links, and http(s) ones, but drops ``file://``), so it also works behind
a proxy that serves Airflow under a sub-path (``[api] base_url``).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

#: The mount point of the pages' FastAPI app inside the API server.
PREFIX = "/aliyun-training"


def page_path(*parts: str) -> str:
    """The page at ``parts`` (each quoted whole: run ids hold ``:`` and ``+``), from the origin's root."""
    return "/".join([_base_path() + PREFIX, *(quote(part, safe="") for part in parts)])


def pipeline_page(dag_id: str) -> str:
    return page_path("pipelines", dag_id)


def rollback_page(dag_id: str, to: str | None = None) -> str:
    """The page that rolls the pipeline's champion back to the past champion ``to`` (its registered
    version or run id): asked with a GET, done with a POST."""
    return page_path("pipelines", dag_id, "rollback") + (f"?to={quote(to, safe='')}" if to else "")


def run_page(dag_id: str, run_id: str) -> str:
    """The run's live page: its training job while it runs, then a link to the run's report."""
    return page_path("runs", dag_id, run_id)


def report_page(dag_id: str, run_id: str) -> str:
    return page_path("runs", dag_id, run_id, "report")


def plan_page(dag_id: str, run_id: str) -> str:
    return page_path("runs", dag_id, run_id, "plan")


def airflow_dag_url(dag_id: str) -> str:
    """The DAG's page in Airflow's own UI: a whole address under ``[api] base_url``, or a path on
    the API server's origin when it is not set (a report opened from its file then says so)."""
    return f"{_base_url()}/dags/{quote(dag_id, safe='')}"


def airflow_run_url(dag_id: str, run_id: str) -> str:
    """The run's page in Airflow's own UI, under its DAG's."""
    return f"{airflow_dag_url(dag_id)}/runs/{quote(run_id, safe='')}"


def _base_url() -> str:
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def _base_path() -> str:
    """The path Airflow is served under (empty at the origin's root), from ``[api] base_url``."""
    return urlsplit(_base_url()).path
