#!/usr/bin/env python3
"""Where a call's time goes: the scaler's CPU per thread under a saturating GetMetrics load, against the same
for `grpc.health.v1.Health/Check` on the same server (the gRPC stack with no work behind it).

The scaler answers every call of a connection on one event loop (the main thread). gRPC's asyncio stack
also runs a poller thread and C-core's `event_engine` threads. If the main thread is near a full core while
the others are not, the event loop is the limit: more cores do not raise one process's calls/s, and the
most one process can answer is 1 / (main-thread CPU per call). The peer (Health/Check) shows how much of
that per-call cost is the gRPC stack itself.

Setup: the simulated agents (`_common.py fleet`) streaming --nodes nodes x 8 GPUs at 1 s, the real
`gpuscale scaler` (its CLI) following them, --nodes/2 workloads of 4 pods x 2 GPUs; the C++ load client
(`bench/load/grpc_load.cc`) with 64 calls in flight on one connection for --seconds, first Health/Check,
then GetMetrics over every workload. CPU per thread from /proc/<pid>/task. Everything shares the machine's
cores, the load client included. Writes bench/results/scaler-threads.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: (its name, CPU seconds so far)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def python_child(pid: int) -> int:
    """The scaler's own process under ``taskset`` (its only child), or ``pid`` itself."""
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return int(kids[0]) if kids else pid


def under_load(
    binary: Path, port: int, pid: int, requests: Path, method: str, seconds: float
) -> dict[str, Any]:
    before, t0 = thread_cpu(pid), time.monotonic()
    result = c.grpc_load(binary, port, requests, threads=64, seconds=seconds, method=method)
    after, elapsed = thread_cpu(pid), time.monotonic() - t0
    calls = result["calls"]
    main_name = after.get(pid, ("?", 0.0))[0]
    threads: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        used = cpu - before.get(tid, (name, 0.0))[1]
        key = "main (event loop)" if tid == pid else name
        threads[key] = threads.get(key, 0.0) + used / elapsed
    main = threads.get("main (event loop)", 0.0)
    return {
        "calls_per_s": round(calls / result["seconds"], 1),
        "errors": result["errors"],
        "main_thread": main_name,
        "cores_by_thread": {k: round(v, 3) for k, v in sorted(threads.items(), key=lambda kv: -kv[1])},
        "cores_total": round(sum(threads.values()), 3),
        "main_thread_us_per_call": round(1e6 * main * elapsed / calls, 1) if calls else None,
        "one_loop_ceiling_calls_per_s": round(calls / (main * elapsed)) if calls and main else None,
    }


def run(nodes: int, seconds: float, warm: float) -> dict[str, Any]:
    binary = c.grpc_load_binary()
    if binary is None:
        raise SystemExit("bench/load/grpc_load.cc could not be built (needs g++ and libgrpc++-dev)")
    layout = c.Layout(nodes=nodes, workloads=max(1, nodes // 2))
    with tempfile.TemporaryDirectory() as tmp:
        requests = c.write_messages(Path(tmp) / "get.bin", c.get_metrics_requests(layout.workloads))
        health = c.write_messages(Path(tmp) / "health.bin", [b""])
        with c.fleet(layout) as f:
            with c.scaler([f"127.0.0.1:{p}" for p in f["ports"]], history=30) as s:
                time.sleep(warm)  # the 30 s history full
                pid = python_child(s["proc"].pid)
                port = s["grpc_port"]
                floor = under_load(binary, port, pid, health, "/grpc.health.v1.Health/Check", seconds)
                method = "/externalscaler.ExternalScaler/GetMetrics"
                get = under_load(binary, port, pid, requests, method, seconds)
    return {
        "nodes": nodes,
        "gpus": nodes * c.GPUS_PER_NODE,
        "scaled_objects": layout.workloads,
        "floor_health_check": floor,
        "getmetrics": get,
        "getmetrics_main_thread_over_floor": (
            round(get["main_thread_us_per_call"] / floor["main_thread_us_per_call"], 2)
            if get["main_thread_us_per_call"] and floor["main_thread_us_per_call"]
            else None
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="50,1000", help="fleet sizes, comma-separated")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warm", type=float, default=35.0, help="seconds of streaming before measuring")
    ap.add_argument("--out")
    args = ap.parse_args()
    result = {
        "benchmark": "scaler-threads",
        "machine": c.machine(),
        "setup": "scaler subprocess (taskset -c 0,1), C++ client with 64 calls in flight on one connection; "
        "client, fleet and scaler share the machine's cores",
        "runs": [run(int(n), args.seconds, args.warm) for n in args.nodes.split(",")],
    }
    path = c.write_result("scaler-threads.json", result, args.out)
    print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
