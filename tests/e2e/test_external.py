"""A real ScaledObject (``external`` trigger, workload scope through ``scaleTargetRef``) scales a real
Deployment through KEDA and the HPA in kube-controller-manager: load up, replicas up, the new pods Running
on kwok GPU nodes and attributed by the agents; load down, back down after the stabilization window."""

from __future__ import annotations

from gpuscale.controlplane.stack import GpuStack

from .helpers import (
    condition,
    delete_namespace,
    deployment,
    fast_scale_down,
    hpa,
    make_namespace,
    render_scaled_object,
    scaled_object,
    wait_attributed,
    wait_replicas,
    wait_running,
)


def test_external_trigger_scales_a_deployment_up_and_back_down(gpus: GpuStack) -> None:
    client = gpus.plane.client
    ns = make_namespace(client, "e2e-external")
    try:
        deployment(client, ns, "llm", replicas=1)
        wait_running(client, ns, "llm", 1, 60)
        so = render_scaled_object(
            "--mode", "external", "--target", "deployment/llm", "--namespace", ns,
            "--scaler-address", gpus.scaler_address, "--metric", "gpu_utilization", "--aggregation", "avg",
            "--target-value", "50", "--window", "2", "--min-replicas", "1", "--max-replicas", "4",
            "--polling-interval", "2",
        )  # fmt: skip
        client.apply(fast_scale_down(so, window_s=5))

        gpus.set_load(90)
        history: list[int] = []
        wait_replicas(client, ns, "llm", lambda n: n == 4, 150, what="== 4 at 90 %", history=history)
        assert history[0] == 1 and history == sorted(history), history
        pods = wait_running(client, ns, "llm", 4, 60)
        assert {p["spec"]["nodeName"] for p in pods} <= {"gpu-node-1", "gpu-node-2"}
        names = {(ns, p["metadata"]["name"]) for p in pods}

        wait_attributed([a.metrics_url for a in gpus.agents.values()], names)
        so_now = scaled_object(client, ns, "llm")
        assert condition(so_now, "Ready") == "True", so_now["status"]
        assert condition(so_now, "Active") == "True", so_now["status"]
        h = hpa(client, ns, "llm")
        assert h["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 5
        assert h["spec"]["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "50"}

        gpus.set_load(10)
        history = []
        wait_replicas(client, ns, "llm", lambda n: n == 1, 150, what="== 1 at 10 %", history=history)
        assert history == sorted(history, reverse=True), history
        wait_running(client, ns, "llm", 1, 60)
    finally:
        delete_namespace(client, ns)
