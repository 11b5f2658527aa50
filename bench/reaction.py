#!/usr/bin/env python3
"""Reaction: from a step in GPU load to KEDA seeing it, gpuscale against Prometheus, in the same run.

A real `gpuscale agent` (mock backend, 1 GPU, 1 s sampling) reads its GPU's load from a demand file that
this program rewrites: a step 10 % -> 90 % at a known instant (then back, and again, --steps times, each
after a random pause of up to one slow scrape interval, so the step falls at a random phase of the sampling
and scrape clocks). Watched at once:

* gpuscale push: a real `gpuscale scaler` following the agent; a `StreamIsActive` stream (what KEDA's
  `external-push` trigger holds open) - time until it sends `true`;
* gpuscale poll: `GetMetrics` polled every 20 ms - time until the value crosses the target;
* Prometheus (Debian's package) scraping the same agent's /metrics with two jobs: `usual` (15 s, the
  interval of the GPU ServiceMonitor examples) and `fast` (1 s, the shortest that makes sense with 1 s
  sampling); an instant query polled every 100 ms - time until it crosses the threshold.

The trigger is `scope: pool` on the agent's node, `max` of `gpu_utilization`, `window: 0`, threshold 50, and
the query is `max(DCGM_FI_DEV_GPU_UTIL{job=...})`: the same signal on both paths (pool rather than workload
scope only because no kubelet runs here; the data path agent -> Watch -> scaler is the same).

KEDA's `prometheus` trigger then waits for its next poll (`pollingInterval`, 30 s by default, 1 s at least):
that phase is not measured, it is MODELLED by convolving each measured delay with a uniform poll phase
(U(0, 30 s) for `usual`, U(0, 1 s) for `fast`). The push path has no poll. Not included on the Prometheus
side: dcgm-exporter's own 30 s default collection interval (our agent samples every 1 s for both paths).

Goal: gpuscale < 1.5 s p95 with 1 s sampling. Writes bench/results/reaction.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

THRESHOLD = 50.0
LOW, HIGH = 10.0, 90.0
NODE = "node-r"
MODEL_POLL = {"prometheus_usual": 30.0, "prometheus_fast": 1.0}


def write_demand(path: Path, utilization: float) -> float:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": {"0": {"utilization": utilization}}}))
    t = time.time()
    os.replace(tmp, path)
    return t


def convolve_uniform(delays: list[float], period: float, points: int = 1000) -> list[float]:
    """Each delay plus a poll phase uniform on [0, period): the distribution KEDA's polling adds."""
    return [d + period * (k + 0.5) / points for d in delays for k in range(points)]


def stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(c.pct(values, 50), 3),
        "p95": round(c.pct(values, 95), 3),
        "max": round(max(values), 3),
        "mean": round(sum(values) / len(values), 3),
    }


class Watcher:
    """Records when each path first sees the current level, per step."""

    def __init__(self) -> None:
        self.level_high = False
        self.step_at = 0.0
        self.seen: dict[str, float] = {}

    def observe(self, path: str, high: bool) -> None:
        if high == self.level_high and path not in self.seen and self.step_at:
            self.seen[path] = time.time() - self.step_at


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import grpc
    import grpc.aio

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    tmp = Path(tempfile.mkdtemp(prefix="gpuscale-reaction-"))
    demand = tmp / "demand.json"
    write_demand(demand, LOW)
    mport, gport = c.free_port(), c.free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "--log-level",
            "warning",
            "agent",
            "--backend",
            "mock",
            "--mock-gpus",
            "1",
            "--mock-demand-file",
            str(demand),
            "--interval",
            "1",
            "--node-name",
            NODE,
            "--metrics-address",
            f"127.0.0.1:{mport}",
            "--grpc-address",
            f"127.0.0.1:{gport}",
            "--kubelet-socket",
            str(tmp / "no-kubelet.sock"),
        ],
        env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")},
    )
    paths = ["gpuscale_push", "gpuscale_getmetrics", "prometheus_fast", "prometheus_usual"]
    up: dict[str, list[float]] = {p: [] for p in paths}
    down: dict[str, list[float]] = {p: [] for p in paths}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c.http_get(f"http://127.0.0.1:{mport}/readyz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and agent.poll() is None, "the agent did not start"
                await asyncio.sleep(0.2)
        target = f"127.0.0.1:{mport}"
        jobs = {"usual": (target, args.usual_scrape), "fast": (target, args.fast_scrape)}
        with c.scaler([f"127.0.0.1:{gport}"]) as s, c.prometheus(jobs) as prom:
            md = {
                "scope": "pool",
                "nodeSelector": f"kubernetes.io/hostname={NODE}",
                "metric": "gpu_utilization",
                "aggregation": "max",
                "window": "0",
                "targetValue": str(THRESHOLD),
                "activationValue": str(THRESHOLD),
            }
            ref = pb.ScaledObjectRef(name="reaction", namespace="default", scalerMetadata=md)
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

                async def poll_getmetrics() -> None:
                    req = pb.GetMetricsRequest(scaledObjectRef=ref)
                    while True:
                        try:
                            v = (await stub.GetMetrics(req, timeout=2)).metricValues[0].metricValueFloat
                            w.observe("gpuscale_getmetrics", v > THRESHOLD)
                        except grpc.aio.AioRpcError:
                            pass
                        await asyncio.sleep(0.02)

                async def poll_prometheus(job: str) -> None:
                    q = f'max(DCGM_FI_DEV_GPU_UTIL{{job="{job}", Hostname="{NODE}"}})'
                    while True:
                        result = await asyncio.to_thread(prom.query, q)
                        if result:
                            w.observe(f"prometheus_{job}", float(result[0]["value"][1]) > THRESHOLD)
                        await asyncio.sleep(0.1)

                tasks = [
                    asyncio.create_task(t)
                    for t in (push(), poll_getmetrics(), poll_prometheus("fast"), poll_prometheus("usual"))
                ]
                await asyncio.sleep(args.settle)  # both jobs scraped at least once, the stream open
                rng = random.Random(7)
                usual_s = float(args.usual_scrape.rstrip("s"))
                for step in range(args.steps):
                    for level, table in ((HIGH, up), (LOW, down)):
                        # a random phase of every clock: the sampling (1 s) and both scrapes (up to 15 s);
                        # waiting for the slow scrape to see each level would otherwise align them
                        await asyncio.sleep(rng.uniform(0.0, usual_s if level == HIGH else 1.0))
                        w.level_high, w.seen = level == HIGH, {}
                        w.step_at = write_demand(demand, level)
                        limit = time.monotonic() + args.step_timeout
                        while len(w.seen) < len(paths) and time.monotonic() < limit:
                            await asyncio.sleep(0.05)
                        for p in paths:
                            if p in w.seen:
                                table[p].append(w.seen[p])
                        print(
                            f"step {step} {'up' if level == HIGH else 'down'}: "
                            + ", ".join(f"{p}={w.seen.get(p, float('nan')):.2f}s" for p in paths),
                            flush=True,
                        )
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        c.stop(agent)
    measured = {p: stats(up[p]) for p in paths if up[p]}
    modelled = {
        f"{p}_plus_keda_poll_{int(period)}s": stats(convolve_uniform(up[p], period))
        for p, period in MODEL_POLL.items()
        if up[p]
    }
    modelled["prometheus_usual_plus_keda_poll_1s"] = stats(convolve_uniform(up["prometheus_usual"], 1.0))
    return {
        "benchmark": "reaction",
        "machine": c.machine(),
        "prometheus": c.version_of_prometheus(),
        "agent": {"backend": "mock", "interval_s": 1.0, "gpus": 1},
        "scrape_intervals": {"usual": args.usual_scrape, "fast": args.fast_scrape},
        "steps": args.steps,
        "measured_s_step_up": measured,
        "measured_s_step_down": {p: stats(down[p]) for p in paths if down[p]},
        "modelled_s_step_up_with_keda_poll": modelled,
        "note": "measured: wall time from the demand-file write to each path seeing the new level (poll "
        "granularity 20 ms for GetMetrics, 100 ms for Prometheus queries). modelled: measured delays "
        "convolved with a uniform KEDA pollingInterval phase; the push path has no poll.",
        "ratio_p95": {
            "prometheus_usual_with_poll_30s_over_gpuscale_push": round(
                modelled["prometheus_usual_plus_keda_poll_30s"]["p95"] / measured["gpuscale_push"]["p95"], 1
            ),
            "prometheus_fast_with_poll_1s_over_gpuscale_push": round(
                modelled["prometheus_fast_plus_keda_poll_1s"]["p95"] / measured["gpuscale_push"]["p95"], 1
            ),
        },
        "goal": {"gpuscale_push_p95_s": "< 1.5"},
        "met": {"gpuscale_push_p95_s": measured["gpuscale_push"]["p95"] < 1.5},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--usual-scrape", default="15s")
    ap.add_argument("--fast-scrape", default="1s")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds before the first step")
    ap.add_argument("--step-timeout", type=float, default=40.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    c.exit_on_sigterm()
    c.write_result("reaction.json", asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
