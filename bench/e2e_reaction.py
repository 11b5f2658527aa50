#!/usr/bin/env python3
"""End to end on the real control plane: from a step in mock GPU load to the Deployment's spec.replicas
changing, and to the new pod Running, through the real KEDA and the real HPA, for each trigger path.

The control plane (``gpuscale.controlplane``: etcd, kube-apiserver, kube-controller-manager with the HPA at
its default 15 s sync, kube-scheduler, kwok GPU nodes, the KEDA operator and metrics API server) runs with
gpuscale's mock agents (1 s sampling, attribution every 5 s: the defaults) and the scaler. KEDA's
``pollingInterval`` is its default 30 s. Scenarios, in one run:

* ``external`` (workload scope, 1 -> more replicas): the HPA asks KEDA's metrics API server, which asks the
  operator, which calls the scaler's GetMetrics; no KEDA poll on this path, the HPA's sync decides.
  ``window`` 10 s (the metadata default).
* ``prometheus`` (1 -> more): Debian's Prometheus scrapes both agents every 15 s (the chart's ServiceMonitor
  default); KEDA's prometheus scaler runs ``gpuscale render``'s query (``avg_over_time[30s]``: twice the
  scrape) when the HPA asks.
* ``external-push`` (pool scope, 0 -> 1): the scaler's StreamIsActive wakes KEDA at once.
* ``external-poll-from-zero`` (pool scope, 0 -> 1), its peer: the same trigger as ``external``, so only
  KEDA's 30 s poll can wake it.

Each step is 10 % -> 90 % on every GPU at a random instant (target 50 per replica, ceil(1 x 90 / 50) = 2).
``--steps`` of them per scenario (default 3), each at a random phase of the HPA's 15 s sync and KEDA's
30 s poll; the JSON has each and the median.
Writes bench/results/e2e-reaction.json with the component versions.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import machine, prometheus, write_result

from gpuscale.controlplane import ControlPlane, GpuNode, build
from gpuscale.controlplane.client import KubeClient, wait_for
from gpuscale.controlplane.stack import GpuStack


def render(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "gpuscale", "render", "scaledobject", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (obj,) = [d for d in yaml.safe_load_all(out) if d]
    return dict(obj)


def deployment(client: KubeClient, ns: str, name: str, replicas: int) -> None:
    client.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                        ]
                    },
                },
            },
        }
    )


def replicas(client: KubeClient, ns: str, name: str) -> int:
    return int(client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")["spec"].get("replicas", 1))


def running(client: KubeClient, ns: str, name: str) -> int:
    pods = client.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{name}")["items"]
    return sum(
        1
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def ns_args(name: str) -> list[str]:
    return ["--namespace", f"bench-{name}"]


def scenario(
    plane: ControlPlane, stack: GpuStack, name: str, so: dict[str, Any], start_replicas: int, settle_s: float
) -> dict[str, float]:
    client = plane.client
    ns = f"bench-{name}"
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(
        "default SA", lambda: client.exists(f"/api/v1/namespaces/{ns}/serviceaccounts/default") or None, 30
    )
    deployment(client, ns, "llm", start_replicas)
    wait_for("pods running", lambda: True if running(client, ns, "llm") == start_replicas else None, 60)
    assert so["metadata"]["namespace"] == ns
    client.apply(so)
    stack.set_load(10)
    time.sleep(settle_s)  # KEDA has made its HPA and the trigger reads 10 %: steady
    assert replicas(client, ns, "llm") == start_replicas, f"{name}: not steady before the step"
    time.sleep(random.uniform(0, 15))  # a random phase of the HPA's and KEDA's clocks
    t0 = time.monotonic()
    stack.set_load(90)
    t_replicas = wait_for(
        f"{name}: spec.replicas",
        lambda: time.monotonic() if replicas(client, ns, "llm") > start_replicas else None,
        180,
        0.1,
    )
    t_running = wait_for(
        f"{name}: a new pod Running",
        lambda: time.monotonic() if running(client, ns, "llm") > start_replicas else None,
        120,
        0.1,
    )
    stack.set_load(0)
    client.delete(f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects/{so['metadata']['name']}")
    client.delete(f"/api/v1/namespaces/{ns}")
    return {"spec_replicas_s": round(t_replicas - t0, 2), "pod_running_s": round(t_running - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="result file (default bench/results/e2e-reaction.json)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="steps per path (default 3)")
    args = ap.parse_args()
    random.seed(args.seed)
    binaries = build()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpuscale-e2e-") as tmp:
        nodes = (GpuNode("gpu-node-1", 4), GpuNode("gpu-node-2", 4))
        with ControlPlane(binaries, Path(tmp), nodes=nodes) as plane:  # HPA sync: the default 15 s
            stack = GpuStack(plane, attribution_interval="5")
            stack.start()
            jobs = {f"agent-{n}": (f"127.0.0.1:{a.metrics_port}", "15s") for n, a in stack.agents.items()}
            with prometheus(jobs) as prom:
                common = ["--target", "deployment/llm", "--metric",
                          "gpu_utilization", "--aggregation", "avg", "--target-value", "50",
                          "--polling-interval", "30", "--max-replicas", "4"]  # fmt: skip
                external = ["--mode", "external", "--scaler-address", stack.scaler_address, "--window", "10"]
                pool = ["--scope", "pool", "--node-selector", "type=kwok", "--activation-value", "30",
                        "--min-replicas", "0", "--cooldown-period", "300"]  # fmt: skip
                prom_args = ["--mode", "prometheus", "--prometheus-url", prom.url, "--scrape-interval", "15"]
                push = ["--mode", "external-push", "--scaler-address", stack.scaler_address, "--window", "10"]
                one = ["--min-replicas", "1"]
                runs = {  # name -> (render's arguments, replicas before the step)
                    "external": ([*external, *one], 1),
                    "prometheus": ([*prom_args, *one], 1),
                    "external-push": ([*push, *pool], 0),
                    "external-poll-from-zero": ([*external, *pool], 0),
                }
                for name, (extra, start) in runs.items():
                    steps = []
                    for i in range(args.steps):
                        so = render(*common, *ns_args(f"{name}-{i}"), *extra)
                        steps.append(scenario(plane, stack, f"{name}-{i}", so, start, settle_s=45))
                        print(name, json.dumps(steps[-1]), flush=True)
                        time.sleep(10)  # the namespace's pods are gone before the next
                    results[name] = {
                        key: {
                            "each": [x[key] for x in steps],
                            "median": statistics.median(x[key] for x in steps),
                        }
                        for key in ("spec_replicas_s", "pod_running_s")
                    }
            stack.stop()
    write_result(
        "e2e-reaction.json",
        {
            "benchmark": "e2e_reaction",
            "versions": binaries.versions,
            "settings": {
                "hpa_sync_period_s": 15,
                "keda_polling_interval_s": 30,
                "agent_interval_s": 1,
                "attribution_interval_s": 5,
                "prometheus_scrape_s": 15,
                "target_per_replica": 50,
                "external_window_s": 10,
                "prometheus_query_range": "30s",
                "pool_activation_value": 30,
                "step": "10 -> 90 % on every GPU",
                "steps_per_scenario": args.steps,
            },
            "results": results,
            "machine": machine(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
