#!/usr/bin/env python3
"""Scaler at scale: GetMetrics latency and throughput of a real `gpuscale scaler` holding 1,000 nodes x 8 GPUs
and answering 500 ScaledObjects, against a Prometheus instant query computing the same aggregate over the
same 8,000 series, in the same run.

Setup (all on loopback, one machine):
* simulated agents (`_common.py fleet`, one process): one gRPC server with one port per node; every Watch
  stream is one node sending a SNAPSHOT, then an UPDATE with a fresh sample of its 8 GPUs every second
  (1,000 updates/s in all, staggered) - the scaler does exactly the work it does with real agents. We stream
  rather than feed `ClusterState.apply` directly because the update load competes with the queries on the
  scaler's event loop; leaving it out would flatter the latency;
* the scaler: `python -m gpuscale scaler --agents <1,000 addresses>`, pinned with `taskset -c 0,1`;
* 500 workloads (4 pods x 2 GPUs on 4 nodes each) and 500 ScaledObjects with distinct trigger metadata
  (`podSelector: app=wN`, workload scope, avg of gpu_utilization, default window 10 s);
* the peer: Prometheus (Debian's package) scraping the same 8,000 GPUs as dcgm-exporter series every 15 s
  from the fleet's /metrics, asked `avg(DCGM_FI_DEV_GPU_UTIL{namespace="ns-N", pod=~"wN-.*"})` over HTTP.
Latency: one call at a time from this process (grpc sync client; HTTP keep-alive client for Prometheus),
and from the C++ client; also `grpc.health.v1.Health/Check` on the same server, the floor of the gRPC stack
with no work behind it.
Throughput: `bench/load/grpc_load.cc` (C++, built on first use where g++ and Debian's libgrpc++-dev are
present) keeps 64 calls in flight on one connection, as KEDA keeps one connection per scaler address, for
--seconds; then the same for Health/Check (the floor under load). Without it, two Python load processes
with 32 calls in flight each. The scaler's CPU time is read from /proc, giving its CPU cost per call and
calls per CPU-second. The peer under load: h2load (Debian nghttp2-client) sends the same aggregates as
instant queries over 4 connections, with Prometheus's CPU per query.
Also the small case: one node with 8 GPUs, one workload holding all 8. Measured after --warm seconds of
streaming, when every GPU's 120 s sample history is full (a call's cost grows with it until then).

Goals: p99 < 2 ms at scale (< 1 ms for the 8-GPU case), > 5,000 calls/s, >= 10x faster than the
query. Writes bench/results/scaler-scale.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import _common as c


def grpc_latency(port: int, workloads: list[int], calls: int, warmup: int = 300) -> tuple[list[float], int]:
    import grpc

    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    requests = [c.get_metrics_request(w) for w in workloads]
    times: list[float] = []
    errors = 0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalScalerStub(ch)
        for i in range(warmup + calls):
            req = requests[i % len(requests)]
            t0 = time.perf_counter()
            try:
                stub.GetMetrics(req, timeout=5)
            except grpc.RpcError:
                errors += 1
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
    return times, errors


def health_latency(port: int, calls: int, warmup: int = 300) -> list[float]:
    """The floor: ``grpc.health.v1.Health/Check`` on the same server (same gRPC stack, no work)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    times: list[float] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        request = health_pb2.HealthCheckRequest(service="")
        for i in range(warmup + calls):
            t0 = time.perf_counter()
            stub.Check(request, timeout=5)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def check_values(port: int, layout: c.Layout, workloads: list[int]) -> float:
    """Every ScaledObject answers, with avg x pods; returns the largest deviation from the truth."""
    import grpc

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    worst = 0.0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalScalerStub(ch)
        for w in workloads:
            name, ns, md = c.scaled_object(w)
            ref = pb.ScaledObjectRef(name=name, namespace=ns, scalerMetadata=md)
            got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10)
            value = got.metricValues[0].metricValueFloat
            worst = max(worst, abs(value - c.workload_avg(layout, w) * layout.pods_per_workload))
    return worst


def prometheus_latency(
    prom: c.PrometheusServer, workloads: list[int], calls: int
) -> tuple[list[float], float]:
    conn = http.client.HTTPConnection("127.0.0.1", prom.port, timeout=10)
    times: list[float] = []
    first = json.loads(_get(conn, c.prometheus_query(workloads[0])))["data"]["result"]
    value = float(first[0]["value"][1])
    for i in range(50 + calls):
        q = c.prometheus_query(workloads[i % len(workloads)])
        t0 = time.perf_counter()
        body = _get(conn, q)
        dt = time.perf_counter() - t0
        assert '"status":"success"' in body, body[:200]
        if i >= 50:
            times.append(dt)
    conn.close()
    return times, value


def _get(conn: http.client.HTTPConnection, promql: str) -> str:
    conn.request("GET", "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    r = conn.getresponse()
    return r.read().decode()


def throughput(port: int, seconds: float, workloads: int, scaler_pid: int) -> dict[str, Any]:
    """GetMetrics calls/s and the scaler's CPU per call, then the same for Health/Check (the floor of the
    gRPC stack on the same server, under the same load). With the C++ client (one connection, as KEDA keeps
    one, 64 calls in flight) where it builds, else two Python load processes with 32 calls in flight each."""
    binary = c.grpc_load_binary()
    if binary is None:
        return python_throughput(port, seconds, workloads, scaler_pid)
    with tempfile.TemporaryDirectory() as tmp:
        requests = c.write_messages(Path(tmp) / "requests.bin", c.get_metrics_requests(workloads))
        health = c.write_messages(Path(tmp) / "health.bin", [b""])
        runs = {}
        for name, file, method in (
            ("getmetrics", requests, "/externalscaler.ExternalScaler/GetMetrics"),
            ("health_check", health, "/grpc.health.v1.Health/Check"),
        ):
            cpu0, main0, t0 = c.tree_cpu_seconds(scaler_pid), c.cpu_seconds(scaler_pid), time.monotonic()
            out = c.grpc_load(binary, port, file, threads=64, seconds=seconds, method=method)
            cpu, wall = c.tree_cpu_seconds(scaler_pid) - cpu0, time.monotonic() - t0
            main = c.cpu_seconds(scaler_pid) - main0
            runs[name] = {
                "calls": out["calls"],
                "errors": out["errors"],
                "seconds": out["seconds"],
                "calls_per_s": round(out["calls"] / out["seconds"], 1),
                "latency_ms": out["latency_ms"],
                "scaler_cpu_cores": round(cpu / wall, 3),
                "scaler_cpu_us_per_call": round(cpu / out["calls"] * 1e6, 1),
                "scaler_capacity_calls_per_core_s": round(out["calls"] / cpu, 1),
                # the main process alone (with ingest workers, the one whose event loop answers KEDA)
                "main_process_cpu_us_per_call": round(main / out["calls"] * 1e6, 1),
                "main_process_calls_per_cpu_s": round(out["calls"] / main, 1),
            }
    return {
        "client": "bench/load/grpc_load.cc: C++, one connection, 64 calls in flight",
        **runs["getmetrics"],
        "floor_health_check": runs["health_check"],
    }


def python_throughput(port: int, seconds: float, workloads: int, scaler_pid: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(c.__file__).resolve()),
        "load",
        "--port",
        str(port),
        "--seconds",
        str(seconds),
        "--concurrency",
        "32",
        "--workloads",
        str(workloads),
    ]
    cpu0, t0 = c.tree_cpu_seconds(scaler_pid), time.monotonic()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    cpu1, t1 = c.tree_cpu_seconds(scaler_pid), time.monotonic()
    calls = sum(o["calls"] for o in outs)
    wall = max(o["seconds"] for o in outs)
    cpu = cpu1 - cpu0
    return {
        "client": "Python grpc.aio, 2 processes x 32 calls in flight (the C++ client did not build)",
        "seconds": round(wall, 2),
        "calls": calls,
        "errors": sum(o["errors"] for o in outs),
        "calls_per_s": round(calls / wall, 1),
        "scaler_cpu_cores": round(cpu / (t1 - t0), 3),
        "scaler_cpu_us_per_call": round(cpu / calls * 1e6, 1),
        "scaler_capacity_calls_per_core_s": round(calls / cpu, 1),
    }


def prometheus_throughput(prom: c.PrometheusServer, workloads: list[int], seconds: float) -> dict[str, Any]:
    """The peer under load: the same aggregates as instant queries from h2load (4 keep-alive connections),
    with Prometheus's CPU per query."""
    with tempfile.TemporaryDirectory() as tmp:
        urls = Path(tmp) / "urls.txt"
        urls.write_text(
            "".join(
                f"{prom.url}/api/v1/query?{urllib.parse.urlencode({'query': c.prometheus_query(w)})}\n"
                for w in workloads
            )
        )
        cpu0, t0 = c.cpu_seconds(prom.pid), time.monotonic()
        out = c.h2load(urls, clients=4, seconds=seconds)
        cpu, wall = c.cpu_seconds(prom.pid) - cpu0, time.monotonic() - t0
    return {
        "client": "h2load --h1, 4 connections",
        **out,
        "prometheus_cpu_cores": round(cpu / wall, 3),
        "prometheus_cpu_us_per_query": round(cpu / out["done"] * 1e6, 1),
        "prometheus_capacity_queries_per_core_s": round(out["done"] / cpu, 1),
    }


def compiled_latency(port: int, workloads: int, seconds: float = 5.0) -> dict[str, Any] | None:
    """Latency one call at a time from the C++ client (closer to KEDA's Go client than Python's is), for
    GetMetrics and for the Health/Check floor; ``None`` where the client does not build."""
    binary = c.grpc_load_binary()
    if binary is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        requests = c.write_messages(Path(tmp) / "requests.bin", c.get_metrics_requests(workloads))
        health = c.write_messages(Path(tmp) / "health.bin", [b""])
        get = c.grpc_load(binary, port, requests, threads=1, seconds=seconds)
        floor = c.grpc_load(
            binary, port, health, threads=1, seconds=seconds, method="/grpc.health.v1.Health/Check"
        )
    return {
        "client": "bench/load/grpc_load.cc, one call at a time",
        "getmetrics_ms": get["latency_ms"],
        "getmetrics_calls": get["calls"],
        "getmetrics_errors": get["errors"],
        "health_check_ms": floor["latency_ms"],
    }


def single(args: argparse.Namespace) -> dict[str, Any]:
    layout = c.Layout(nodes=1, workloads=1)  # one node, one workload: 4 pods x 2 GPUs = the 8 GPUs
    with c.fleet(layout) as f, c.scaler([f"127.0.0.1:{p}" for p in f["ports"]]) as s:
        time.sleep(args.warm)
        deviation = check_values(s["grpc_port"], layout, [0])
        times, errors = grpc_latency(s["grpc_port"], [0], args.calls)
        floor = health_latency(s["grpc_port"], args.calls)
        compiled = compiled_latency(s["grpc_port"], 1)
    return {
        "nodes": 1,
        "gpus": 8,
        "scaled_objects": 1,
        "value_error": deviation,
        "errors": errors,
        "getmetrics_ms": c.summary_ms(times),
        "health_check_ms": c.summary_ms(floor),
        "compiled_client": compiled,
    }


def measure(s: dict[str, Any], layout: c.Layout, args: argparse.Namespace) -> dict[str, Any]:
    """One scaler at steady state: idle cost, values, latency, throughput, memory. CPU and memory are the
    scaler's whole process tree (its ingest workers included)."""
    pid = s["proc"].pid
    workloads = list(range(args.workloads))
    out: dict[str, Any] = {"scaler_connect_s": s["connect_s"]}
    time.sleep(3)
    cpu0, main0, t0 = c.tree_cpu_seconds(pid), c.cpu_seconds(pid), time.monotonic()
    time.sleep(max(5.0, args.warm - 3))  # steady state: every GPU's sample history full
    wall = time.monotonic() - t0
    out["scaler_idle_cpu_cores"] = round((c.tree_cpu_seconds(pid) - cpu0) / wall, 3)  # 1,000 updates/s
    out["main_process_idle_cpu_cores"] = round((c.cpu_seconds(pid) - main0) / wall, 3)
    out["warm_s"] = args.warm
    out["value_error"] = check_values(s["grpc_port"], layout, workloads)
    out["scaler_rss_mib"] = round(c.tree_rss_mib(pid), 1)
    times, errors = grpc_latency(s["grpc_port"], workloads, args.calls)
    out["getmetrics_ms"] = c.summary_ms(times)
    out["getmetrics_errors"] = errors
    out["health_check_ms"] = c.summary_ms(health_latency(s["grpc_port"], args.calls))
    out["compiled_client"] = compiled_latency(s["grpc_port"], args.workloads)
    out["throughput"] = throughput(s["grpc_port"], args.seconds, args.workloads, pid)
    out["scaler_peak_rss_mib"] = round(c.rss_mib(pid, "VmHWM"), 1)
    return out


def scale(args: argparse.Namespace) -> dict[str, Any]:
    layout = c.Layout(nodes=args.nodes, workloads=args.workloads)
    workloads = list(range(args.workloads))
    out: dict[str, Any] = {
        "nodes": args.nodes,
        "gpus": args.nodes * c.GPUS_PER_NODE,
        "scaled_objects": args.workloads,
        "gpus_per_workload": 8,
        "scaler": {},
    }
    with c.fleet(layout) as f:
        agents = [f"127.0.0.1:{p}" for p in f["ports"]]
        target = f"127.0.0.1:{f['metrics_port']}"
        with c.prometheus({"dcgm": (target, args.scrape)}) as prom:
            for workers in args.ingest_workers:
                with c.scaler(agents, extra=["--ingest-workers", str(workers)]) as s:
                    name = "in_process" if workers == 0 else f"ingest_workers_{workers}"
                    out["scaler"][name] = {"ingest_workers": workers, **measure(s, layout, args)}
            deadline = time.monotonic() + 60
            while not prom.query(c.prometheus_query(0)):
                assert time.monotonic() < deadline, "Prometheus has no data"
                time.sleep(0.5)
            ptimes, pvalue = prometheus_latency(prom, workloads, args.prom_calls)
            loaded = prometheus_throughput(prom, workloads, args.seconds) if shutil.which("h2load") else None
            out["prometheus"] = {
                "version": c.version_of_prometheus(),
                "scrape_interval": args.scrape,
                "series": args.nodes * c.GPUS_PER_NODE,
                "query_example": c.prometheus_query(17),
                "value_error": abs(pvalue - c.workload_avg(layout, 0)),
                "query_ms": c.summary_ms(ptimes),
                "throughput": loaded,
            }
    p = out["prometheus"]["query_ms"]
    for run in out["scaler"].values():
        g = run["getmetrics_ms"]
        run["ratio_prometheus_over_gpuscale"] = {
            "p50": round(p["p50"] / g["p50"], 1),
            "p99": round(p["p99"] / g["p99"], 1),
        }
        if loaded is not None:  # calls answered per CPU-second, gpuscale over Prometheus
            run["ratio_capacity_per_core_gpuscale_over_prometheus"] = round(
                run["throughput"]["scaler_capacity_calls_per_core_s"]
                / loaded["prometheus_capacity_queries_per_core_s"],
                2,
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--workloads", type=int, default=500)
    ap.add_argument("--calls", type=int, default=5000, help="sequential GetMetrics calls measured")
    ap.add_argument("--prom-calls", type=int, default=1000, help="sequential Prometheus queries measured")
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput phase")
    ap.add_argument("--scrape", default="15s")
    ap.add_argument(
        "--warm",
        type=float,
        default=125.0,
        help="seconds of streaming before measuring: the scaler keeps 120 s of samples per GPU",
    )
    ap.add_argument(
        "--ingest-workers",
        default="0,1",
        help="scaler configurations to measure, comma-separated --ingest-workers values",
    )
    ap.add_argument("--out")
    args = ap.parse_args()
    args.ingest_workers = [int(w) for w in args.ingest_workers.split(",")]
    c.exit_on_sigterm()
    result: dict[str, Any] = {
        "benchmark": "scaler-scale",
        "machine": c.machine(),
        "setup": "scaler subprocess (taskset -c 0,1) fed by simulated agents over real Watch streams; "
        "client, fleet and Prometheus share the same 2 cores",
        "single_workload": single(args),
        "scale": scale(args),
        "goals": {
            "p99_ms_at_scale": "< 2",
            "p99_ms_8_gpus": "< 1",
            "calls_per_s": "> 5000",
            "ratio_vs_prometheus": ">= 10",
        },
    }
    result["met"] = {
        name: {
            "p99_ms_at_scale": run["getmetrics_ms"]["p99"] < 2,
            "p99_ms_8_gpus": result["single_workload"]["getmetrics_ms"]["p99"] < 1,
            "calls_per_s": run["throughput"]["calls_per_s"] > 5000,
            "ratio_vs_prometheus": run["ratio_prometheus_over_gpuscale"]["p50"] >= 10,
        }
        for name, run in result["scale"]["scaler"].items()
    }
    c.write_result("scaler-scale.json", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
