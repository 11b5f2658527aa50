#!/usr/bin/env python3
"""The scaler's own work, without gRPC: what one agent update costs to apply (``ClusterState.apply``) and
what one KEDA call costs to answer (the ``ExternalScalerService`` method, called in-process), at the scale of
bench/scaler_scale.py (1,000 nodes x 8 GPUs, 500 ScaledObjects, 120 s of history).

The peer, measured in the same run: the bare decode of the same agent message (``NodeUpdate.FromString``),
which no implementation can skip, and the bare construction of the same answer (``GetMetricsResponse``).
``--streams N`` keeps N StreamIsActive feeds open while the updates apply (KEDA's external-push keeps one
per ScaledObject), each woken by its workload's GPUs. Writes bench/results/scaler-cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import _common as c


class _Context:
    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")


def build(layout: c.Layout, history: int) -> tuple[Any, list[Any], float]:
    from gpuscale._proto import agent_pb2
    from gpuscale.scaler.state import ClusterState

    state = ClusterState(history_s=float(history))
    pods_by_node: dict[int, list[c.Pod]] = {}
    for p in layout.pods():
        pods_by_node.setdefault(p.node, []).append(p)
    now = 1_700_000_000.0
    for n in range(layout.nodes):
        snap = c.node_message(n, agent_pb2.NodeUpdate.SNAPSHOT, pods_by_node.get(n, []))
        for g in snap.gpus:
            g.samples[0].timestamp = now - history
        state.apply(snap)
    updates = [
        c.node_message(n, agent_pb2.NodeUpdate.UPDATE, pods_by_node.get(n, [])) for n in range(layout.nodes)
    ]
    return state, updates, now


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gpuscale._proto import agent_pb2
    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale.scaler.service import ExternalScalerService
    from gpuscale.scaler.source import Query
    from gpuscale.scaling.selector import parse_selector

    layout = c.Layout(nodes=args.nodes, workloads=args.workloads)
    state, updates, now = build(layout, args.history)
    for w in range(args.streams):  # open StreamIsActive streams, each following its workload's GPUs
        query = Query("workload", c.namespace_of(w), parse_selector(f"app=w{w}"))
        state.feed(query).follow(state.select(query).uuids)
    wire = [u.SerializeToString() for u in updates]
    # fill the history: one update per node per second, as the agents send them
    apply_times: list[float] = []
    decode_times: list[float] = []
    for second in range(args.history, 0, -1):
        for raw in wire:
            t0 = time.perf_counter()
            msg = agent_pb2.NodeUpdate.FromString(raw)
            t1 = time.perf_counter()
            for g in msg.gpus:
                g.samples[0].timestamp = now - second + 1
            t2 = time.perf_counter()
            state.apply(msg)
            t3 = time.perf_counter()
            decode_times.append(t1 - t0)
            apply_times.append(t3 - t2)
    clock = now + 0.5
    service = ExternalScalerService(state, clock=lambda: clock)
    requests = [c.get_metrics_request(w) for w in range(args.workloads)]
    context = _Context()

    async def calls() -> tuple[list[float], list[float], float]:
        times: list[float] = []
        peer: list[float] = []
        worst = 0.0
        for w, req in enumerate(requests):  # warm the caches; check every answer
            got = await service.GetMetrics(req, context)
            want = c.workload_avg(layout, w) * layout.pods_per_workload
            worst = max(worst, abs(got.metricValues[0].metricValueFloat - want))
        for i in range(args.calls):
            req = requests[i % len(requests)]
            t0 = time.perf_counter()
            await service.GetMetrics(req, context)
            t1 = time.perf_counter()
            pb.GetMetricsResponse(
                metricValues=[
                    pb.MetricValue(metricName=req.metricName, metricValue=123, metricValueFloat=123.4)
                ]
            )
            t2 = time.perf_counter()
            times.append(t1 - t0)
            peer.append(t2 - t1)
        return times, peer, worst

    times, peer, worst = asyncio.run(calls())
    return {
        "nodes": args.nodes,
        "gpus": args.nodes * c.GPUS_PER_NODE,
        "scaled_objects": args.workloads,
        "history_s": args.history,
        "open_streams": args.streams,
        "apply_update_us": c.summary_us(apply_times),
        "decode_update_us": c.summary_us(decode_times),
        "apply_cores_at_1000_updates_per_s": round(sum(apply_times) / len(apply_times) * 1000, 3),
        "getmetrics_us": c.summary_us(times),
        "build_response_us": c.summary_us(peer),
        "value_error": worst,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--workloads", type=int, default=500)
    ap.add_argument("--history", type=int, default=120)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument(
        "--streams",
        type=int,
        default=0,
        help="StreamIsActive feeds open while updates apply (one per workload)",
    )
    ap.add_argument("--out")
    args = ap.parse_args()
    result = {"benchmark": "scaler-cost", "machine": c.machine(), "scale": run(args)}
    c.write_result("scaler-cost.json", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
