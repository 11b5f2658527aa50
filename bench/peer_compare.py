#!/usr/bin/env python3
"""Side by side with the Go peer pmady/keda-gpu-scaler: the same node, GPUs, metadata meaning and clients.

The setup, for each side: one node with 8 mock GPUs at fixed utilizations (``util(0, g)`` of ``_common.py``:
10, 47, 84, 40, 77, 33, 70, 26 %), scope node, the same trigger meaning (``gpu_utilization``, an
aggregation, a target, an activation threshold) written in each side's own metadata keys.

* gpuscale: ``gpuscale agent --backend mock --serve-external-scaler`` (its CLI, a subprocess), the node's
  agent answering KEDA's calls from its own samples.
* the peer: its own external scaler (``pkg/scaler``) over its own gRPC server, fed by a collector of the same
  8 GPUs. Its binary needs NVML, so it is to be built from a wrapper Go module in ``bench/peer/`` depending on
  ``github.com/pmady/keda-gpu-scaler`` through the Go module proxy. The proxy refuses that module (every
  version); this script asks it again on each run, through the ``go`` command, and records the answer. While
  it is refused the peer is not measured, the table says why, and no ratio is given.

Measured for each side, the sides taking turns (``--rounds``, order alternating) so that the machine's noise
hits both: the values (``GetMetricSpec``, ``GetMetrics`` for max/min/avg/sum, ``IsActive`` on each side of the
activation threshold) against the truth; ``GetMetrics`` and ``IsActive`` latency one call at a time from the
Python gRPC client and from the C++ one (``bench/load/grpc_load.cc``); throughput on one connection with 64
calls in flight (C++), the server's CPU per call and calls per CPU-second; the server's CPU and RSS idle and
under that load. ``Health/Check`` on the same server is the floor of the gRPC stack. What the peer has no
equivalent for is listed (``PEER_HAS_NO``), never measured as something else.

Writes bench/results/peer-keda-gpu-scaler.json and prints the side-by-side table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c

PEER_MODULE = "github.com/pmady/keda-gpu-scaler"
PEER_RELEASE = "v0.6.0"  # the newest tag of the peer's repository as read (shared reference, keda.md)
UTILS = [c.util(0, g) for g in range(c.GPUS_PER_NODE)]
TARGET = 60.0
AGGREGATIONS = ("max", "min", "avg", "sum")  # the aggregations both sides define the same way
CPP_CLIENT = "bench/load/grpc_load.cc"

# What gpuscale has that the peer's external scaler does not, as read in the peer's source (the shared
# reference, keda.md section 4.1, and pkg/scaler/server.go); none of it is measured against anything else.
PEER_HAS_NO = {
    "workload scope": "the peer reports the GPUs of the node whose pod answers; no pod attribution, no "
    "cross-node view (its issues #113 and #142)",
    "pool scope": "no node selection by labels",
    "window and staleAfter": "the peer reads NVML on every call (no samples kept, no smoothing, no "
    "staleness: a GPU that cannot be read fails the call)",
    "StreamIsActive on change": "the peer sends IsActive every pollIntervalSeconds (default 10 s), on a "
    "ticker",
    "p50 and p90; p95/p99 by interpolation": "the peer has max, min, avg, sum, and p95/p99 by nearest rank: "
    "its p95 of these 8 GPUs is 84, gpuscale's 81.55",
    "GPM activity metrics": "no sm_active, tensor_active, dram_active, gr_engine_active, sm_occupancy",
    "integer fields for KEDA <= 2.16": "the peer sets only targetSizeFloat and metricValueFloat",
}


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


def expected(aggregation: str) -> float:
    return {"max": max, "min": min, "sum": sum, "avg": statistics.fmean}[aggregation](UTILS)


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
def gpuscale_side() -> Iterator[Side]:
    grpc_port, metrics_port = c.free_port(), c.free_port()
    cmd = [
        sys.executable,
        "-m",
        "gpuscale",
        "--log-level",
        "warning",
        "agent",
        "--backend",
        "mock",
        "--mock-gpus",
        str(c.GPUS_PER_NODE),
        "--mock-pattern",
        ",".join(f"constant:{u:g}" for u in UTILS),
        "--interval",
        "1",
        "--node-name",
        c.node_name(0),
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        "--kubelet-socket",
        "/nonexistent/kubelet.sock",
        "--serve-external-scaler",
    ]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")})
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gpuscale agent did not become ready")
            time.sleep(0.1)
        yield Side("gpuscale", grpc_port, proc.pid, gpuscale_metadata)
    finally:
        c.stop(proc)


def _redact(text: str) -> str:
    """The go command's message with the proxy's address left out (``$GOPROXY``)."""
    return re.sub(r"https?://[^/\s]+", "$GOPROXY", text).strip()


def peer_module_answer() -> dict[str, Any]:
    """Ask the Go module proxy, through the ``go`` command, for the peer's versions and for its newest
    release; return what it answered: the versions, or its refusal word for word (the proxy's address left
    out)."""
    go = shutil.which("go")
    if go is None:
        return {"served": False, "refused": ["the go command is not installed"]}
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    with tempfile.TemporaryDirectory() as tmp:
        listed = subprocess.run(
            [go, "list", "-m", "-versions", PEER_MODULE],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        release = subprocess.run(
            [go, "mod", "download", "-json", f"{PEER_MODULE}@{PEER_RELEASE}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    refused = []
    versions = listed.stdout.split()[1:] if listed.returncode == 0 else []
    if listed.returncode != 0:
        refused.append(_redact(listed.stderr))
    if release.returncode != 0:
        try:
            refused.append(_redact(json.loads(release.stdout)["Error"]))
        except (ValueError, KeyError):
            refused.append(_redact(release.stderr or release.stdout))
    return {
        "commands": [
            f"go list -m -versions {PEER_MODULE}",
            f"go mod download -json {PEER_MODULE}@{PEER_RELEASE}",
        ],
        "go": subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip(),
        "goproxy": "set in the environment" if "GOPROXY" in os.environ else "the go command's default",
        "served": bool(versions) and release.returncode == 0,
        "versions": versions,
        "refused": refused,
    }


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


def median_of(runs: list[dict[str, Any]], *path: str) -> float:
    got = []
    for r in runs:
        for k in path:
            r = r[k]
        got.append(float(r))
    return statistics.median(got)


# -- the table ---------------------------------------------------------------------------------------------
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
    ("server CPU under load (cores)", ("load", "getmetrics", "server_cpu_cores"), "n/a"),
    ("RSS under load (MiB)", ("load", "getmetrics", "server_rss_mib"), "lower"),
    ("floor: Health/Check calls/s, 64 in flight", ("load", "health_check", "calls_per_s"), "higher"),
    ("CPU idle (cores)", ("idle", "cpu_cores"), "lower"),
    ("RSS idle (MiB)", ("idle", "rss_mib"), "lower"),
]


def summarize(sides: list[Side]) -> dict[str, dict[str, float]]:
    return {
        s.name: {label: round(median_of(s.results[path[0]], *path[1:]), 4) for label, path, _ in ROWS}
        for s in sides
    }


def table(summary: dict[str, dict[str, float]], peer_note: str | None) -> str:
    lines = ["| (median of the rounds) | gpuscale | keda-gpu-scaler | peer / gpuscale |", "|---|---|---|---|"]
    g, p = summary.get("gpuscale", {}), summary.get("keda-gpu-scaler")
    for label, _, _ in ROWS:
        peer = f"{p[label]:g}" if p else "not measured"
        ratio = f"{p[label] / g[label]:.2f}" if p and g.get(label) else "n/a"
        lines.append(f"| {label} | {g.get(label, float('nan')):g} | {peer} | {ratio} |")
    if peer_note:
        lines.append("")
        lines.append(f"keda-gpu-scaler not measured: {peer_note}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="turns of every measurement per side (default 2)")
    ap.add_argument("--calls", type=int, default=2000, help="sequential Python calls per method per round")
    ap.add_argument("--seconds", type=float, default=4.0, help="each C++ client run (default 4)")
    ap.add_argument("--threads", type=int, default=64, help="calls in flight under load (default 64)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle reading (default 10)")
    ap.add_argument("--out")
    args = ap.parse_args()
    c.exit_on_sigterm()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    binary = c.grpc_load_binary()
    if binary is None:
        print(
            f"the C++ client ({CPP_CLIENT}) did not build: apt-get install libgrpc++-dev pkg-config",
            file=sys.stderr,
        )
        return 2
    print(f"asking the Go module proxy for {PEER_MODULE} ...", file=sys.stderr)
    peer = peer_module_answer()
    peer_note = None
    if not peer["served"]:
        peer_note = "the Go module proxy refuses the module: " + "; ".join(
            " ".join(msg.split()) for msg in peer["refused"]
        )
    else:
        peer_note = (
            f"the module proxy serves {PEER_MODULE} ({', '.join(peer['versions'])}) but the wrapper "
            "module bench/peer/ is not written yet (issue 19)"
        )
    print(peer_note, file=sys.stderr)

    with contextlib.ExitStack() as stack:
        sides = [stack.enter_context(gpuscale_side())]
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
                    print(f"round {r + 1}/{args.rounds}: {step} on {s.name}", file=sys.stderr)
                    s.results.setdefault(step, []).append(run(s))
        idle(sides, args.idle)
        for s in sides:
            s.results["peak_rss_mib"] = [{"VmHWM": round(c.rss_mib(s.pid, "VmHWM"), 1)}]

    summary = summarize(sides)
    result = {
        "benchmark": "peer-compare",
        "machine": {**c.machine(), "load_average_1_5_15_at_start": load_at_start},
        "setup": {
            "node": c.node_name(0),
            "gpus": c.GPUS_PER_NODE,
            "utilizations": UTILS,
            "scope": "node",
            "metric": "gpu_utilization",
            "target": TARGET,
            "gpuscale": "gpuscale agent --backend mock --serve-external-scaler (subprocess, 1 s sampling)",
            "metadata": {"gpuscale": gpuscale_metadata(), "keda-gpu-scaler": peer_metadata()},
            "clients": {
                "python": "grpcio sync stub, one call at a time",
                "cpp": f"{CPP_CLIENT}, one connection",
            },
            "rounds": args.rounds,
            "python_calls": args.calls,
            "cpp_seconds": args.seconds,
            "threads_under_load": args.threads,
            "idle_seconds": args.idle,
        },
        "peer": {
            "module": PEER_MODULE,
            "release": PEER_RELEASE,
            "measured": False,
            "why": peer_note,
            "module_proxy": peer,
        },
        "peer_has_no": PEER_HAS_NO,
        "summary": summary,
        "runs": {s.name: s.results for s in sides},
    }
    path = Path(args.out) if args.out else c.RESULTS / "peer-keda-gpu-scaler.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path.relative_to(c.ROOT) if path.is_relative_to(c.ROOT) else path}")
    print(table(summary, peer_note))
    print()
    print("What the peer has no equivalent of (not measured as anything else):")
    for k, v in PEER_HAS_NO.items():
        print(f"- {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
