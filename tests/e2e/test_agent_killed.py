"""An agent killed mid-run: the scaler stops counting its GPUs once their samples are older than
``staleAfter`` and, with none left in scope, answers ``UNAVAILABLE`` rather than a made-up low number; the
HPA then holds the replicas (no scale-down), and KEDA's ``fallback`` takes over after ``failureThreshold``
failures, as docs/scaler.md promises."""

from __future__ import annotations

from gpuscale.controlplane.client import wait_for
from gpuscale.controlplane.stack import GpuStack

from .helpers import (
    condition,
    delete_namespace,
    deployment,
    make_namespace,
    render_scaled_object,
    scaled_object,
    spec_replicas,
    wait_metric_seen,
    wait_replicas,
    wait_running,
)


def test_a_killed_agent_holds_the_replicas_then_keda_falls_back(gpus: GpuStack) -> None:
    client = gpus.plane.client
    ns = make_namespace(client, "e2e-killed")
    try:
        deployment(client, ns, "steady", replicas=2, node="gpu-node-1")  # all its GPUs behind one agent
        wait_running(client, ns, "steady", 2, 60)
        so = render_scaled_object(
            "--mode", "external", "--target", "deployment/steady", "--namespace", ns,
            "--scaler-address", gpus.scaler_address, "--metric", "gpu_utilization", "--aggregation", "avg",
            "--target-value", "50", "--window", "2", "--stale-after", "4", "--min-replicas", "1",
            "--max-replicas", "4", "--polling-interval", "2",
        )  # fmt: skip
        so["spec"]["fallback"] = {"failureThreshold": 3, "replicas": 3}
        client.apply(so)
        gpus.set_load(50)  # ceil(2 x 50 / 50) = 2: steady at two replicas

        wait_metric_seen(client, ns, "steady")
        assert spec_replicas(client, ns, "steady") == 2

        gpus.kill_agent("gpu-node-1")
        history: list[int] = []
        wait_replicas(client, ns, "steady", lambda n: n == 3, 120, what="== 3 (fallback)", history=history)
        assert min(history) >= 2, f"scaled down while the agent was gone: {history}"
        # the operator sets the condition on its own reconcile, which may come after the HPA's scale
        status = wait_for(
            "KEDA's Fallback condition",
            lambda: s if condition(s := scaled_object(client, ns, "steady"), "Fallback") == "True" else None,
            30,
        )
        assert condition(status, "Fallback") == "True", status["status"]
        health = status["status"].get("health", {})
        assert any(h.get("status") == "Failing" for h in health.values()), health
        # the HPA saw no value while the trigger failed: KEDA's fallback answers target x replicas
        gpus.start_agent("gpu-node-1")
        wait_for(
            "the trigger healthy again",
            lambda: True if condition(scaled_object(client, ns, "steady"), "Fallback") == "False" else None,
            60,
        )
    finally:
        delete_namespace(client, ns)
