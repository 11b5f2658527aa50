"""Broken monitoring never scales a workload down, with the fallback ``gpuscale render`` writes: a Deployment
scaled to 6 (by the load, every pod attributed), every agent killed, KEDA's fallback engaged (``--fallback-replicas 2``), and the
Deployment held at 6 through the HPA's (shortened) scale-down window, on the real KEDA and HPA. KEDA's
``static`` behaviour would take it to 2 here."""

from __future__ import annotations

from gpuscale.controlplane.client import KubeClient, wait_for
from gpuscale.controlplane.stack import GpuStack

from .helpers import (
    condition,
    delete_namespace,
    deployment,
    fast_scale_down,
    make_namespace,
    render_scaled_object,
    scaled_object,
    sleep_watching,
    spec_replicas,
    wait_attributed,
    wait_metric_seen,
    wait_replicas,
    wait_running,
)


def test_the_rendered_fallback_holds_six_replicas_while_every_agent_is_gone(gpus: GpuStack) -> None:
    client = gpus.plane.client
    ns = make_namespace(client, "e2e-fallback")
    try:
        deployment(client, ns, "llm", replicas=1)
        wait_running(client, ns, "llm", 1, 60)
        so = render_scaled_object(
            "--mode", "external", "--target", "deployment/llm", "--namespace", ns,
            "--scaler-address", gpus.scaler_address, "--metric", "gpu_utilization", "--aggregation", "avg",
            "--target-value", "50", "--window", "2", "--stale-after", "4", "--min-replicas", "1",
            "--max-replicas", "6", "--polling-interval", "2", "--fallback-replicas", "2",
        )  # fmt: skip
        assert so["spec"]["fallback"] == {
            "failureThreshold": 3,
            "replicas": 2,
            "behavior": "currentReplicasIfHigher",
        }
        # a scale-down window of 5 s: a fallback that asked for fewer replicas would show within seconds
        client.apply(fast_scale_down(so, window_s=5))
        gpus.set_load(50)  # at the target: the HPA keeps whatever runs

        wait_metric_seen(client, ns, "llm")
        gpus.set_load(90)  # ceil(n x 90 / 50): 1 -> 2 -> 4 -> 6, the maximum
        wait_replicas(client, ns, "llm", lambda n: n == 6, 150, what="== 6 at 90 %")
        pods = wait_running(client, ns, "llm", 6, 90)
        names = {(ns, p["metadata"]["name"]) for p in pods}

        wait_attributed([a.metrics_url for a in gpus.agents.values()], names)
        gpus.set_load(50)  # at the target: the HPA keeps the 6
        sleep_watching(8, lambda: _at_least(client, ns, 6, "before the agents are killed"))

        for name in list(gpus.agents):
            gpus.kill_agent(name)
        wait_for(
            "KEDA's fallback engaged",
            lambda: True if condition(scaled_object(client, ns, "llm"), "Fallback") == "True" else None,
            60,
        )
        # past the 5 s scale-down window, HPA syncs every second: static would be at 2 by now
        history: list[int] = []
        sleep_watching(25, lambda: _at_least(client, ns, 6, "with the fallback on", history))
        status = scaled_object(client, ns, "llm")
        assert condition(status, "Fallback") == "True", status["status"]
        assert spec_replicas(client, ns, "llm") == 6

        for name in list(gpus.agents):
            gpus.start_agent(name)
        wait_for(
            "the trigger healthy again",
            lambda: True if condition(scaled_object(client, ns, "llm"), "Fallback") == "False" else None,
            60,
        )
        wait_replicas(client, ns, "llm", lambda n: n == 6, 10, what="== 6 once monitoring is back")
    finally:
        delete_namespace(client, ns)


def _at_least(client: KubeClient, ns: str, n: int, when: str, history: list[int] | None = None) -> None:
    seen = spec_replicas(client, ns, "llm")
    if history is not None and (not history or history[-1] != seen):
        history.append(seen)
    assert seen >= n, f"scaled down to {seen} {when} (seen {history})"
