#!/usr/bin/env python3
"""Agent cost on the mock backend: CPU, RSS and /metrics latency of a real `gpuscale agent` process.

Starts `gpuscale agent --backend mock --mock-gpus 8 --interval 1` as a subprocess, lets it warm up, then
measures for --seconds: its CPU time (from /proc/<pid>/stat) as a share of one core, its peak RSS
(VmHWM) and current RSS, and the latency of GET /metrics against GET /healthz on the same server (the
peer: the same HTTP stack with nothing to format), and the cost of one raw mock sample (the backend alone).
Writes JSON to bench/results/agent-cost-mock.json (or --out).

Goal: under 1 % of one core and under 60 MB RSS at 1 s sampling of 8 GPUs; /metrics under 5 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def rss_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def timed_get(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=5) as r:
        r.read()
    return time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, round(q / 100 * (len(v) - 1)))]


def raw_sample_cost(gpus: int, rounds: int = 2000) -> float:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from gpuscale.backends.mock import MockBackend, MockConfig
    from gpuscale.backends.patterns import parse_patterns

    b = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns("sine:10:90:60")))
    b.open()
    devs = b.devices()
    t0 = time.perf_counter()
    for _ in range(rounds):
        for d in devs:
            b.sample(d)
    return (time.perf_counter() - t0) / (rounds * len(devs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parent / "results" / "agent-cost-mock.json")
    )
    args = ap.parse_args()
    mport, gport = free_port(), free_port()
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
        str(args.gpus),
        "--mock-pattern",
        "sine:10:90:60",
        "--interval",
        "1",
        "--node-name",
        "bench",
        "--metrics-address",
        f"127.0.0.1:{mport}",
        "--grpc-address",
        f"127.0.0.1:{gport}",
        "--kubelet-socket",
        "/nonexistent/kubelet.sock",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{mport}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if urllib.request.urlopen(base + "/readyz", timeout=1).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("agent did not become ready")
            time.sleep(0.1)
        time.sleep(5)  # warm-up: imports done, buffers filling
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        idle_cpu = (c1 - c0) / (t1 - t0)
        metrics = [timed_get(base + "/metrics") for _ in range(args.requests)]
        health = [timed_get(base + "/healthz") for _ in range(args.requests)]
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            body = r.read()
        result = {
            "benchmark": "agent-cost",
            "backend": "mock",
            "gpus": args.gpus,
            "interval_s": 1.0,
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "cpu_share_of_one_core": round(idle_cpu, 5),
            "rss_mib": round(rss_kib(proc.pid, "VmRSS") / 1024, 1),
            "peak_rss_mib": round(rss_kib(proc.pid, "VmHWM") / 1024, 1),
            "metrics_bytes": len(body),
            "metrics_ms": {
                "p50": round(statistics.median(metrics) * 1e3, 3),
                "p99": round(pct(metrics, 99) * 1e3, 3),
            },
            "healthz_ms": {
                "p50": round(statistics.median(health) * 1e3, 3),
                "p99": round(pct(health, 99) * 1e3, 3),
            },
            "metrics_over_healthz_p50": round(statistics.median(metrics) / statistics.median(health), 2),
            "raw_mock_sample_us": round(raw_sample_cost(args.gpus) * 1e6, 2),
            "goals": {"cpu_share_of_one_core": "< 0.01", "rss_mib": "< 60", "metrics_ms": "< 5"},
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
