"""The Airflow connection each kind of service is reached through when a setting names none: one
default id per connection type, the ids Airflow's own providers would give them."""

from __future__ import annotations

#: Alibaba Cloud (OSS, PAI-DLC, PAI Studio, NAS, ACR, RAM, VPC/ECS, STS): this package's type.
ALIBABA_CLOUD_DEFAULT_CONN_ID = "alibaba_cloud_default"
#: An ACK cluster, through the cncf.kubernetes provider's connection type.
KUBERNETES_DEFAULT_CONN_ID = "kubernetes_default"
#: A container registry (a docker-type connection).
REGISTRY_DEFAULT_CONN_ID = "registry_default"
