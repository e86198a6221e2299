"""A running job's GPU use, read by each backend from where its platform keeps it.

- DLC: CloudMonitor's DescribeMetricList (``acs_pai_dlc``) through the real CMS SDK, against the
  CloudMonitor emulator over HTTP (``fakes/cms.py``), the job itself on the DLC emulator.
- ACK: the job's pods on the Kubernetes API fake, their GPUs' DCGM exporter series in a Prometheus
  stand-in: a small HTTP server here answering ``/api/v1/query_range`` in the shape the Prometheus
  HTTP API documents ("Range queries": ``{"status": "success", "data": {"resultType": "matrix",
  "result": [{"metric": {...}, "values": [[<unix seconds>, "<value>"], ...]}]}}``; an error is
  ``{"status": "error", "errorType": "bad_data", "error": ...}`` with HTTP 400, and more than 11,000
  points per series is refused, web/api/v1/api.go). No Prometheus runs in the tests, so this edge
  is stood in for.
- local: ``nvidia-smi`` on PATH. No GPU here: a stand-in script prints what ``nvidia-smi
  --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits`` prints (the
  nvidia-smi(1) manual's CSV format: one GPU a line, values joined by ", ", no header or units;
  ``[N/A]`` where the device does not report a field, per ``nvidia-smi --help-query-gpu``), and only
  when called with exactly those arguments.
"""

from __future__ import annotations

import asyncio
import json
import math
import stat
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from alibabacloud_cms20190101 import models as cms_models
from alibabacloud_tea_openapi.exceptions import ClientException

from aliyun_training.backends.ack.backend import NO_GPU_METRICS_URL, AckBackend
from aliyun_training.backends.base import JobHandle, JobState
from aliyun_training.backends.dlc.backend import GPU_MEMORY_METRIC, GPU_NAMESPACE, GPU_UTILIZATION_METRIC
from aliyun_training.backends.local import NO_NVIDIA_SMI, NVIDIA_SMI_QUERY, LocalBackend
from aliyun_training.environments import AckEnvironment
from aliyun_training.gpu_use import summarize, sustained_idle
from aliyun_training.hooks.alibaba_cloud import shared_hook
from aliyun_training.hooks.cms import CloudMonitorHook
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.plan.ack import ack_backend_config
from aliyun_training.spec import TrainingJobSpec
from aliyun_training.validation import SpecError
from fakes.cloud import arena_job, dlc_backend, dlc_job, emulated_cloud
from fakes.cms import GPU_MEMORY_USED, GPU_UTILIZATION
from fakes.dlc import JobScript
from fakes.kube import NS, kubernetes_fake
from fakes.kubernetes_fake import TrainingScript

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fakes.cloud import Cloud
    from fakes.kubernetes_fake import KubernetesFake

MINUTE = 60
PROJECT_DIR = Path(__file__).resolve().parents[2]


def minute_floor(epoch: float) -> float:
    return math.floor(epoch / MINUTE) * MINUTE


# -- DLC: CloudMonitor -----------------------------------------------------------------------------


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    with emulated_cloud(monkeypatch) as account:
        account.dlc.script_for("gpu-", JobScript(phases=[("Running", 3600.0)]))
        yield account
        assert account.cms.internal_errors == [] and account.dlc.internal_errors == []


def running_dlc_job(cloud: Cloud, name: str = "gpu-train") -> tuple[Any, JobHandle, list[str]]:
    """A DLC backend, its running two-node job, and the job's pods in node order (master first)."""
    backend = dlc_backend(workspace_id="ws-1")
    handle = backend.submit(TrainingJobSpec(**dlc_job(command="torchrun train.py")), name)
    assert backend.status(handle).state is JobState.RUNNING
    pods = [pod for pod, _ in cloud.dlc.jobs[handle.job_id].pod_ids]
    return backend, handle, pods


def test_dlc_reads_each_nodes_gpus_from_cloudmonitor_and_tells_twelve_idle_minutes(cloud: Cloud) -> None:
    backend, handle, pods = running_dlc_job(cloud)
    now = time.time()
    idle_from = minute_floor(now) - 11 * MINUTE
    cloud.cms.set_gpu_use(
        handle.job_id,
        pods,
        utilization=lambda at, pod: 3.0 if at >= idle_from else (91.0 if pod.endswith("master-0") else 87.0),
        memory_used_mib=lambda at, pod: 30_000.0 if at < idle_from else 1_024.0,
        since=now - 30 * MINUTE,
    )

    reading = asyncio.run(backend.agpu_reading(handle, datetime.fromtimestamp(now - 30 * MINUTE, UTC)))

    assert reading.unavailable == "" and reading.source == "dlc"
    by_node = {node: [s for s in reading.samples if s.node == node] for node in ("node-0", "node-1")}
    assert all(29 <= len(samples) <= 31 for samples in by_node.values())
    busy = [s for s in reading.samples if s.at.timestamp() < idle_from]
    assert {s.utilization for s in busy if s.node == "node-0"} == {91.0}
    assert {s.utilization for s in busy if s.node == "node-1"} == {87.0}
    assert {s.memory_used_mib for s in busy} == {30_000.0}
    use = summarize(reading.samples, reading.source)
    assert 12 <= use.idle_minutes <= 13
    evidence = sustained_idle(reading.samples)
    assert evidence is not None and "mean utilization 3% on 2 nodes" in evidence
    (first, *_) = cloud.cms.requests_for("DescribeMetricList")
    assert first.query["Namespace"] == GPU_NAMESPACE == "acs_pai_dlc"
    assert first.query["MetricName"] == GPU_UTILIZATION_METRIC == GPU_UTILIZATION
    assert json.loads(first.query["Dimensions"]) == [{"jobId": handle.job_id, "pod": pod} for pod in pods]
    assert first.query["Period"] == "60" and first.query["StartTime"].isdigit()
    assert {r.query["MetricName"] for r in cloud.cms.requests_for("DescribeMetricList")} == {
        GPU_UTILIZATION_METRIC,
        GPU_MEMORY_METRIC,
    }


def test_a_long_reading_follows_every_nexttoken_page(cloud: Cloud) -> None:
    backend, handle, pods = running_dlc_job(cloud)
    now = time.time()
    cloud.cms.set_gpu_use(handle.job_id, pods, utilization=75.0, since=now - 20 * 3600)

    reading = asyncio.run(backend.agpu_reading(handle, datetime.fromtimestamp(now - 20 * 3600, UTC)))

    # 2 pods x 1200 minutes: three pages of at most 1000 datapoints per metric.
    assert 2 * 1199 <= len(reading.samples) <= 2 * 1201
    assert len({(s.node, s.at) for s in reading.samples}) == len(reading.samples)
    utilization = [
        r for r in cloud.cms.requests_for("DescribeMetricList") if r.query["MetricName"] == GPU_UTILIZATION
    ]
    assert len(utilization) == 3 and "NextToken" not in utilization[0].query
    assert all(r.query.get("NextToken") for r in utilization[1:])
    assert all(s.memory_used_mib == 20_000.0 for s in reading.samples)


def test_a_memory_metric_that_does_not_answer_leaves_the_utilization_and_is_not_asked_again(
    cloud: Cloud,
) -> None:
    backend, handle, pods = running_dlc_job(cloud)
    now = time.time()
    cloud.cms.set_gpu_use(handle.job_id, pods, utilization=60.0, since=now - 10 * MINUTE)
    cloud.cms.metrics.discard(GPU_MEMORY_USED)
    since = datetime.fromtimestamp(now - 10 * MINUTE, UTC)

    first = asyncio.run(backend.agpu_reading(handle, since))
    second = asyncio.run(backend.agpu_reading(handle, since))

    assert first.unavailable == "" and len(first.samples) >= 18
    assert all(s.memory_used_mib is None and s.utilization == 60.0 for s in first.samples + second.samples)
    asked = [r.query["MetricName"] for r in cloud.cms.requests_for("DescribeMetricList")]
    assert asked.count(GPU_MEMORY_METRIC) == 1 and asked.count(GPU_UTILIZATION_METRIC) == 2


def test_a_refused_cloudmonitor_read_is_an_unavailable_reading_not_an_error(cloud: Cloud) -> None:
    backend, handle, pods = running_dlc_job(cloud)
    cloud.cms.set_gpu_use(handle.job_id, pods, utilization=50.0)
    cloud.cms.deny("DescribeMetricList")

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))

    assert reading.samples == []
    assert reading.unavailable.startswith("CloudMonitor (acs_pai_dlc): DescribeMetricList failed")
    assert "Forbidden.RAM" in reading.unavailable


def test_a_job_whose_pods_have_not_started_has_nothing_to_read_and_asks_nothing(cloud: Cloud) -> None:
    cloud.dlc.script_for("gpu-queued", JobScript(phases=[("Queuing", 3600.0)]))
    backend = dlc_backend(workspace_id="ws-1")
    handle = backend.submit(TrainingJobSpec(**dlc_job(command="torchrun train.py")), "gpu-queued")

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))

    assert reading.samples == [] and reading.unavailable == ""
    assert cloud.cms.count("DescribeMetricList") == 0


def test_more_pods_than_one_request_may_name_are_asked_fifty_at_a_time(cloud: Cloud) -> None:
    now = time.time()
    pods = [f"dlc-big-worker-{index}" for index in range(60)]
    cloud.cms.set_gpu_use("dlc-big", pods, utilization=40.0, since=now - 5 * MINUTE)
    hook = shared_hook(CloudMonitorHook, "alibaba_cloud_default")
    start, end = datetime.fromtimestamp(now - 5 * MINUTE, UTC), datetime.fromtimestamp(now, UTC)

    points = hook.describe_metric_list(
        GPU_NAMESPACE, GPU_UTILIZATION_METRIC, [{"jobId": "dlc-big", "pod": pod} for pod in pods], start, end
    )

    assert {point["pod"] for point in points} == set(pods)
    sent = [json.loads(r.query["Dimensions"]) for r in cloud.cms.requests_for("DescribeMetricList")]
    assert [len(dimensions) for dimensions in sent] == [50, 10]


@pytest.mark.parametrize(
    ("fields", "code", "says"),
    [
        ({"namespace": None}, "MissingNamespace", "Namespace is mandatory"),
        ({"metric_name": None}, "MissingMetricName", "MetricName is mandatory"),
        ({"period": "90"}, "InvalidParameter", "Period"),
        ({"start_time": "1800000600000", "end_time": "1800000000000"}, "InvalidParameter", "earlier"),
        ({"start_time": "1700000000000", "end_time": "1800000000000"}, "InvalidParameter", "31 days"),
        ({"start_time": "30/11/2026"}, "InvalidParameter", "UNIX milliseconds"),
        ({"length": "1441"}, "InvalidParameter", "Length"),
        (
            {"dimensions": json.dumps([{"jobId": str(i)} for i in range(51)])},
            "InvalidParameter",
            "at most 50",
        ),
        ({"next_token": "made-up"}, "InvalidParameter", "NextToken"),
    ],
)
def test_the_emulator_refuses_what_cloudmonitor_documents_as_refused(
    cloud: Cloud, fields: dict[str, str | None], code: str, says: str
) -> None:
    request = cms_models.DescribeMetricListRequest(
        **{"namespace": GPU_NAMESPACE, "metric_name": GPU_UTILIZATION, **fields}
    )
    client = shared_hook(CloudMonitorHook, "alibaba_cloud_default").conn

    with pytest.raises(ClientException) as raised:
        client.describe_metric_list(request)

    assert raised.value.code == code and says in raised.value.message


def test_an_unknown_metric_is_refused_in_the_answers_own_verdict(cloud: Cloud) -> None:
    hook = shared_hook(CloudMonitorHook, "alibaba_cloud_default")
    now = datetime.now(UTC)

    with pytest.raises(AlibabaCloudApiError, match="DescribeMetricList failed: ResourceNotFound"):
        hook.describe_metric_list(
            GPU_NAMESPACE, "JOB_NO_SUCH_METRIC", [{"jobId": "j"}], now - timedelta(hours=1), now
        )


def test_a_time_range_is_left_open_and_right_closed(cloud: Cloud) -> None:
    boundary = minute_floor(time.time()) - 10 * MINUTE
    cloud.cms.set_gpu_use("dlc-edge", ["dlc-edge-master-0"], utilization=10.0, since=boundary - 5 * MINUTE)
    hook = shared_hook(CloudMonitorHook, "alibaba_cloud_default")

    points = hook.describe_metric_list(
        GPU_NAMESPACE,
        GPU_UTILIZATION,
        [{"jobId": "dlc-edge"}],
        datetime.fromtimestamp(boundary, UTC),
        datetime.fromtimestamp(boundary + 3 * MINUTE, UTC),
    )

    assert [point["timestamp"] // 1000 for point in points] == [boundary + MINUTE * n for n in (1, 2, 3)]


# -- ACK: the DCGM exporter through Prometheus -------------------------------------------------------

ACK_CONN = "ack_gpu_cluster"


class PrometheusStandIn(BaseHTTPRequestHandler):
    """``GET /api/v1/query_range``: every GPU series of ``series`` whose labels the query's matchers
    select, at ``start + k * step`` up to ``end``. ``queries`` records what was asked."""

    series: ClassVar[dict[str, list[dict[str, str]]]] = {}
    values: ClassVar[dict[str, float]] = {}
    queries: ClassVar[list[dict[str, str]]] = []
    broken: ClassVar[bool] = False

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        params = {key: values[0] for key, values in parse_qs(url.query).items()}
        type(self).queries.append(params)
        if url.path != "/api/v1/query_range":
            return self._answer(404, {"status": "error", "errorType": "not_found", "error": "not found"})
        if type(self).broken:
            return self._answer(503, {"status": "error", "errorType": "unavailable", "error": "overloaded"})
        try:
            start, end, step = (float(params[name]) for name in ("start", "end", "step"))
        except (KeyError, ValueError) as exc:
            return self._answer(
                400, {"status": "error", "errorType": "bad_data", "error": f"bad parameter {exc}"}
            )
        if step <= 0 or end < start:
            return self._answer(400, {"status": "error", "errorType": "bad_data", "error": "bad range"})
        if (end - start) / step > 11000:
            error = (
                "exceeded maximum resolution of 11,000 points per timeseries. "
                "Try decreasing the query resolution (?step=XX)"
            )
            return self._answer(400, {"status": "error", "errorType": "bad_data", "error": error})
        metric = params["query"].partition("{")[0]
        times = [start + k * step for k in range(int((end - start) // step) + 1)]
        result: list[dict[str, Any]] = [
            {
                "metric": {"__name__": metric, **labels},
                "values": [[at, str(self.values[metric])] for at in times],
            }
            for labels in self.series.get(metric, [])
            if _selected(params["query"], labels)
        ]
        return self._answer(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the queries are recorded instead."""


def _selected(query: str, labels: dict[str, str]) -> bool:
    """The stand-in's reading of ``{namespace="x",pod=~"a|b"}``: exact namespace, pod among the names."""
    matchers = query.partition("{")[2].rstrip("}")
    namespace = matchers.split('namespace="')[1].split('"')[0]
    pods = matchers.split('pod=~"')[1].split('"')[0].replace("\\\\.", ".").split("|")
    return labels.get("namespace") == namespace and labels.get("pod") in pods


@dataclass
class Prometheus:
    """The stand-in's address and its handler class, whose ``series``, ``values``, ``broken`` a
    test sets and whose ``queries`` it reads."""

    url: str
    handler: type[PrometheusStandIn]


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    handler = type("Prometheus", (PrometheusStandIn,), {"queries": [], "series": {}, "values": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield Prometheus(f"http://127.0.0.1:{server.server_address[1]}", handler)
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubernetesFake]:
    with kubernetes_fake(tmp_path, monkeypatch, conn_id=ACK_CONN) as fake:
        fake.default_script = TrainingScript(phases=[("Created", 0.05), ("Running", 600.0)])
        yield fake


def running_ack_job(**settings: Any) -> tuple[AckBackend, JobHandle, list[str]]:
    """An ACK backend with ``settings``, its running two-node PyTorchJob, and its pods in node order."""
    backend = AckBackend(kubernetes_conn_id=ACK_CONN, namespace=NS, **settings)
    handle = backend.submit(TrainingJobSpec(**arena_job(command="torchrun train.py")), "gpu-job")
    deadline = time.monotonic() + 10
    while backend.status(handle).state is not JobState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    pods = [pod.metadata.name for pod in backend._hook().core_v1_client.list_namespaced_pod(NS).items]
    return backend, handle, sorted(pods, key=lambda name: ("worker" in name, name))


def test_ack_reads_the_dcgm_series_of_the_jobs_pods_from_prometheus(
    cluster: KubernetesFake, prometheus: Prometheus
) -> None:
    backend, handle, pods = running_ack_job(gpu_metrics_url=prometheus.url)
    series = [
        {"namespace": NS, "pod": pod, "gpu": str(gpu), "Hostname": "node-a"} for pod in pods for gpu in (0, 1)
    ]
    other = {"namespace": NS, "pod": "someone-elses-job-worker-0", "gpu": "0", "Hostname": "node-b"}
    server = prometheus.handler
    server.series.update({"DCGM_FI_DEV_GPU_UTIL": [*series, other], "DCGM_FI_DEV_FB_USED": [*series, other]})
    server.values.update({"DCGM_FI_DEV_GPU_UTIL": 88.0, "DCGM_FI_DEV_FB_USED": 40_000.0})
    since = datetime.now(UTC) - timedelta(minutes=10)

    reading = asyncio.run(backend.agpu_reading(handle, since))

    assert reading.unavailable == "" and reading.source == "arena"
    assert {(s.node, s.gpu) for s in reading.samples} == {
        (f"node-{n}", g) for n in (0, 1) for g in ("0", "1")
    }
    # Ten steps after ``since``, which a range query also evaluates at and an earlier read has read.
    assert len(reading.samples) == 4 * 10 and all(s.at > since for s in reading.samples)
    assert {(s.utilization, s.memory_used_mib) for s in reading.samples} == {(88.0, 40_000.0)}
    queries = [query["query"] for query in server.queries]
    assert [query.partition("{")[0] for query in queries] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]
    for query in queries:
        assert f'namespace="{NS}"' in query and all(pod in query for pod in pods)
    assert {float(query["step"]) for query in server.queries} == {60.0}


def test_a_long_ack_reading_widens_its_step_to_stay_within_prometheus_points(
    cluster: KubernetesFake, prometheus: Prometheus
) -> None:
    backend, handle, pods = running_ack_job(gpu_metrics_url=prometheus.url)
    server = prometheus.handler
    server.series.update({"DCGM_FI_DEV_GPU_UTIL": [{"namespace": NS, "pod": pods[0], "gpu": "0"}]})
    server.values.update({"DCGM_FI_DEV_GPU_UTIL": 5.0})

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(days=14)))

    assert reading.unavailable == "" and 10_000 <= len(reading.samples) <= 11_000
    assert all(float(query["step"]) > 60 for query in server.queries)


def test_ack_without_a_gpu_metrics_url_says_so_and_asks_nothing(cluster: KubernetesFake) -> None:
    backend, handle, _ = running_ack_job()

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))

    assert reading.samples == [] and reading.unavailable == NO_GPU_METRICS_URL
    assert "gpu_metrics_url" in NO_GPU_METRICS_URL


def test_a_failing_prometheus_is_an_unavailable_reading(
    cluster: KubernetesFake, prometheus: Prometheus
) -> None:
    backend, handle, _ = running_ack_job(gpu_metrics_url=prometheus.url)
    prometheus.handler.broken = True

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))

    assert reading.samples == []
    assert reading.unavailable == (
        f"Prometheus (DCGM exporter): {prometheus.url}: HTTP 503: unavailable: overloaded"
    )


def test_an_unreachable_prometheus_is_an_unavailable_reading(cluster: KubernetesFake) -> None:
    backend, handle, _ = running_ack_job(gpu_metrics_url="http://127.0.0.1:9")

    reading = asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))

    assert reading.samples == [] and reading.unavailable.startswith(
        "Prometheus (DCGM exporter): http://127.0.0.1:9: ConnectError"
    )


def test_the_environments_gpu_metrics_url_reaches_the_backend_and_carries_no_secret() -> None:
    shipped = json.loads((PROJECT_DIR / "include" / "config" / "arena.json").read_text())
    url = "http://prometheus-server.monitoring:9090"

    config = ack_backend_config(AckEnvironment.model_validate({**shipped, "gpu_metrics_url": url}))

    assert AckBackend(**config).settings.gpu_metrics_url == url
    with pytest.raises(
        SpecError, match="gpu_metrics_url: the URL of prom carries a user or password"
    ) as refused:
        AckBackend(**{**config, "gpu_metrics_url": "https://reader:s3cret@prom/"})
    assert "s3cret" not in str(refused.value)


# -- local: nvidia-smi -----------------------------------------------------------------------------

#: What nvidia-smi prints for the query: GPU 0 busy, GPU 1 idle, GPU 2 a device reporting neither.
RECORDED = "0, 87, 30233\n1, 0, 3\n2, [N/A], [N/A]\n"


def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A stand-in ``nvidia-smi`` first on PATH (a shell script running ``body``); the PATH keeps the
    system's directories for the tools the script uses."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tool


def local_reading(tmp_path: Path) -> Any:
    backend = LocalBackend(root=str(tmp_path / "runs"))
    handle = JobHandle(backend="local", job_id="job.1", name="job")
    return asyncio.run(backend.agpu_reading(handle, datetime.now(UTC) - timedelta(minutes=5)))


def test_local_reads_every_gpu_from_nvidia_smi_called_with_an_argument_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = " ".join(NVIDIA_SMI_QUERY)
    on_path(
        tmp_path,
        monkeypatch,
        f'[ "$*" = "{expected}" ] || {{ echo "unexpected arguments: $*" >&2; exit 2; }}\n'
        f"printf '{RECORDED}'\n",
    )

    reading = local_reading(tmp_path)

    assert reading.unavailable == "" and reading.source == "local"
    assert [(s.gpu, s.utilization, s.memory_used_mib) for s in reading.samples] == [
        ("0", 87.0, 30233.0),
        ("1", 0.0, 3.0),
    ]
    assert len({s.at for s in reading.samples}) == 1 and len({s.node for s in reading.samples}) == 1


def test_local_without_nvidia_smi_says_no_metric_is_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    reading = local_reading(tmp_path)

    assert reading.samples == []
    assert (
        reading.unavailable == NO_NVIDIA_SMI == "no GPU metric available: nvidia-smi is not on this machine"
    )


def test_a_failing_nvidia_smi_is_an_unavailable_reading_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    on_path(tmp_path, monkeypatch, f'echo "{said}"\nexit 9\n')

    reading = local_reading(tmp_path)

    assert reading.samples == [] and reading.unavailable == f"nvidia-smi exited with code 9: {said}"


def test_a_hanging_nvidia_smi_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(tmp_path, monkeypatch, "exec sleep 5\n")
    monkeypatch.setattr("aliyun_training.backends.local.NVIDIA_SMI_TIMEOUT_SECONDS", 0.3)

    started = time.monotonic()
    reading = local_reading(tmp_path)

    assert reading.unavailable == "nvidia-smi did not answer in 0.3 s" and time.monotonic() - started < 4
