#!/usr/bin/env python3
"""Shared helpers of the benchmarks, and three small programs they start as separate processes:

* ``fleet``: simulated agents. One gRPC server (``gpuscale.v1.Agent``) listening on one loopback port per
  node; each ``Watch`` stream that arrives is given a free node of the fleet (the scaler does not care which
  port serves which node, only that each stream is one node), sends that node's SNAPSHOT (8 GPUs, their
  attributions, the pods with labels), then one UPDATE per second with a fresh sample of every GPU, exactly
  like a real agent sampling every second. The streams are staggered over the second. The same process serves
  the same GPUs on ``/metrics`` as dcgm-exporter series (``DCGM_FI_DEV_GPU_UTIL`` with ``namespace``/``pod``
  labels) for Prometheus, with the same values.
* ``load``: a GetMetrics load generator (grpc.aio, N calls in flight) that prints its count as JSON.
* helpers: ports, percentiles, /proc readings, a scaler subprocess, a Prometheus subprocess.

Every GPU has a constant utilization, ``util(node, gpu)``, so the two paths must agree on every aggregate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "src"))

GPUS_PER_NODE = 8
NAMESPACES = 50
MODEL = "NVIDIA H100 80GB HBM3"


# -- small helpers ----------------------------------------------------------------------------------------
def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so the context managers stop the processes a benchmark started."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear interpolation (numpy's default)."""
    v = sorted(values)
    h = (len(v) - 1) * q / 100
    lo = int(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1e3 for s in seconds]
    return {
        "n": len(ms),
        "mean": round(statistics.fmean(ms), 4),
        "p50": round(pct(ms, 50), 4),
        "p90": round(pct(ms, 90), 4),
        "p99": round(pct(ms, 99), 4),
        "max": round(max(ms), 4),
    }


def summary_us(seconds: Sequence[float]) -> dict[str, float]:
    us = [s * 1e6 for s in seconds]
    return {
        "n": len(us),
        **{
            k: round(f(us), 1)
            for k, f in (
                ("mean", statistics.fmean),
                ("p50", lambda v: pct(v, 50)),
                ("p90", lambda v: pct(v, 90)),
                ("p99", lambda v: pct(v, 99)),
                ("max", max),
            )
        },
    }


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (e.g. the scaler and its ingest workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in task.read_text().split())
    return out


def tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(p)
    return total


def tree_rss_mib(pid: int) -> float:
    total = 0.0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError, KeyError):
            total += rss_mib(p)
    return total


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def write_result(name: str, result: dict[str, Any], out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return path


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


def scrape_value(url: str, name: str) -> float | None:
    try:
        text = http_get(url)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


# -- the simulated cluster ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    app: str
    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """``workloads`` workloads of ``pods_per_workload`` pods holding ``gpus_per_pod`` GPUs each. Pod ``p`` (in
    workload order) runs on node ``p % nodes``, so a workload's pods are on consecutive nodes."""

    nodes: int
    workloads: int
    pods_per_workload: int = 4
    gpus_per_pod: int = 2

    def pods(self) -> list[Pod]:
        out = []
        for w in range(self.workloads):
            for k in range(self.pods_per_workload):
                p = w * self.pods_per_workload + k
                first = (p // self.nodes) * self.gpus_per_pod
                if first + self.gpus_per_pod > GPUS_PER_NODE:
                    raise ValueError(f"{self.workloads} workloads do not fit on {self.nodes} nodes")
                gpus = tuple(range(first, first + self.gpus_per_pod))
                out.append(Pod(namespace_of(w), f"w{w}-{k}", f"w{w}", p % self.nodes, gpus))
        return out

    def args(self) -> list[str]:
        return [
            "--nodes",
            str(self.nodes),
            "--workloads",
            str(self.workloads),
            "--pods-per-workload",
            str(self.pods_per_workload),
            "--gpus-per-pod",
            str(self.gpus_per_pod),
        ]


def namespace_of(workload: int) -> str:
    return f"ns-{workload % NAMESPACES}"


def node_name(node: int) -> str:
    return f"node-{node:04d}"


def uuid_of(node: int, gpu: int) -> str:
    return f"GPU-{node:04d}-{gpu}"


def util(node: int, gpu: int) -> float:
    return float(10 + ((node * GPUS_PER_NODE + gpu) * 37) % 81)


def workload_avg(layout: Layout, workload: int) -> float:
    values = [util(p.node, g) for p in layout.pods() if p.app == f"w{workload}" for g in p.gpus]
    return statistics.fmean(values)


def scaled_object(workload: int, **extra: str) -> tuple[str, str, dict[str, str]]:
    """(name, namespace, trigger metadata) of the ScaledObject scaling workload ``workload``: distinct
    metadata per workload, as KEDA sends it (with its own ``scalerAddress``)."""
    md = {
        "scalerAddress": "gpuscale.gpuscale-system.svc:6001",
        "podSelector": f"app=w{workload}",
        "metric": "gpu_utilization",
        "aggregation": "avg",
        "targetValue": str(40 + workload % 50),
        **extra,
    }
    return f"so-{workload}", namespace_of(workload), md


def prometheus_query(workload: int, metric: str = "DCGM_FI_DEV_GPU_UTIL", extra: str = "") -> str:
    return f'avg({metric}{{namespace="{namespace_of(workload)}", pod=~"w{workload}-.*"{extra}}})'


def exporter_text(layout: Layout) -> bytes:
    holders = {(p.node, g): p for p in layout.pods() for g in p.gpus}
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for n in range(layout.nodes):
        for g in range(GPUS_PER_NODE):
            labels = (
                f'gpu="{g}",UUID="{uuid_of(n, g)}",device="nvidia{g}",modelName="{MODEL}",'
                f'Hostname="{node_name(n)}"'
            )
            pod = holders.get((n, g))
            if pod is not None:
                labels += f',container="main",namespace="{pod.namespace}",pod="{pod.name}"'
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util(n, g):g}")
    return ("\n".join(lines) + "\n").encode()


def node_message(node: int, kind: int, pods: Sequence[Pod], interval: float = 1.0) -> Any:
    """The Watch message an agent of node ``node`` sends (``kind``: SNAPSHOT or UPDATE): one sample of each
    of its 8 GPUs (timestamp 0: the sender sets it), attributions of ``pods``' GPUs, and in a SNAPSHOT the
    pods with their labels."""
    from gpuscale._proto import agent_pb2

    msg = agent_pb2.NodeUpdate(
        kind=kind, node_name=node_name(node), agent_id=f"fleet-{node}", interval_seconds=interval
    )
    holders = {g: p for p in pods for g in p.gpus}
    for g in range(GPUS_PER_NODE):
        u = util(node, g)
        state = msg.gpus.add()
        state.device.CopyFrom(
            agent_pb2.Device(
                index=g,
                uuid=uuid_of(node, g),
                name=MODEL,
                vendor="nvidia",
                memory_total_bytes=80 * 2**30,
                power_limit_watts=700.0,
            )
        )
        state.samples.add(
            gpu_utilization=u,
            memory_utilization=u / 2,
            memory_used_bytes=int(u * 2**28),
            memory_total_bytes=80 * 2**30,
            temperature_celsius=40 + u / 4,
            power_watts=100 + 5 * u,
            power_limit_watts=700.0,
        )
        pod = holders.get(g)
        if pod is not None:
            state.attributions.add(
                namespace=pod.namespace,
                pod=pod.name,
                container="main",
                resource_name="nvidia.com/gpu",
                device_id=uuid_of(node, g),
            )
    if kind == agent_pb2.NodeUpdate.SNAPSHOT:
        for p in pods:
            msg.pods.add(
                namespace=p.namespace,
                name=p.name,
                uid=f"uid-{p.name}",
                labels={"app": p.app, "tier": "serving"},
            )
    return msg


async def run_fleet(layout: Layout, interval: float, info_file: Path) -> None:
    import grpc
    import grpc.aio
    from aiohttp import web

    from gpuscale._proto import agent_pb2, agent_pb2_grpc

    pods_by_node: dict[int, list[Pod]] = {}
    for p in layout.pods():
        pods_by_node.setdefault(p.node, []).append(p)

    def message(node: int, kind: int) -> Any:
        return node_message(node, kind, pods_by_node.get(node, []), interval)

    class Fleet(agent_pb2_grpc.AgentServicer):
        def __init__(self) -> None:
            self.free = list(reversed(range(layout.nodes)))
            self.streams = 0

        async def Watch(self, request: Any, context: Any) -> Any:
            if not self.free:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "every node of the fleet is taken")
            node = self.free.pop()
            self.streams += 1
            try:
                now = time.time()
                snap = message(node, agent_pb2.NodeUpdate.SNAPSHOT)
                snap.sequence, snap.sent_at = 1, now
                for g in snap.gpus:
                    g.samples[0].timestamp = now
                yield snap
                update = message(node, agent_pb2.NodeUpdate.UPDATE)
                loop = asyncio.get_running_loop()
                phase = node / layout.nodes * interval  # staggered over the interval
                due = loop.time() - (loop.time() % interval) + phase
                seq = 1
                while True:
                    due += interval
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    now = time.time()
                    seq += 1
                    update.sequence, update.sent_at = seq, now
                    for g in update.gpus:
                        g.samples[0].timestamp = now
                    yield update
            finally:
                self.streams -= 1
                self.free.append(node)

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    agent_pb2_grpc.add_AgentServicer_to_server(Fleet(), server)
    ports = [server.add_insecure_port("127.0.0.1:0") for _ in range(layout.nodes)]
    await server.start()

    body = exporter_text(layout)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    metrics_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", metrics_port).start()
    info_file.write_text(json.dumps({"ports": ports, "metrics_port": metrics_port, "pid": os.getpid()}))
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
    await stopped.wait()
    await server.stop(0)
    await runner.cleanup()


@contextmanager
def fleet(layout: Layout, interval: float = 1.0, cpus: str | None = None) -> Iterator[dict[str, Any]]:
    """Start the simulated agents in their own process; yield ``{"ports", "metrics_port", "proc"}``."""
    with tempfile.TemporaryDirectory() as tmp:
        info = Path(tmp) / "fleet.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "fleet",
            *layout.args(),
            "--interval",
            str(interval),
            "--info-file",
            str(info),
        ]
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        proc = subprocess.Popen(cmd)
        try:
            deadline = time.monotonic() + 120
            while not info.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the fleet did not start")
                time.sleep(0.1)
            yield {**json.loads(info.read_text()), "proc": proc}
        finally:
            stop(proc)


@contextmanager
def scaler(
    agents: Sequence[str],
    *,
    cpus: str | None = "0,1",
    history: int = 120,
    wait_connected: int | None = None,
    timeout: float = 180.0,
    extra: Sequence[str] = (),
) -> Iterator[dict[str, Any]]:
    """The real ``gpuscale scaler`` (its CLI) as a subprocess, optionally pinned with ``taskset``; waits until
    ``wait_connected`` agents (default: all) have sent their snapshot."""
    grpc_port, metrics_port = free_port(), free_port()
    env = {**os.environ, "GPUSCALE_AGENTS": ",".join(agents), "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable,
        "-m",
        "gpuscale",
        "--log-level",
        "warning",
        "scaler",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        "--history",
        str(history),
        *extra,
    ]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    want = len(agents) if wait_connected is None else wait_connected
    try:
        t0 = time.monotonic()
        while True:
            connected = scrape_value(url, "gpuscale_scaler_agents_connected")
            if connected is not None and connected >= want:
                break
            if proc.poll() is not None or time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the scaler did not connect to {want} agents (got {connected})")
            time.sleep(0.2)
        yield {
            "proc": proc,
            "grpc_port": grpc_port,
            "metrics_url": url,
            "connect_s": round(time.monotonic() - t0, 2),
        }
    finally:
        stop(proc)


class PrometheusServer:
    def __init__(self, port: int, pid: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.pid = pid

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        body = json.loads(http_get(url, timeout=10))
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


@contextmanager
def prometheus(jobs: dict[str, tuple[str, str]], *, cpus: str | None = None) -> Iterator[PrometheusServer]:
    """A real Prometheus (Debian's package) scraping ``jobs``: name → (target host:port, scrape interval)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed (Debian package `prometheus`)")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        text = "global:\n  evaluation_interval: 15s\nscrape_configs:\n"
        for name, (target, interval) in jobs.items():
            text += (
                f"  - job_name: {name}\n    scrape_interval: {interval}\n"
                f"    scrape_timeout: {interval}\n    honor_labels: true\n"
                f"    static_configs:\n      - targets: ['{target}']\n"
            )
        cfg.write_text(text)
        cmd = [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp}/data",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        log = (Path(tmp) / "prometheus.log").open("w")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                    break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("prometheus did not start")
                time.sleep(0.1)
            yield PrometheusServer(port, proc.pid)  # taskset execs prometheus: same pid
        finally:
            stop(proc)
            log.close()


def version_of_prometheus() -> str:
    out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else "unknown"


# -- load generators in C and C++ (their own cost must not hide the server's) -----------------------------
LOAD_SOURCE = ROOT / "bench" / "load" / "grpc_load.cc"
LOAD_BINARY = ROOT / "bench" / ".build" / "grpc_load"


def grpc_load_binary() -> Path | None:
    """``bench/load/grpc_load.cc`` built (once) into ``bench/.build/``; ``None`` where it cannot be built
    (needs g++, pkg-config and gRPC C++: Debian ``libgrpc++-dev pkg-config``)."""
    if LOAD_BINARY.exists() and LOAD_BINARY.stat().st_mtime >= LOAD_SOURCE.stat().st_mtime:
        return LOAD_BINARY
    if not (shutil.which("g++") and shutil.which("pkg-config")):
        return None
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++"], capture_output=True, text=True)
    if flags.returncode != 0:
        return None
    LOAD_BINARY.parent.mkdir(exist_ok=True)
    built = subprocess.run(
        ["g++", "-O2", "-std=c++17", str(LOAD_SOURCE), *flags.stdout.split(), "-o", str(LOAD_BINARY)],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        print(f"grpc_load did not build:\n{built.stderr[-2000:]}", file=sys.stderr)
        return None
    return LOAD_BINARY


def write_messages(path: Path, messages: Sequence[bytes]) -> Path:
    """The request file ``grpc_load`` reads: each message as a 4-byte big-endian length, then its bytes."""
    path.write_bytes(b"".join(len(m).to_bytes(4, "big") + m for m in messages))
    return path


def get_metrics_request(workload: int) -> Any:
    """The ``GetMetricsRequest`` KEDA sends for workload ``workload``'s ScaledObject."""
    from gpuscale._proto import externalscaler_pb2 as pb

    name, ns, md = scaled_object(workload)
    ref = pb.ScaledObjectRef(name=name, namespace=ns, scalerMetadata=md)
    return pb.GetMetricsRequest(scaledObjectRef=ref, metricName="gpuscale-gpu-utilization-avg")


def get_metrics_requests(workloads: int) -> list[bytes]:
    """Every workload's request, serialized (for ``grpc_load``)."""
    return [get_metrics_request(w).SerializeToString() for w in range(workloads)]


def grpc_load(
    binary: Path,
    port: int,
    requests: Path,
    *,
    threads: int,
    seconds: float,
    method: str = "/externalscaler.ExternalScaler/GetMetrics",
) -> dict[str, Any]:
    out = subprocess.run(
        [
            str(binary),
            "--target",
            f"127.0.0.1:{port}",
            "--method",
            method,
            "--requests",
            str(requests),
            "--threads",
            str(threads),
            "--seconds",
            str(seconds),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"grpc_load failed: {out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def h2load(url_file: Path, *, clients: int, seconds: float) -> dict[str, Any]:
    """HTTP/1.1 GETs of the URLs in ``url_file`` (round robin) from ``clients`` keep-alive connections, with
    nghttp2's ``h2load`` (Debian ``nghttp2-client``): requests/s and how many failed."""
    binary = shutil.which("h2load")
    if binary is None:
        raise RuntimeError("h2load is not installed (Debian package nghttp2-client)")
    out = subprocess.run(
        [binary, "--h1", "-c", str(clients), "-D", str(round(seconds)), "-i", str(url_file)],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    text = out.stdout
    finished = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", text)
    requests = re.search(r"requests: \d+ total, \d+ started, (\d+) done", text)
    codes = re.search(r"status codes: (\d+) 2xx", text)
    if not (finished and requests and codes):
        raise RuntimeError(f"h2load output not understood:\n{text}\n{out.stderr}")
    return {
        "seconds": float(finished.group(1)),
        "requests_per_s": float(finished.group(2)),
        "done": int(requests.group(1)),
        "ok": int(codes.group(1)),
        "failed": int(requests.group(1)) - int(codes.group(1)),
    }


# -- the GetMetrics load generator ------------------------------------------------------------------------
async def run_load(port: int, seconds: float, concurrency: int, workloads: int) -> dict[str, Any]:
    import grpc
    import grpc.aio

    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    requests = [get_metrics_request(w) for w in range(workloads)]
    calls = errors = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalScalerStub(ch)
        deadline = time.monotonic() + seconds

        async def worker(offset: int) -> None:
            nonlocal calls, errors
            i = offset
            while time.monotonic() < deadline:
                try:
                    await stub.GetMetrics(requests[i % len(requests)], timeout=5)
                except grpc.aio.AioRpcError:
                    errors += 1
                calls += 1
                i += concurrency

        t0 = time.monotonic()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        wall = time.monotonic() - t0
    return {"calls": calls, "errors": errors, "seconds": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description="benchmark helper processes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fleet")
    f.add_argument("--nodes", type=int, required=True)
    f.add_argument("--workloads", type=int, required=True)
    f.add_argument("--pods-per-workload", type=int, default=4)
    f.add_argument("--gpus-per-pod", type=int, default=2)
    f.add_argument("--interval", type=float, default=1.0)
    f.add_argument("--info-file", required=True)
    lo = sub.add_parser("load")
    lo.add_argument("--port", type=int, required=True)
    lo.add_argument("--seconds", type=float, default=10.0)
    lo.add_argument("--concurrency", type=int, default=32)
    lo.add_argument("--workloads", type=int, default=500)
    args = ap.parse_args()
    if args.cmd == "fleet":
        layout = Layout(args.nodes, args.workloads, args.pods_per_workload, args.gpus_per_pod)
        asyncio.run(run_fleet(layout, args.interval, Path(args.info_file)))
    else:
        print(json.dumps(asyncio.run(run_load(args.port, args.seconds, args.concurrency, args.workloads))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
