"""The Prometheus path ``gpuscale render --mode prometheus`` writes: a real Prometheus (Debian's) scrapes the
agents' ``/metrics``, KEDA's own ``prometheus`` scaler runs the rendered query, and the real HPA scales the
Deployment as on the external path: load up, replicas up; load down, back down."""

from __future__ import annotations

from pathlib import Path

from gpuscale.controlplane.stack import GpuStack
from tests.fakes.prometheus import run_prometheus

from .helpers import (
    condition,
    delete_namespace,
    deployment,
    fast_scale_down,
    hpa,
    make_namespace,
    render_scaled_object,
    scaled_object,
    wait_replicas,
    wait_running,
)


def test_prometheus_trigger_scales_a_deployment_up_and_back_down(gpus: GpuStack, tmp_path: Path) -> None:
    client = gpus.plane.client
    targets = [f"127.0.0.1:{a.metrics_port}" for a in gpus.agents.values()]
    with run_prometheus(tmp_path, targets, scrape_interval="1s") as prom:
        ns = make_namespace(client, "e2e-prometheus")
        try:
            deployment(client, ns, "llm", replicas=1)
            (pod,) = wait_running(client, ns, "llm", 1, 60)
            prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}",pod="{pod["metadata"]["name"]}"}}', 30)
            so = render_scaled_object(
                "--mode", "prometheus", "--target", "deployment/llm", "--namespace", ns,
                "--prometheus-url", prom.url, "--metric", "gpu_utilization", "--aggregation", "avg",
                "--target-value", "50", "--window", "4", "--scrape-interval", "1",
                "--min-replicas", "1", "--max-replicas", "4", "--polling-interval", "2",
            )  # fmt: skip
            trigger = so["spec"]["triggers"][0]
            assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
            client.apply(fast_scale_down(so, window_s=5))

            gpus.set_load(90)
            history: list[int] = []
            wait_replicas(client, ns, "llm", lambda n: n == 4, 150, what="== 4 at 90 %", history=history)
            assert history[0] == 1 and history == sorted(history), history
            wait_running(client, ns, "llm", 4, 60)
            assert condition(scaled_object(client, ns, "llm"), "Active") == "True"
            assert hpa(client, ns, "llm")["spec"]["metrics"][0]["external"]["target"]["type"] == "Value"

            gpus.set_load(10)
            history = []
            wait_replicas(client, ns, "llm", lambda n: n == 1, 150, what="== 1 at 10 %", history=history)
            assert history == sorted(history, reverse=True), history
        finally:
            delete_namespace(client, ns)
