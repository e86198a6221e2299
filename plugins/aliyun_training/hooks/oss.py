"""OSS through the ``alibaba_cloud`` connection: the endpoint and credentials oss2 is given.

OSS has no SDK client here: oss2 signs its own requests, with the hook's credentials client (an
assumed role is renewed for OSS too) and the connection's ``endpoints.oss`` or the region's public
endpoint. ``staging.oss`` keeps the oss2 side (``OssClientConfig``, which the OSS source, uploads
and artifacts take) free of Airflow, for the staging pod's CLI, and builds that config from this
hook (``OssClientConfig.from_connection``); the endpoint rule is ``oss_location``'s.
"""

from __future__ import annotations

from aliyun_training.hooks.alibaba_cloud import AlibabaCloudHook
from aliyun_training.oss_location import oss_endpoint


class OssHook(AlibabaCloudHook):
    """The connection's OSS endpoint and credentials, as oss2 clients take them."""

    hook_name = "Alibaba Cloud OSS"

    def endpoint_url(self) -> str:
        """``<protocol>://<host>``: the ``endpoints.oss`` extra, else the region's public endpoint."""
        host = (self.extras.get("endpoints") or {}).get("oss") or oss_endpoint(self.region)
        return f"{self.extras.get('protocol', 'https')}://{host}"
