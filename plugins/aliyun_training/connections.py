"""The Airflow connection each kind of service is reached through when a setting names none: one
default id per connection type, the ids Airflow's own providers would give them."""

from __future__ import annotations

#: Alibaba Cloud (OSS, PAI-DLC, PAI Studio, NAS, ACR, RAM, VPC/ECS, STS): this package's type.
ALIBABA_CLOUD_DEFAULT_CONN_ID = "alibaba_cloud_default"
#: An ACK cluster, through the cncf.kubernetes provider's connection type.
KUBERNETES_DEFAULT_CONN_ID = "kubernetes_default"
#: A container registry (a docker-type connection).
REGISTRY_DEFAULT_CONN_ID = "registry_default"


def define_connection_fix(conn_id: str, connection_type: str, setting: str) -> str:
    """The fix for a connection that is not there: the ways Airflow finds one (the UI's Connections
    page with ``connection_type``, an ``AIRFLOW_CONN_`` variable) or the environment file's
    ``setting`` naming another."""
    return (
        f"add it in Admin > Connections with the type {connection_type}, or as the environment "
        f"variable AIRFLOW_CONN_{conn_id.upper()}, or name another connection in the environment "
        f"file's {setting}"
    )
