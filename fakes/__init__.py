"""Stand-ins for what tests and benchmarks cannot reach: the Alibaba Cloud services, a Kubernetes API
server, and a whole Airflow deployment.

Each emulator is an HTTP server on 127.0.0.1 that the real SDKs reach through their own endpoints
and enforces only documented behaviour (docs/fidelity.md names the source of every rule). Tests
(``tests/``) and benchmarks (``bench/``) import them from here; nothing here imports a test.
"""
