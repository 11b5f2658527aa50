"""Load: 1,000 concurrent StreamIsActive streams and a sustained GetMetrics load (5 s from eight clients)
against a real ``gpuscale scaler`` process; its memory (RSS, read from /proc) stays flat, no call fails and
every stream is released. How fast it answers is a benchmark's (bench/), not this test's.

The scaler runs as a subprocess so that its RSS is its own (the streams' clients and the agent live in the
test process)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import grpc
import pytest

from tests.fakes.prometheus import free_port
from tests.poll import until

from .conftest import Cluster, KedaClient

STREAMS = 1000
LOAD_S = 5.0
WORKERS = 8
MD = {"podSelector": "app=llm", "targetValue": "60", "window": "0", "staleAfter": "5"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class ScalerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, grpc_port: int, metrics_port: int) -> None:
        self.proc = proc
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port

    async def metric(self, name: str) -> float:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
                text = await r.text()
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        assert match, name
        return float(match.group(1))


@pytest.fixture
async def scaler_process(cluster: Cluster) -> AsyncIterator[Callable[[], asyncio.Future[ScalerProcess]]]:
    procs: list[asyncio.subprocess.Process] = []
    drains: list[asyncio.Future[None]] = []

    async def start() -> ScalerProcess:
        agents = ",".join(n.address for n in cluster.nodes.values())
        ports = free_port(), free_port()  # the CLI takes no port 0
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpuscale",
            "--log-level",
            "info",
            "scaler",
            "--agents",
            agents,
            "--grpc-address",
            f"127.0.0.1:{ports[0]}",
            "--metrics-address",
            f"127.0.0.1:{ports[1]}",
            "--history",
            "10",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        procs.append(proc)
        assert proc.stderr is not None
        async with asyncio.timeout(15):
            while True:
                line = (await proc.stderr.readline()).decode()
                assert line, "the scaler exited"
                match = re.search(r"serving gRPC on :(\d+) and metrics on :(\d+)", line)
                if match:
                    break
        drains.append(asyncio.ensure_future(_drain(proc.stderr)))
        return ScalerProcess(proc, int(match.group(1)), int(match.group(2)))

    yield start  # type: ignore[misc]
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await proc.wait()
    await asyncio.gather(*drains)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


@pytest.mark.timeout(120)  # 10-30 s on 2 cores with the streams' clients beside the scaler
async def test_thousand_streams_and_sustained_load_memory_flat(
    cluster: Cluster,
    keda: Callable[[int], KedaClient],
    scaler_process: Callable[[], asyncio.Future[ScalerProcess]],
) -> None:
    await cluster.node("node-a", "square:0:80:2", gpus=2, interval=0.25)  # flips every second
    await cluster.node("node-b", "constant:50", gpus=2, interval=0.25)
    cluster.add_pod("default", "llm-0", "node-a", [0, 1], {"app": "llm"})
    cluster.add_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    scaler = await scaler_process()
    client = keda(scaler.grpc_port)

    async def answers() -> bool:
        try:
            return await client.value(MD) > 0
        except grpc.aio.AioRpcError:
            return False

    await until(answers, timeout=10, what="the scaler answers")

    # 1,000 streams: ten distinct triggers (activation thresholds), a hundred ScaledObjects each
    firsts = 0
    messages = 0

    async def follow(i: int) -> None:
        nonlocal firsts, messages
        md = {**MD, "activationValue": str(20 + i % 10 * 4)}
        first = True
        # a stream the test leaves (a failed assertion closes the channel under it) ends here, not as an
        # exception never retrieved that a later test in this process would log
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for _ in client.stub.StreamIsActive(client.ref(md, name=f"so-{i}")):
                messages += 1
                if first:
                    first = False
                    firsts += 1

    followers = [asyncio.create_task(follow(i)) for i in range(STREAMS)]
    await until(lambda: firsts == STREAMS, timeout=40, what="every stream sent its current state")
    assert await scaler.metric("gpuscale_scaler_streams") == STREAMS

    calls = errors = 0

    async def load(deadline: float) -> None:
        nonlocal calls, errors
        while time.monotonic() < deadline:
            try:
                await client.metrics({**MD, "targetValue": str(50 + calls % 7)})
            except grpc.aio.AioRpcError:
                errors += 1
            calls += 1

    start = time.monotonic()
    warm = asyncio.gather(*(load(start + 1.0) for _ in range(WORKERS)))
    await warm  # one second of warm-up: caches filled, allocator settled
    rss: list[float] = [rss_mib(scaler.proc.pid)]
    before_messages = messages
    deadline = time.monotonic() + LOAD_S
    calls = 0
    worker_tasks = asyncio.gather(*(load(deadline) for _ in range(WORKERS)))
    while not worker_tasks.done():
        await asyncio.sleep(0.5)
        rss.append(rss_mib(scaler.proc.pid))
    await worker_tasks
    rss.append(rss_mib(scaler.proc.pid))

    assert errors == 0
    assert calls >= WORKERS  # every worker answered, with 1,000 streams and their flips on the same loop
    assert messages - before_messages >= STREAMS  # the streams kept getting the flips
    growth = max(rss[len(rss) // 2 :]) - rss[0]
    assert growth < 8.0, f"RSS grew {growth:.1f} MiB under load: {[round(r, 1) for r in rss]}"

    for t in followers:
        t.cancel()
    await asyncio.gather(*followers, return_exceptions=True)

    async def released() -> bool:
        return await scaler.metric("gpuscale_scaler_streams") == 0

    await until(released, timeout=10, what="every stream released by the scaler")
    print(f"load: {calls} GetMetrics, {messages} stream messages, RSS MiB {rss}")
