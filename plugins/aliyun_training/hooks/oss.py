"""OSS through the ``alibaba_cloud`` connection: the endpoint and credentials oss2 is given.

OSS has no SDK client here: oss2 signs its own requests, with the hook's credentials client (an
assumed role is renewed for OSS too) and the connection's ``endpoints.oss`` or the region's public
endpoint. ``staging.oss`` keeps the oss2 side (``OssClientConfig``, which the OSS source, uploads
and artifacts take, and the endpoint rule) free of Airflow, for the staging pod's CLI; this hook
builds that config from the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook

if TYPE_CHECKING:
    from aliyun_training.staging.oss import OssClientConfig


class OssHook(AlibabaCloudHook):
    """The connection's OSS endpoint and credentials, as oss2 clients take them."""

    hook_name = "Alibaba Cloud OSS"

    def endpoint_url(self) -> str:
        """``<protocol>://<host>``: the ``endpoints.oss`` extra, else the region's public endpoint."""
        from aliyun_training.staging.oss import oss_endpoint

        host = (self.extras.get("endpoints") or {}).get("oss") or oss_endpoint(self.region)
        return f"{self.extras.get('protocol', 'https')}://{host}"

    def client_config(self, pool_size: int = 16) -> OssClientConfig:
        """How oss2 reaches this connection's OSS; credentials stay inside the credentials client."""
        from aliyun_training.staging.oss import OssClientConfig

        return OssClientConfig(self.endpoint_url(), self.region, self.credential_client(), pool_size)
