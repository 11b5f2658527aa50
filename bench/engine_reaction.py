#!/usr/bin/env python3
"""Engine reaction: from a step in an inference engine's queue to KEDA seeing it, gpuscale against Prometheus.

A mock vLLM engine (``gpuscale.backends.mock_engine``, vLLM's exposition) serves ``/metrics`` for one GPU pod
of a local Kubernetes API (the demo's) and kubelet: the pod ``bench/llm-0`` holds the node's mock GPU and
says where its engine is (``gpuscale.io/metrics-port``, pod IP 127.0.0.1). A real ``gpuscale agent`` (mock
backend, 1 s sampling) discovers, scrapes and parses it; a real ``gpuscale scaler`` follows the agent. The
engine's queue (``vllm:num_requests_waiting``) steps 0 -> 20 at a known instant (the state is set directly:
requests that never finish, so nothing drains), then back, ``--steps`` times, each after a random pause of up
to one slow scrape interval (a random phase of the sampling and scrape clocks). Watched at once:

* gpuscale push: a ``StreamIsActive`` stream (KEDA's ``external-push``) on ``metric: queue_length``,
  ``window: 0``, activation 5 - time until it sends ``true``;
* gpuscale poll: ``GetMetrics`` every 20 ms on the same trigger (``targetValue: 5``) - until it passes 5;
* gpuscale profile: ``GetMetrics`` on ``profile: llm-serving`` as shipped (10 s mean) - until it passes 5;
* Prometheus (Debian's package) scraping the engine itself with two jobs, ``usual`` (15 s) and ``fast``
  (1 s), polled every 100 ms with ``sum({__name__=~"vllm[:_]num_requests_waiting",job=...})`` (what
  ``gpuscale render --mode prometheus`` writes for llm-serving) - until it passes 5.

KEDA's ``prometheus`` trigger then waits for its next poll (``pollingInterval``, 30 s by default): MODELLED,
as ``bench/reaction.py`` does, by convolving each measured delay with a uniform poll phase (U(0, 30 s) for
``usual``, U(0, 1 s) for ``fast``). The push path has no poll. Writes bench/results/engine-reaction.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
from reaction import Watcher, convolve_uniform, stats

TARGET = 5.0
HIGH_QUEUE = 20
NODE = "node-e"
NAMESPACE = "bench"
POD = "llm-0"
MODEL_POLL = {"prometheus_usual": 30.0, "prometheus_fast": 1.0}
PATHS = [
    "gpuscale_push",
    "gpuscale_getmetrics",
    "gpuscale_getmetrics_profile",
    "prometheus_fast",
    "prometheus_usual",
]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    import grpc.aio

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model
    from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
    from gpuscale.demo.apiserver import LocalApiServer, make_pod, write_kubeconfig
    from gpuscale.demo.kubelet import LocalKubelet, pod_resources

    tmp = Path(tempfile.mkdtemp(prefix="gpuscale-engine-reaction-"))
    backend = MockBackend(MockConfig(gpus=1, model=find_model("h100"), node=NODE))
    backend.open()
    uuid = backend.devices()[0].uuid
    backend.close()

    # requests that never finish: the queue is what the step sets, nothing drains it
    engine = MockEngine(MockEngineConfig(max_num_seqs=32, service_time_s=1e9))
    (state,) = engine.models.values()
    server = await start_mock_engine(engine)

    def set_queue(waiting: int) -> float:
        t = time.time()
        engine.advance(t)
        state.in_system = (engine.config.max_num_seqs + waiting) if waiting else 0.0
        engine.advance(t + 1e-6)
        return t

    api = LocalApiServer(token="bench")
    url = await api.start()
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", url, "bench", namespace=NAMESPACE)
    labels = {"app": "llm"}
    api.put_node(NODE, {"nvidia.com/gpu.present": "true"})
    api.put_deployment(NAMESPACE, "llm", labels, replicas=1)
    api.put_scaled_object(
        NAMESPACE, "reaction", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}, []
    )
    api.add_pod(
        make_pod(
            NAMESPACE,
            POD,
            node=NODE,
            labels=labels,
            containers={"main": "containerd://" + "ab" * 32},
            limits={"nvidia.com/gpu": "1"},
            annotations={"gpuscale.io/metrics-port": str(server.port)},
            ip="127.0.0.1",
        )
    )
    kubelet = LocalKubelet(tmp / "kubelet.sock")
    kubelet.pods = [pod_resources(NAMESPACE, POD, {"main": [("nvidia.com/gpu", [uuid])]})]
    await kubelet.start()

    mport, gport = c.free_port(), c.free_port()
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "gpuscale", "--log-level", "warning", "agent", "--backend", "mock",
            "--mock-gpus", "1", "--mock-model", "h100", "--interval", "1", "--node-name", NODE,
            "--metrics-address", f"127.0.0.1:{mport}", "--grpc-address", f"127.0.0.1:{gport}",
            "--kubelet-socket", str(kubelet.socket_path), "--kubeconfig", str(kubeconfig),
        ],
        env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")},
    )  # fmt: skip
    up: dict[str, list[float]] = {p: [] for p in PATHS}
    down: dict[str, list[float]] = {p: [] for p in PATHS}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c.http_get(f"http://127.0.0.1:{mport}/readyz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and agent.poll() is None, "the agent did not start"
                await asyncio.sleep(0.2)
        target = f"127.0.0.1:{server.port}"
        jobs = {"usual": (target, args.usual_scrape), "fast": (target, args.fast_scrape)}
        extra = ["--kubeconfig", str(kubeconfig)]
        with c.scaler([f"127.0.0.1:{gport}"], extra=extra) as s, c.prometheus(jobs) as prom:
            md = {
                "metric": "queue_length",
                "window": "0",
                "targetValue": str(TARGET),
                "activationValue": str(TARGET),
            }
            ref = pb.ScaledObjectRef(name="reaction", namespace=NAMESPACE, scalerMetadata=md)
            profile_ref = pb.ScaledObjectRef(
                name="reaction", namespace=NAMESPACE, scalerMetadata={"profile": "llm-serving"}
            )
            w = Watcher()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{s['grpc_port']}") as ch:
                stub = pb_grpc.ExternalScalerStub(ch)

                async def push() -> None:
                    while True:
                        try:
                            async for msg in stub.StreamIsActive(ref):
                                w.observe("gpuscale_push", msg.result)
                        except grpc.aio.AioRpcError:
                            await asyncio.sleep(0.1)

                async def poll_getmetrics(path: str, r: Any) -> None:
                    req = pb.GetMetricsRequest(scaledObjectRef=r)
                    while True:
                        try:
                            v = (await stub.GetMetrics(req, timeout=2)).metricValues[0].metricValueFloat
                            w.observe(path, v > TARGET)
                        except grpc.aio.AioRpcError:
                            pass
                        await asyncio.sleep(0.02)

                async def poll_prometheus(job: str) -> None:
                    q = f'sum({{__name__=~"vllm[:_]num_requests_waiting",job="{job}"}})'
                    while True:
                        result = await asyncio.to_thread(prom.query, q)
                        if result:
                            w.observe(f"prometheus_{job}", float(result[0]["value"][1]) > TARGET)
                        await asyncio.sleep(0.1)

                tasks = [
                    asyncio.create_task(t)
                    for t in (
                        push(),
                        poll_getmetrics("gpuscale_getmetrics", ref),
                        poll_getmetrics("gpuscale_getmetrics_profile", profile_ref),
                        poll_prometheus("fast"),
                        poll_prometheus("usual"),
                    )
                ]
                await asyncio.sleep(args.settle)  # both jobs scraped at least once, the stream open
                rng = random.Random(11)
                usual_s = float(args.usual_scrape.rstrip("s"))
                for step in range(args.steps):
                    for high, table in ((True, up), (False, down)):
                        # a random phase of every clock: the sampling (1 s) and both scrapes (up to 15 s)
                        await asyncio.sleep(rng.uniform(0.0, usual_s if high else 1.0))
                        w.level_high, w.seen = high, {}
                        w.step_at = set_queue(HIGH_QUEUE if high else 0)
                        limit = time.monotonic() + args.step_timeout
                        while len(w.seen) < len(PATHS) and time.monotonic() < limit:
                            await asyncio.sleep(0.05)
                        for p in PATHS:
                            if p in w.seen:
                                table[p].append(w.seen[p])
                        print(
                            f"step {step} {'up' if high else 'down'}: "
                            + ", ".join(f"{p}={w.seen.get(p, float('nan')):.2f}s" for p in PATHS),
                            flush=True,
                        )
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            scrapes_ok = sum(
                float(line.rsplit(" ", 1)[1])
                for line in c.http_get(f"http://127.0.0.1:{mport}/metrics").splitlines()
                if line.startswith("gpuscale_agent_engine_scrapes_total{") and 'result="ok"' in line
            )
    finally:
        c.stop(agent)
        await kubelet.stop()
        await api.stop()
        await server.close()
    measured = {p: stats(up[p]) for p in PATHS if up[p]}
    modelled = {
        f"{p}_plus_keda_poll_{int(period)}s": stats(convolve_uniform(up[p], period))
        for p, period in MODEL_POLL.items()
        if up[p]
    }
    push_p50, push_p95 = measured["gpuscale_push"]["p50"], measured["gpuscale_push"]["p95"]
    usual = modelled["prometheus_usual_plus_keda_poll_30s"]
    fast = modelled["prometheus_fast_plus_keda_poll_1s"]
    return {
        "benchmark": "engine-reaction",
        "machine": c.machine(),
        "prometheus": c.version_of_prometheus(),
        "agent": {
            "backend": "mock",
            "interval_s": 1.0,
            "engine": "mock vLLM (gpuscale.backends.mock_engine)",
        },
        "queue_step": {"from": 0, "to": HIGH_QUEUE, "target": TARGET},
        "scrape_intervals": {"usual": args.usual_scrape, "fast": args.fast_scrape},
        "steps": args.steps,
        "agent_engine_scrapes": scrapes_ok,
        "measured_s_step_up": measured,
        "measured_s_step_down": {p: stats(down[p]) for p in PATHS if down[p]},
        "modelled_s_step_up_with_keda_poll": modelled,
        "note": "measured: wall time from the engine's queue step to each path seeing the new level (poll "
        "granularity 20 ms for GetMetrics, 100 ms for Prometheus queries). modelled: measured delays "
        "convolved with a uniform KEDA pollingInterval phase; the push path has no poll. "
        "gpuscale_getmetrics_profile is llm-serving as shipped (window 10 s: a mean, so a step from 0 to 20 "
        "passes 5 after about a quarter of the window).",
        "ratio": {
            "p50_prometheus_usual_with_poll_30s_over_gpuscale_push": round(usual["p50"] / push_p50, 1),
            "p95_prometheus_usual_with_poll_30s_over_gpuscale_push": round(usual["p95"] / push_p95, 1),
            "p95_prometheus_fast_with_poll_1s_over_gpuscale_push": round(fast["p95"] / push_p95, 1),
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--usual-scrape", default="15s")
    ap.add_argument("--fast-scrape", default="1s")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds before the first step")
    ap.add_argument("--step-timeout", type=float, default=40.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    c.exit_on_sigterm()
    c.write_result("engine-reaction.json", asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
