"""One hook per Alibaba Cloud client: credentials, endpoints, retries and state sets."""
