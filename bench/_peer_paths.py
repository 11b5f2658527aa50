#!/usr/bin/env python3
"""The paths from a step to the value KEDA reads, and the engine both sides scrape, for ``peer_compare.py``.

* ``react``: steps up and down at random instants; per path, the seconds until it shows the new level:
  ``GetMetrics`` polled every 20 ms, and ``StreamIsActive`` (KEDA's ``external-push``) held open.
* ``engine_process``: a mock vLLM (``gpuscale.backends.mock_engine`` served by ``start_mock_engine``) in its
  own process, so that neither side's client shares its CPU or event loop. In ``step`` mode nothing drains
  its queue and SIGUSR1 / SIGUSR2 set 20 requests waiting / none (``HIGH_QUEUE``); in ``load`` mode it serves
  6 requests/s of the 8 it can, every histogram counting.
* ``gpuscale_engine_stack``: gpuscale's engine path, as ``engine_reaction.py`` sets it up: the engine is
  that of one GPU pod of a local API server and kubelet (the demo's); a real agent (1 s) discovers and scrapes
  it, a real scaler follows the agent.
* ``scrape_cost``: each side's client against the same engine process, in turns, on their own core.

Run as a program it is those helper processes: ``serve-engine PORT --mode step|load`` and
``scrape-cost URL --n N`` (gpuscale's agent scraper, printing its CPU as JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import _peer
from reaction import stats

HIGH_QUEUE = 20
ENGINE_NODE, NAMESPACE, POD = "node-e", "bench", "llm-0"


def wait_ready(url: str, proc: subprocess.Popen[Any], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(OSError):
            c.http_get(url, timeout=1)
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready")
        time.sleep(0.1)


class Watcher:
    """When each path first shows the level of the newest step (monotonic seconds)."""

    def __init__(self) -> None:
        self.level_high = False
        self.step_at: float | None = None
        self.seen: dict[str, float] = {}

    def observe(self, path: str, high: bool) -> None:
        if self.step_at is not None and high == self.level_high and path not in self.seen:
            self.seen[path] = time.monotonic() - self.step_at


@dataclass
class Watch:
    """The paths a reaction phase watches: name -> (gRPC port, ScaledObjectRef, threshold)."""

    getmetrics: dict[str, tuple[int, Any, float]]
    push: dict[str, tuple[int, Any]]
    last: dict[str, float] = field(default_factory=dict)


async def react(
    watch: Watch, set_level: Callable[[bool], float], steps: int, pause: float, timeout: float, what: str
) -> dict[str, Any]:
    """Step up and down ``steps`` times, each after a random pause of up to ``pause`` seconds (a random phase
    of every clock: gpuscale's sampling, the peer's stream ticker); per path, the seconds until it shows the
    new level. ``set_level`` makes the step and returns its instant (``time.monotonic()``)."""
    import grpc
    import grpc.aio

    from gpuscale._proto import externalscaler_pb2 as pb
    from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc

    w = Watcher()
    paths = [*watch.getmetrics, *watch.push]
    channels = {
        port: grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port, *_ in watch.getmetrics.values()
    }

    async def poll(path: str, port: int, ref: Any, threshold: float) -> None:
        stub, req = pb_grpc.ExternalScalerStub(channels[port]), pb.GetMetricsRequest(scaledObjectRef=ref)
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                v = (await stub.GetMetrics(req, timeout=2)).metricValues[0].metricValueFloat
                watch.last[path] = v
                w.observe(path, v > threshold)
            await asyncio.sleep(0.02)

    async def push(path: str, port: int, ref: Any) -> None:
        stub = pb_grpc.ExternalScalerStub(channels[port])
        while True:
            try:
                async for msg in stub.StreamIsActive(ref):
                    w.observe(path, msg.result)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)

    tasks = [asyncio.create_task(poll(p, *a)) for p, a in watch.getmetrics.items()]
    tasks += [asyncio.create_task(push(p, *a)) for p, a in watch.push.items()]
    up: dict[str, list[float]] = {p: [] for p in paths}
    down: dict[str, list[float]] = {p: [] for p in paths}
    values_high: list[dict[str, float]] = []
    try:
        await asyncio.sleep(2.0)  # every stream open, every poll answered
        rng = random.Random(19)
        for step in range(steps):
            for high, table in ((True, up), (False, down)):
                await asyncio.sleep(rng.uniform(0.0, pause))
                w.level_high, w.seen = high, {}
                w.step_at = set_level(high)
                limit = time.monotonic() + timeout
                while len(w.seen) < len(paths) and time.monotonic() < limit:
                    await asyncio.sleep(0.05)
                for p in paths:
                    if p in w.seen:
                        table[p].append(w.seen[p])
                if high:
                    values_high.append({p: watch.last[p] for p in watch.getmetrics if p in watch.last})
                print(
                    f"{what} step {step + 1}/{steps} {'up' if high else 'down'}: "
                    + ", ".join(f"{p}={w.seen.get(p, float('nan')):.2f}s" for p in paths),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in channels.values():
            await ch.close()
    return {
        "steps": steps,
        "step_up_s": {p: stats(v) for p, v in up.items() if v},
        "step_down_s": {p: stats(v) for p, v in down.items() if v},
        "not_seen_within_s": {
            "timeout": timeout,
            **{p: steps - len(up[p]) for p in paths if len(up[p]) < steps},
        },
        "getmetrics_values_at_high": values_high,
    }


# -- the engine --------------------------------------------------------------------------------------------
async def serve_engine(port: int, mode: str) -> None:
    """The engine process (until SIGTERM)."""
    from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine

    if mode == "load":
        engine = MockEngine(MockEngineConfig(), demand=lambda t: 6.0)
    else:  # requests that never finish: the queue is what a step sets
        engine = MockEngine(MockEngineConfig(max_num_seqs=32, service_time_s=1e9))
    (state,) = engine.models.values()

    def set_queue(waiting: int) -> None:
        t = time.time()
        engine.advance(t)
        state.in_system = (engine.config.max_num_seqs + waiting) if waiting else 0.0
        engine.advance(t + 1e-6)

    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGUSR1, set_queue, HIGH_QUEUE)
    loop.add_signal_handler(signal.SIGUSR2, set_queue, 0)
    server = await start_mock_engine(engine, port=port)
    await stopped.wait()
    await server.close()


@dataclass
class Engine:
    proc: subprocess.Popen[Any]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def step(self, up: bool) -> float:
        """20 requests waiting (``up``) or none, now; returns the instant."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGUSR1 if up else signal.SIGUSR2)
        return t


@contextlib.contextmanager
def engine_process(mode: str, cpu: int | None = None) -> Iterator[Engine]:
    """The engine in its own process (``taskset`` execs it: the same pid)."""
    port = c.free_port()
    cmd = [sys.executable, __file__, "serve-engine", str(port), "--mode", mode]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")})
    try:
        wait_ready(f"http://127.0.0.1:{port}/metrics", proc, "the engine process", 30)
        yield Engine(proc, port)
    finally:
        c.stop(proc)


@contextlib.asynccontextmanager
async def gpuscale_engine_stack(engine_port: int) -> AsyncIterator[tuple[int, str]]:
    """The engine as one GPU pod's (a local API server and kubelet, the demo's), a real agent scraping it
    (1 s) and a real scaler following the agent; yields the scaler's gRPC port and the agent's /metrics."""
    from gpuscale.backends.mock import MockBackend, MockConfig, find_model
    from gpuscale.demo.apiserver import LocalApiServer, make_pod, write_kubeconfig
    from gpuscale.demo.kubelet import LocalKubelet, pod_resources

    tmp = Path(tempfile.mkdtemp(prefix="gpuscale-peer-engine-"))  # removed at the end
    backend = MockBackend(MockConfig(gpus=1, model=find_model("h100"), node=ENGINE_NODE))
    backend.open()
    uuid = backend.devices()[0].uuid
    backend.close()
    api = LocalApiServer(token="bench")
    url = await api.start()
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", url, "bench", namespace=NAMESPACE)
    labels = {"app": "llm"}
    api.put_node(ENGINE_NODE, {"nvidia.com/gpu.present": "true"})
    api.put_deployment(NAMESPACE, "llm", labels, replicas=1)
    api.put_scaled_object(
        NAMESPACE, "llm", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}, []
    )
    api.add_pod(
        make_pod(
            NAMESPACE, POD, node=ENGINE_NODE, labels=labels, containers={"main": "containerd://" + "ab" * 32},
            limits={"nvidia.com/gpu": "1"}, annotations={"gpuscale.io/metrics-port": str(engine_port)},
            ip="127.0.0.1",
        )
    )  # fmt: skip
    kubelet = LocalKubelet(tmp / "kubelet.sock")
    kubelet.pods = [pod_resources(NAMESPACE, POD, {"main": [("nvidia.com/gpu", [uuid])]})]
    await kubelet.start()
    mport, gport = c.free_port(), c.free_port()
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "gpuscale", "--log-level", "warning", "agent", "--backend", "mock",
            "--mock-gpus", "1", "--interval", "1", "--node-name", ENGINE_NODE,
            "--metrics-address", f"127.0.0.1:{mport}", "--grpc-address", f"127.0.0.1:{gport}",
            "--kubelet-socket", str(kubelet.socket_path), "--kubeconfig", str(kubeconfig),
        ],
        env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")},
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{mport}/readyz", agent, "the engine's agent")
        stack = contextlib.ExitStack()  # the scaler's start and stop block: off the event loop
        scaler = c.scaler([f"127.0.0.1:{gport}"], extra=["--kubeconfig", str(kubeconfig)])
        s = await asyncio.to_thread(stack.enter_context, scaler)
        try:
            yield int(s["grpc_port"]), f"http://127.0.0.1:{mport}/metrics"
        finally:
            await asyncio.to_thread(stack.close)
    finally:
        await asyncio.to_thread(c.stop, agent)
        await kubelet.stop()
        await api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def engine_scrapes(metrics_url: str) -> dict[str, float]:
    """The agent's engine scrapes so far, by result (``gpuscale_agent_engine_scrapes_total``)."""
    out = {}
    for line in c.http_get(metrics_url).splitlines():
        if line.startswith("gpuscale_agent_engine_scrapes_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            if float(line.rsplit(" ", 1)[1]):
                out[result] = float(line.rsplit(" ", 1)[1])
    return out


# -- the cost of one engine scrape -------------------------------------------------------------------------
async def gpuscale_scrape_cost(url: str, n: int) -> dict[str, Any]:
    """gpuscale's engine scrape (fetch + parse + map, the agent's ``Scraper``) ``n`` times: this process's
    CPU and each scrape's wall time."""
    from urllib.parse import urlsplit

    from prometheus_client import CollectorRegistry

    from gpuscale.agent.engines.discovery import Endpoint
    from gpuscale.agent.engines.scrape import Scraper, ScrapeSettings
    from gpuscale.model import EngineMissing, EngineSample

    parts = urlsplit(url)
    endpoint = Endpoint("http", parts.hostname or "", parts.port or 80, parts.path, "gpuscale.io")
    scraper = Scraper(ScrapeSettings(timeout=5.0), CollectorRegistry())
    try:
        for _ in range(50):
            await scraper.scrape(endpoint)
        walls: list[float] = []
        samples: list[EngineSample | EngineMissing] = []
        cpu0 = time.process_time()
        for _ in range(n):
            t0 = time.perf_counter()
            sample = await scraper.scrape(endpoint)
            walls.append(time.perf_counter() - t0)
            samples.append(sample)
        cpu = time.process_time() - cpu0
    finally:
        await scraper.close()
    last = samples[-1]
    assert all(isinstance(s, EngineSample) and not s.notes for s in samples), last
    assert isinstance(last, EngineSample)
    return {"n": n, "cpu_seconds": cpu, "walls_s": walls, "waiting": last.models[0].waiting}


def scrape_cost(binary: Path, n: int, rounds: int) -> dict[str, Any]:
    """Both clients against the same engine process, in turns; clients on core 0, the engine on core 1."""
    pin = (os.cpu_count() or 1) >= 2
    runs: dict[str, list[dict[str, Any]]] = {"gpuscale": [], "keda-gpu-scaler": []}
    with engine_process("load", 1 if pin else None) as engine:
        url = engine.url
        body = c.http_get(url)
        for r in range(rounds):
            for side in ("gpuscale", "keda-gpu-scaler") if r % 2 == 0 else ("keda-gpu-scaler", "gpuscale"):
                print(f"scrape cost round {r + 1}/{rounds}: {side}", file=sys.stderr, flush=True)
                if side == "gpuscale":
                    cmd = [sys.executable, __file__, "scrape-cost", url, "--n", str(n)]
                    out = subprocess.run(
                        ["taskset", "-c", "0", *cmd] if pin else cmd,
                        capture_output=True,
                        text=True,
                        timeout=300,
                        check=True,
                        env={**os.environ, "PYTHONPATH": str(c.ROOT / "src")},
                    )
                    got = json.loads(out.stdout)
                    waiting = got["waiting"]
                else:
                    got = _peer.scrape_cost(binary, url, n, "0" if pin else None)
                    waiting = got["last"]["QueueDepth"]
                runs[side].append(
                    {
                        "cpu_us_per_scrape": round(got["cpu_seconds"] / got["n"] * 1e6, 1),
                        "wall_ms": c.summary_ms(got["walls_s"]),
                        "waiting": waiting,
                    }
                )
    return {
        "engine": "gpuscale.backends.mock_engine: one model, 6 requests/s of the 8 it serves, own process",
        "body_bytes": len(body.encode()),
        "body_lines": body.count("\n"),
        "pinned": {"clients": 0, "engine": 1} if pin else None,
        "n_per_round": n,
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="peer_compare.py's helper processes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("serve-engine")
    e.add_argument("port", type=int)
    e.add_argument("--mode", choices=("step", "load"), default="step")
    s = sub.add_parser("scrape-cost")
    s.add_argument("url")
    s.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    if args.cmd == "serve-engine":
        asyncio.run(serve_engine(args.port, args.mode))
    else:
        print(json.dumps(asyncio.run(gpuscale_scrape_cost(args.url, args.n))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
