#!/usr/bin/env python3
"""Side by side with the Go peer pmady/keda-gpu-scaler v0.6.0: the same node, GPUs, metadata and clients.

The peer is its own release source (``../shared/peer/keda-gpu-scaler-v0.6.0``, or ``--peer-source``), built
once through the wrapper module ``bench/peer/`` (``_peer.py``): its own ``pkg/scaler`` served over gRPC as its
``cmd/keda-gpu-scaler/main.go`` serves it, with its ``gpu.MockCollector`` holding the GPUs gpuscale's mock
backend produces. Without that source (or Go) the run prints one line and skips.

The setup, for each side: one node of 8 mock H100s at fixed utilizations (``util(0, g)`` of ``_common.py``:
10, 47, 84, 40, 77, 33, 70, 26 %), node scope, the same trigger meaning (``gpu_utilization``, an
aggregation, target 60, an activation threshold) in each side's own metadata keys. gpuscale is
``gpuscale agent --backend mock --serve-external-scaler`` (its CLI, 1 s sampling, the GPUs from a demand
file); the peer reads its collector on every call.

Measured, the sides taking turns (``--rounds``, order alternating) so that the machine's noise hits both:

* values: ``GetMetricSpec``, ``GetMetrics`` for max/min/avg/sum (the aggregates both define alike) against
  the truth, ``IsActive`` on each side of the activation threshold;
* latency one call at a time, ``GetMetrics``, ``IsActive`` and ``Health/Check`` (the gRPC floor), from the
  Python client and the C++ one (``bench/load/grpc_load.cc``); throughput on one connection with 1 and 64
  calls in flight (C++), the server's CPU per call and calls per CPU-second, CPU and RSS idle and under load;
  gpuscale's RSS beside the floor of its runtime (a Python process with the agent's imports, serving nothing);
* reaction to a GPU step (every GPU +30 %, capped at 100: the average 48.4 -> 75.75 across 60, and back):
  when ``GetMetrics`` (polled every 20 ms) and ``StreamIsActive`` (KEDA's ``external-push``) show it;
* the engine path: a mock vLLM (``gpuscale.backends.mock_engine``) whose queue steps 0 -> 20 (target and
  activation 5). gpuscale reads it through its agent (the engine of a GPU pod: a local API server and kubelet,
  as ``engine_reaction.py``) and scaler; the peer through its ``pkg/vllm`` client (``vllmEndpoint``), which
  scrapes on every call. The same reaction paths; and the CPU per scrape of each side's client against the
  same engine (served by its own process), gpuscale's scrape + parse + map against the peer's ``Scrape``.

Where one side has no equivalent of the other's feature, the table says so; nothing is measured in its place.
Writes bench/results/peer-keda-gpu-scaler.json and prints the side-by-side table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import _peer
import _peer_paths as paths

NODE = c.node_name(0)
UTILS = [c.util(0, g) for g in range(c.GPUS_PER_NODE)]
STEP = 30.0  # every GPU +30 %: the average from 48.375 to 78.375
TARGET = 60.0
AGGREGATIONS = ("max", "min", "avg", "sum")  # the aggregations both sides define alike
CPP_CLIENT = "bench/load/grpc_load.cc"
ENGINE_TARGET = 5.0
PEER_POLL_DEFAULT = 10  # the peer's pollIntervalSeconds when the metadata sets none (pkg/scaler/server.go)


def step_timeout(pause: float) -> float:
    """How long a step waits for every path: the peer's stream ticks every 10 s by default."""
    return max(pause, PEER_POLL_DEFAULT) + 5.0


# What one side has and the other has no equivalent of, read in the peer's source (pkg/scaler/server.go,
# pkg/vllm, pkg/profiles) and gpuscale's; docs/peer.md has the whole comparison. Nothing here is measured.
NO_EQUIVALENT: list[tuple[str, str, str]] = [
    ("workload scope: the GPUs of the scale target's pods, any node", "yes", "no equivalent"),
    ("pool scope: nodes chosen by labels", "yes", "no equivalent"),
    ("window (smoothing) and staleAfter", "yes", "no equivalent: reads on every call"),
    (
        "StreamIsActive sent on change",
        "yes",
        f"no equivalent: every pollIntervalSeconds ({PEER_POLL_DEFAULT} s)",
    ),
    (
        "p50, p90; p95/p99 by interpolation",
        "yes",
        "no equivalent: p95/p99 by nearest rank (84 here, not 81.55)",
    ),
    ("GPM activity metrics (sm_active, tensor_active, ...)", "yes", "no equivalent"),
    ("integer fields for KEDA <= 2.16", "yes", "no equivalent: floats only"),
    ("engine metrics summed over a workload's pods", "yes", "no equivalent: one vllmEndpoint URL"),
    ("vLLM V1 KV cache (vllm:kv_cache_usage_perc)", "yes", "no equivalent: reads vllm:gpu_cache_usage_perc"),
    ("one GPU by index (gpuIndex)", "no equivalent", "yes"),
    ("PCIe and NVLink throughput as trigger metrics", "no equivalent", "yes"),
    ("Triton mean queue wait (triton_queue_wait_ms)", "no equivalent: queue length, request rate", "yes"),
]


def gpuscale_metadata(aggregation: str = "avg", activation: float = 0.0) -> dict[str, str]:
    return {
        "scalerAddress": "gpuscale-agent.gpuscale-system.svc:6000",
        "scope": "node",
        "metric": "gpu_utilization",
        "aggregation": aggregation,
        "targetValue": f"{TARGET:g}",
        "activationValue": f"{activation:g}",
        "window": "0",
    }


def peer_metadata(aggregation: str = "avg", activation: float = 0.0) -> dict[str, str]:
    return {
        "scalerAddress": "keda-gpu-scaler.keda.svc:6000",
        "metricType": "gpu_utilization",
        "aggregation": aggregation,
        "targetValue": f"{TARGET:g}",
        "activationThreshold": f"{activation:g}",
    }


def gpuscale_engine_metadata() -> dict[str, str]:
    t = f"{ENGINE_TARGET:g}"
    return {"metric": "queue_length", "window": "0", "targetValue": t, "activationValue": t}


def peer_engine_metadata(engine_url: str) -> dict[str, str]:
    t = f"{ENGINE_TARGET:g}"
    return {
        "metricType": "vllm_queue_depth",
        "vllmEndpoint": engine_url,
        "targetValue": t,
        "activationThreshold": t,
    }


def expected(aggregation: str) -> float:
    aggregate: dict[str, Callable[[list[float]], float]] = {
        "max": max,
        "min": min,
        "sum": sum,
        "avg": statistics.fmean,
    }
    return aggregate[aggregation](UTILS)


def demand(utils: list[float]) -> dict[str, Any]:
    return {"gpus": {str(i): {"utilization": u} for i, u in enumerate(utils)}}


@dataclass
class Side:
    name: str
    port: int
    pid: int
    metadata: Callable[..., dict[str, str]]
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def ref(self, aggregation: str = "avg", activation: float = 0.0) -> Any:
        from gpuscale._proto import externalscaler_pb2 as pb

        return pb.ScaledObjectRef(
            name="llm", namespace="default", scalerMetadata=self.metadata(aggregation, activation)
        )


# -- the sides ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def gpuscale_side(demand_file: Path) -> Iterator[Side]:
    grpc_port, metrics_port = c.free_port(), c.free_port()
    cmd = [
        sys.executable, "-m", "gpuscale", "--log-level", "warning", "agent", "--backend", "mock",
        "--mock-gpus", str(c.GPUS_PER_NODE), "--mock-demand-file", str(demand_file), "--interval", "1",
        "--node-name", NODE, "--grpc-address", f"127.0.0.1:{grpc_port}",
        "--metrics-address", f"127.0.0.1:{metrics_port}", "--kubelet-socket", "/nonexistent/kubelet.sock",
        "--serve-external-scaler",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")})
    try:
        paths.wait_ready(f"http://127.0.0.1:{metrics_port}/readyz", proc, "the gpuscale agent")
        yield Side("gpuscale", grpc_port, proc.pid, gpuscale_metadata)
    finally:
        c.stop(proc)


def python_floor_rss() -> dict[str, float]:
    """RSS of a Python process doing nothing, and of one with the agent's imports: the runtime's floor."""
    out = {}
    for name, code in (
        ("python_bare", "pass"),
        ("python_with_agent_imports", "import gpuscale.cli, gpuscale.agent.service, gpuscale.scaler.local"),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-c", f"{code}\nimport sys, time\nprint(flush=True)\ntime.sleep(30)"],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")},
        )
        try:
            assert proc.stdout is not None
            proc.stdout.readline()
            time.sleep(0.5)
            out[name] = round(c.rss_mib(proc.pid), 1)
        finally:
            c.stop(proc)
    return out


# -- measurements ------------------------------------------------------------------------------------------
def values(side: Side) -> dict[str, Any]:
    """What the side answers for each aggregation both define alike, against the truth; its target; and
    IsActive just below and just above the avg."""
    import grpc

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    out: dict[str, Any] = {}
    with grpc.insecure_channel(f"127.0.0.1:{side.port}") as ch:
        stub = pb_grpc.ExternalScalerStub(ch)
        spec = stub.GetMetricSpec(side.ref(), timeout=10).metricSpecs[0]
        out["metric_spec"] = {
            "metricName": spec.metricName,
            "targetSize": spec.targetSize,
            "targetSizeFloat": spec.targetSizeFloat,
        }
        for agg in AGGREGATIONS:
            req = pb.GetMetricsRequest(scaledObjectRef=side.ref(agg), metricName=spec.metricName)
            got = stub.GetMetrics(req, timeout=10).metricValues[0]
            out[agg] = {
                "metricValueFloat": got.metricValueFloat,
                "metricValue": got.metricValue,
                "expected": expected(agg),
                "error": abs(got.metricValueFloat - expected(agg)),
            }
        # p95 is defined differently on the two sides (not compared): recorded for what each answers
        req = pb.GetMetricsRequest(scaledObjectRef=side.ref("p95"), metricName=spec.metricName)
        out["p95_own_definition"] = stub.GetMetrics(req, timeout=10).metricValues[0].metricValueFloat
        avg = expected("avg")
        out["is_active"] = {
            f"activation {a:g}": stub.IsActive(side.ref("avg", a), timeout=10).result
            for a in (avg - 1, avg + 1)
        }
    want_active = {f"activation {avg - 1:g}": True, f"activation {avg + 1:g}": False}
    out["agree"] = (
        all(out[a]["error"] < 1e-6 for a in AGGREGATIONS)
        and out["is_active"] == want_active
        and abs(out["metric_spec"]["targetSizeFloat"] - TARGET) < 1e-9
    )
    return out


def python_latency(side: Side, calls: int, warmup: int = 200) -> dict[str, Any]:
    """One call at a time from Python's gRPC sync client: GetMetrics, IsActive, and Health/Check."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    out: dict[str, Any] = {}
    with grpc.insecure_channel(f"127.0.0.1:{side.port}") as ch:
        stub, health = pb_grpc.ExternalScalerStub(ch), health_pb2_grpc.HealthStub(ch)
        ref = side.ref()
        for name, call, request in (
            ("getmetrics", stub.GetMetrics, pb.GetMetricsRequest(scaledObjectRef=ref)),
            ("isactive", stub.IsActive, ref),
            ("health_check", health.Check, health_pb2.HealthCheckRequest(service="")),
        ):
            times = []
            for i in range(warmup + calls):
                t0 = time.perf_counter()
                call(request, timeout=5)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            out[name] = c.summary_ms(times)
    return out


def requests_files(side: Side, tmp: Path) -> dict[str, tuple[Path, str]]:
    from gpuscale._proto import externalscaler_pb2 as pb

    ref = side.ref()
    get = pb.GetMetricsRequest(scaledObjectRef=ref).SerializeToString()
    return {
        "getmetrics": (
            c.write_messages(tmp / f"{side.name}-get.bin", [get]),
            "/externalscaler.ExternalScaler/GetMetrics",
        ),
        "isactive": (
            c.write_messages(tmp / f"{side.name}-active.bin", [ref.SerializeToString()]),
            "/externalscaler.ExternalScaler/IsActive",
        ),
        "health_check": (
            c.write_messages(tmp / f"{side.name}-health.bin", [b""]),
            "/grpc.health.v1.Health/Check",
        ),
    }


def cpp_latency(binary: Path, side: Side, seconds: float) -> dict[str, Any]:
    """One call at a time from the C++ client (compiled, like KEDA's Go client)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (file, method) in requests_files(side, Path(tmp)).items():
            r = c.grpc_load(binary, side.port, file, threads=1, seconds=seconds, method=method)
            out[name] = {
                **r["latency_ms"],
                "calls_per_s": round(r["calls"] / r["seconds"], 1),
                "errors": r["errors"],
            }
    return out


def under_load(binary: Path, side: Side, seconds: float, threads: int) -> dict[str, Any]:
    """``threads`` calls in flight on one connection (C++): calls/s, the server's CPU per call and calls per
    CPU-second, its CPU and RSS meanwhile; GetMetrics, then Health/Check (the floor)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = requests_files(side, Path(tmp))
        for name in ("getmetrics", "health_check"):
            file, method = files[name]
            cpu0, t0 = c.tree_cpu_seconds(side.pid), time.monotonic()
            r = c.grpc_load(binary, side.port, file, threads=threads, seconds=seconds, method=method)
            cpu, wall = c.tree_cpu_seconds(side.pid) - cpu0, time.monotonic() - t0
            out[name] = {
                "calls_per_s": round(r["calls"] / r["seconds"], 1),
                "errors": r["errors"],
                "latency_ms": r["latency_ms"],
                "server_cpu_cores": round(cpu / wall, 3),
                "server_cpu_us_per_call": round(cpu / r["calls"] * 1e6, 1),
                "calls_per_cpu_s": round(r["calls"] / cpu, 1),
                "server_rss_mib": round(c.tree_rss_mib(side.pid), 1),
            }
    return out


def idle(sides: list[Side], seconds: float) -> None:
    """Every side's CPU and RSS with no calls, over the same seconds."""
    before, t0 = {s.name: c.tree_cpu_seconds(s.pid) for s in sides}, time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    for s in sides:
        s.results.setdefault("idle", []).append(
            {
                "cpu_cores": round((c.tree_cpu_seconds(s.pid) - before[s.name]) / wall, 4),
                "rss_mib": round(c.tree_rss_mib(s.pid), 1),
            }
        )


# -- reaction ----------------------------------------------------------------------------------------------
def peer_refs(metadata: dict[str, str]) -> tuple[Any, Any, Any]:
    """The peer's ref as given, and for its stream at its default pollIntervalSeconds and at 1 s."""
    from gpuscale._proto import externalscaler_pb2 as pb

    def ref(md: dict[str, str]) -> Any:
        return pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=md)

    return ref(metadata), ref(metadata), ref({**metadata, "pollIntervalSeconds": "1"})


async def gpu_reaction(
    gpuscale: Side, peer: _peer.PeerProcess, demand_file: Path, steps: int, pause: float
) -> dict[str, Any]:
    """Every GPU +30 % at one instant (gpuscale's demand file rewritten, the peer's GPUs swapped); back."""
    from gpuscale._proto import externalscaler_pb2 as pb

    low, high = UTILS, [min(100.0, u + STEP) for u in UTILS]  # the mock caps at 100 %
    peer_low, peer_high = _peer.mock_gpus(NODE, low), _peer.mock_gpus(NODE, high)
    g_ref = pb.ScaledObjectRef(
        name="llm", namespace="default", scalerMetadata=gpuscale_metadata("avg", TARGET)
    )
    p_ref, p_push, p_push_1s = peer_refs(peer_metadata("avg", TARGET))

    def set_level(up: bool) -> float:
        t = time.monotonic()
        _peer.write_json(demand_file, demand(high if up else low))
        peer.set_gpus(peer_high if up else peer_low)
        return t

    watch = paths.Watch(
        getmetrics={
            "gpuscale_getmetrics": (gpuscale.port, g_ref, TARGET),
            "peer_getmetrics": (peer.port, p_ref, TARGET),
        },
        push={
            "gpuscale_push": (gpuscale.port, g_ref),
            "peer_push": (peer.port, p_push),
            "peer_push_1s": (peer.port, p_push_1s),
        },
    )
    result = await paths.react(watch, set_level, steps, pause, step_timeout(pause), "GPU")
    return {
        "from_avg": statistics.fmean(low),
        "to_avg": statistics.fmean(high),
        "threshold": TARGET,
        **result,
    }


async def engine_reaction(peer: _peer.PeerProcess, steps: int, pause: float) -> dict[str, Any]:
    """The mock vLLM's queue 0 -> 20 and back: gpuscale through its agent and scaler, the peer through its
    vLLM client; the same reaction paths as the GPU step."""
    from gpuscale._proto import externalscaler_pb2 as pb

    with paths.engine_process("step") as engine:
        async with paths.gpuscale_engine_stack(engine.port) as (scaler_port, agent_metrics):
            g_ref = pb.ScaledObjectRef(
                name="llm", namespace=paths.NAMESPACE, scalerMetadata=gpuscale_engine_metadata()
            )
            p_ref, p_push, p_push_1s = peer_refs(peer_engine_metadata(engine.url))
            watch = paths.Watch(
                getmetrics={
                    "gpuscale_getmetrics": (scaler_port, g_ref, ENGINE_TARGET),
                    "peer_getmetrics": (peer.port, p_ref, ENGINE_TARGET),
                },
                push={
                    "gpuscale_push": (scaler_port, g_ref),
                    "peer_push": (peer.port, p_push),
                    "peer_push_1s": (peer.port, p_push_1s),
                },
            )
            await asyncio.sleep(3.0)  # the agent has discovered and scraped the engine
            result = await paths.react(watch, engine.step, steps, pause, step_timeout(pause), "engine")
            scrapes = await asyncio.to_thread(paths.engine_scrapes, agent_metrics)
    return {
        "queue_from": 0,
        "queue_to": paths.HIGH_QUEUE,
        "threshold": ENGINE_TARGET,
        "gpuscale_agent_engine_scrapes_by_result": scrapes,
        **result,
    }


async def reactions(
    gpuscale: Side, peer: _peer.PeerProcess, demand_file: Path, steps: int, pause: float
) -> dict[str, Any]:
    """Both reaction phases in one event loop (grpc.aio stays on the loop it started on)."""
    return {
        "gpu_reaction": await gpu_reaction(gpuscale, peer, demand_file, steps, pause),
        "engine_reaction": await engine_reaction(peer, steps, pause),
    }


# -- the table ---------------------------------------------------------------------------------------------
def median_of(runs: list[dict[str, Any]], *path: str) -> float:
    got = []
    for r in runs:
        value: Any = r
        for k in path:
            value = value[k]
        got.append(float(value))
    return statistics.median(got)


ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("GetMetrics p50, Python client (ms)", ("python", "getmetrics", "p50"), "lower"),
    ("GetMetrics p99, Python client (ms)", ("python", "getmetrics", "p99"), "lower"),
    ("IsActive p50, Python client (ms)", ("python", "isactive", "p50"), "lower"),
    ("IsActive p99, Python client (ms)", ("python", "isactive", "p99"), "lower"),
    ("floor: Health/Check p50, Python (ms)", ("python", "health_check", "p50"), "lower"),
    ("GetMetrics p50, C++ client (ms)", ("cpp", "getmetrics", "p50"), "lower"),
    ("GetMetrics p99, C++ client (ms)", ("cpp", "getmetrics", "p99"), "lower"),
    ("IsActive p50, C++ client (ms)", ("cpp", "isactive", "p50"), "lower"),
    ("IsActive p99, C++ client (ms)", ("cpp", "isactive", "p99"), "lower"),
    ("floor: Health/Check p50, C++ (ms)", ("cpp", "health_check", "p50"), "lower"),
    ("GetMetrics calls/s, 1 in flight (C++)", ("cpp", "getmetrics", "calls_per_s"), "higher"),
    ("GetMetrics calls/s, 64 in flight, 1 connection", ("load", "getmetrics", "calls_per_s"), "higher"),
    ("GetMetrics calls per CPU-second", ("load", "getmetrics", "calls_per_cpu_s"), "higher"),
    ("server CPU per GetMetrics (us)", ("load", "getmetrics", "server_cpu_us_per_call"), "lower"),
    ("server CPU under load (cores)", ("load", "getmetrics", "server_cpu_cores"), ""),
    ("floor: Health/Check calls/s, 64 in flight", ("load", "health_check", "calls_per_s"), "higher"),
    ("RSS under load (MiB)", ("load", "getmetrics", "server_rss_mib"), "lower"),
    ("RSS idle (MiB)", ("idle", "rss_mib"), "lower"),
    ("CPU idle (cores)", ("idle", "cpu_cores"), "lower"),
]


Row = tuple[str, float | str, float | str, str]  # label, gpuscale, peer, which is better: lower/higher/""


def reaction_rows(result: dict[str, Any], what: str, value: str) -> list[Row]:
    up = result["step_up_s"]
    rows: list[Row] = []
    for shows, g, p in (("GetMetrics shows it", "gpuscale_getmetrics", "peer_getmetrics"),
                        ("StreamIsActive true", "gpuscale_push", "peer_push")):  # fmt: skip
        for q in ("p50", "p95"):
            rows.append((f"{what} -> {shows}, {q} (s)", up[g][q], up[p][q], "lower"))
    label = f"{what} -> StreamIsActive true, p95; peer at pollIntervalSeconds 1 (s)"
    rows.append((label, up["gpuscale_push"]["p95"], up["peer_push_1s"]["p95"], "lower"))
    read = [
        statistics.median(v[p] for v in result["getmetrics_values_at_high"] if p in v)
        for p in ("gpuscale_getmetrics", "peer_getmetrics")
    ]
    rows.append((f"{what}: GetMetrics at the high level, {value}", read[0], read[1], ""))
    return rows


def summarize(sides: list[Side], extra: dict[str, Any]) -> list[Row]:
    agree = [str(s.results["values"][0]["agree"]).lower() for s in sides]
    rows: list[Row] = [("max, min, avg, sum and IsActive equal the truth", agree[0], agree[1], "")]
    for label, path, better in ROWS:
        pair = [round(median_of(s.results[path[0]], *path[1:]), 4) for s in sides]
        rows.append((label, pair[0], pair[1], better))
    peak = [s.results["peak_rss_mib"][0]["VmHWM"] for s in sides]
    rows.append(("peak RSS over the run (MiB)", peak[0], peak[1], "lower"))
    floors = extra["python_floor_rss_mib"]
    label = "floor: RSS of Python with the agent's imports, serving nothing (MiB)"
    rows.append((label, floors["python_with_agent_imports"], "n/a", ""))
    gpu, eng = extra["gpu_reaction"], extra["engine_reaction"]
    rows += reaction_rows(gpu, "GPU step", f"avg {gpu['to_avg']:g}")
    rows += reaction_rows(eng, "engine queue step", f"{eng['queue_to']} waiting")
    cost = extra["scrape_cost"]["runs"]
    for label, key, sub in (
        ("engine scrape: client CPU per scrape (us)", "cpu_us_per_scrape", None),
        ("engine scrape: wall p50 (ms)", "wall_ms", "p50"),
    ):
        vals = [
            statistics.median(r[key] if sub is None else r[key][sub] for r in cost[s])
            for s in ("gpuscale", "keda-gpu-scaler")
        ]
        rows.append((label, round(vals[0], 3), round(vals[1], 3), "lower"))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| node scope, 8 GPUs | gpuscale | keda-gpu-scaler | gpuscale / peer | better |",
        "|---|---|---|---|---|",
    ]
    for label, g, p, better in rows:
        ratio, who = "n/a", ""
        if isinstance(g, float | int) and isinstance(p, float | int) and p:
            ratio = f"{g / p:.2f}"
            if better and g != p:
                who = "gpuscale" if (g < p) == (better == "lower") else "keda-gpu-scaler"
        cells = [f"{x:g}" if isinstance(x, float | int) else x for x in (g, p)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {who} |")
    for feature, g_has, p_has in NO_EQUIVALENT:
        lines.append(f"| {feature} | {g_has} | {p_has} | not measured | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-source", help=f"the peer's release source (default {_peer.DEFAULT_SOURCE})")
    ap.add_argument("--build-only", action="store_true", help="build the peer (or find it cached) and stop")
    ap.add_argument("--rounds", type=int, default=2, help="turns of every measurement per side (default 2)")
    ap.add_argument("--calls", type=int, default=2000, help="sequential Python calls per method per round")
    ap.add_argument("--seconds", type=float, default=4.0, help="each C++ client run (default 4)")
    ap.add_argument("--threads", type=int, default=64, help="calls in flight under load (default 64)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle reading (default 10)")
    ap.add_argument("--steps", type=int, default=8, help="GPU and engine steps up and down (default 8)")
    ap.add_argument(
        "--pause", type=float, default=10.0, help="random pause before a step, up to (default 10)"
    )
    ap.add_argument(
        "--scrapes", type=int, default=1000, help="engine scrapes per side per round (default 1000)"
    )
    ap.add_argument("--out")
    args = ap.parse_args()
    c.exit_on_sigterm()
    source = _peer.source_dir(args.peer_source)
    try:
        peer_binary = _peer.build(source)
    except _peer.PeerUnavailable as e:
        print(e)
        return 0
    if args.build_only:
        print(peer_binary)
        return 0
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    binary = c.grpc_load_binary()
    if binary is None:
        print(
            f"the C++ client ({CPP_CLIENT}) did not build: apt-get install libgrpc++-dev pkg-config",
            file=sys.stderr,
        )
        return 2

    extra: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscale-peer-compare-")))
        demand_file = tmp / "demand.json"
        _peer.write_json(demand_file, demand(UTILS))
        g = stack.enter_context(gpuscale_side(demand_file))
        peer = stack.enter_context(_peer.peer_scaler(peer_binary, _peer.mock_gpus(NODE, UTILS)))
        p = Side("keda-gpu-scaler", peer.port, peer.pid, peer_metadata)
        sides = [g, p]
        time.sleep(3)  # a few sampling rounds: every GPU has a sample
        for s in sides:
            s.results["values"] = [values(s)]
        idle(sides, args.idle)
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for step, run in (
                ("python", lambda s: python_latency(s, args.calls)),
                ("cpp", lambda s: cpp_latency(binary, s, args.seconds)),
                ("load", lambda s: under_load(binary, s, args.seconds, args.threads)),
            ):
                for s in order:
                    print(f"round {r + 1}/{args.rounds}: {step} on {s.name}", file=sys.stderr, flush=True)
                    s.results.setdefault(step, []).append(run(s))
        idle(sides, args.idle)
        for s in sides:
            s.results["peak_rss_mib"] = [{"VmHWM": round(c.rss_mib(s.pid, "VmHWM"), 1)}]
        extra["python_floor_rss_mib"] = python_floor_rss()
        extra.update(asyncio.run(reactions(g, peer, demand_file, args.steps, args.pause)))
    extra["scrape_cost"] = paths.scrape_cost(peer_binary, args.scrapes, args.rounds)

    rows = summarize(sides, extra)
    built = json.loads((peer_binary.parent.parent / "built.json").read_text())
    result = {
        "benchmark": "peer-compare",
        "machine": {
            **c.machine(),
            "load_average_1_5_15_at_start": load_at_start,
            "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "note": "every process of the run shares the machine's cores with other work: read the ratios",
        "peer": {
            "module": _peer.MODULE,
            "release": _peer.RELEASE,
            "source": "../shared/peer/keda-gpu-scaler-v0.6.0 (the tag, unchanged)"
            if source == _peer.DEFAULT_SOURCE
            else str(source),
            "go": built["go"],
            "wrapper": "bench/peer (pkg/scaler over gRPC, gpu.MockCollector, pkg/metrics and /metrics on)",
        },
        "setup": {
            "node": NODE,
            "gpus": c.GPUS_PER_NODE,
            "model": "h100 (gpuscale's mock backend; the peer's MockCollector holds the same samples)",
            "utilizations": UTILS,
            "scope": "node",
            "metric": "gpu_utilization",
            "target": TARGET,
            "gpuscale": "gpuscale agent --backend mock --serve-external-scaler (subprocess, 1 s sampling)",
            "metadata": {"gpuscale": gpuscale_metadata(), "keda-gpu-scaler": peer_metadata()},
            "engine_metadata": {
                "gpuscale": gpuscale_engine_metadata(),
                "keda-gpu-scaler": peer_engine_metadata("http://<engine>/metrics"),
            },
            "clients": {
                "python": "grpcio sync stub, one call at a time",
                "cpp": f"{CPP_CLIENT}, one connection",
            },
            "rounds": args.rounds,
            "python_calls": args.calls,
            "cpp_seconds": args.seconds,
            "threads_under_load": args.threads,
            "idle_seconds": args.idle,
            "steps": args.steps,
            "pause_s": args.pause,
        },
        "table": [{"row": r[0], "gpuscale": r[1], "keda-gpu-scaler": r[2], "better": r[3]} for r in rows],
        "no_equivalent": [
            {"feature": f, "gpuscale": g_, "keda-gpu-scaler": p_} for f, g_, p_ in NO_EQUIVALENT
        ],
        **extra,
        "runs": {s.name: s.results for s in sides},
    }
    path = Path(args.out) if args.out else c.RESULTS / "peer-keda-gpu-scaler.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path.relative_to(c.ROOT) if path.is_relative_to(c.ROOT) else path}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
