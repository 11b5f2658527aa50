#!/usr/bin/env python3
"""Growth: how GetMetrics latency and the scaler's memory grow from 1 to 1,000 nodes and from 1 to 2,000
ScaledObjects. A table in bench/results/growth.json and a plot in bench/results/growth.png.

Same setup as scaler_scale.py (simulated agents over real Watch streams, one update per node per second, the
real `gpuscale scaler` pinned with `taskset -c 0,1`, sequential GetMetrics from a grpc client on loopback),
with the scaler's sample history set to --history seconds (default 30) and each point measured once that
history is full, so every point is in its steady state.

* nodes: a fresh fleet and scaler per point; N nodes x 8 GPUs, N/2 workloads (at least 1) of 4 pods x 2 GPUs,
  as many ScaledObjects, all of them queried;
* ScaledObjects: one fleet of 1,000 nodes holding 2,000 workloads (2 pods x 2 GPUs each) and one scaler;
  the first S ScaledObjects are asked once (their metadata parsed, their GPUs selected and cached), then the
  latency is measured over those S and the RSS read. Its baseline already holds every pod of the 2,000
  workloads, so what grows is the per-ScaledObject cost (metadata cache, selection cache).
RSS: the scaler process's VmRSS from /proc.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _common as c
from scaler_scale import grpc_latency


def warm(port: int, workloads: list[int]) -> None:
    grpc_latency(port, workloads, calls=0, warmup=len(workloads))


def node_point(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    layout = c.Layout(nodes=nodes, workloads=max(1, nodes // 2))
    workloads = list(range(layout.workloads))
    with c.fleet(layout) as f, c.scaler([f"127.0.0.1:{p}" for p in f["ports"]], history=args.history) as s:
        pid = s["proc"].pid
        time.sleep(args.history + 3)
        warm(s["grpc_port"], workloads)
        times, errors = grpc_latency(s["grpc_port"], workloads, args.calls)
        point = {
            "nodes": nodes,
            "gpus": nodes * c.GPUS_PER_NODE,
            "scaled_objects": len(workloads),
            "connect_s": s["connect_s"],
            "rss_mib": round(c.rss_mib(pid), 1),
            "errors": errors,
            "getmetrics_ms": c.summary_ms(times),
        }
    print(point, flush=True)
    return point


def so_points(counts: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    layout = c.Layout(nodes=1000, workloads=max(counts), pods_per_workload=2, gpus_per_pod=2)
    out = []
    with c.fleet(layout) as f, c.scaler([f"127.0.0.1:{p}" for p in f["ports"]], history=args.history) as s:
        pid = s["proc"].pid
        time.sleep(args.history + 3)
        base = round(c.rss_mib(pid), 1)
        for n in counts:
            workloads = list(range(n))
            warm(s["grpc_port"], workloads)
            times, errors = grpc_latency(s["grpc_port"], workloads, args.calls)
            point = {
                "scaled_objects": n,
                "nodes": 1000,
                "gpus_per_workload": 4,
                "rss_mib": round(c.rss_mib(pid), 1),
                "rss_before_any_call_mib": base,
                "errors": errors,
                "getmetrics_ms": c.summary_ms(times),
            }
            print(point, flush=True)
            out.append(point)
    return out


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, rows, key, label in (
        (axes[0], result["by_nodes"], "nodes", "nodes (x 8 GPUs)"),
        (axes[1], result["by_scaled_objects"], "scaled_objects", "ScaledObjects"),
    ):
        xs = [r[key] for r in rows]
        ax.plot(xs, [r["getmetrics_ms"]["p50"] for r in rows], "o-", label="GetMetrics p50")
        ax.plot(xs, [r["getmetrics_ms"]["p99"] for r in rows], "s--", label="GetMetrics p99")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("latency (ms, client-observed)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        twin = ax.twinx()
        twin.plot(xs, [r["rss_mib"] for r in rows], "^:", color="tab:red", label="scaler RSS")
        twin.set_ylabel("scaler RSS (MiB)", color="tab:red")
        twin.set_ylim(bottom=0)
        lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        labels = ax.get_legend_handles_labels()[1] + twin.get_legend_handles_labels()[1]
        ax.legend(lines, labels, loc="upper left", fontsize=8)
    axes[0].set_title("growth with nodes (N/2 workloads, all queried)")
    axes[1].set_title("growth with ScaledObjects (1,000 nodes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,10,100,250,500,1000")
    ap.add_argument("--scaled-objects", default="1,10,100,500,1000,2000")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--history", type=int, default=30)
    ap.add_argument("--out")
    ap.add_argument("--plot", default=str(c.RESULTS / "growth.png"))
    args = ap.parse_args()
    c.exit_on_sigterm()
    result: dict[str, Any] = {
        "benchmark": "growth",
        "machine": c.machine(),
        "history_s": args.history,
        "by_nodes": [node_point(int(n), args) for n in args.nodes.split(",")],
        "by_scaled_objects": so_points([int(n) for n in args.scaled_objects.split(",")], args),
    }
    plot(result, args.plot)
    result["plot"] = "growth.png"
    c.write_result("growth.json", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
