"""The real vLLM as a pod of the test's cluster, and what the agent read of it.

``add_vllm_pod`` gives the fake API server and kubelet a Ready GPU pod whose engine is the real server (found
through ``gpuscale.io/metrics-port``). ``Readings`` keeps every reading the agent takes of that pod (the
agent itself holds only its last seconds), so a test can hold each one to what the load generator knew at
that instant. ``answer`` is one GetMetrics as KEDA makes it: the value, or the gRPC code of the error.
``apart`` (and the fixture ``vllm_apart``) keeps the server and the test's own process on separate CPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import grpc.aio
import pytest

from gpuscale.model import EngineMissing, EngineSample, ModelSignals
from gpuscale.vllmcpu import MODEL_NAME, VllmServer
from tests.fakes.apiserver import make_pod
from tests.fakes.kubelet import pod_resources
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient, Node


def add_vllm_pod(cluster: Cluster, node: str, name: str, gpu: int, port: int) -> None:
    """A Ready GPU pod of app=llm on ``node``'s GPU ``gpu``, its engine the real vLLM on ``port``."""
    cluster.apiserver.add_pod(
        make_pod(
            "default",
            name,
            node=node,
            labels={"app": "llm"},
            limits={"nvidia.com/gpu": "1"},
            annotations={"gpuscale.io/metrics-port": str(port)},
            ip="127.0.0.1",
            ready=True,
        )
    )
    n = cluster.nodes[node]
    n.kubelet.pods.append(pod_resources("default", name, {"main": [("nvidia.com/gpu", [n.uuids[gpu]])]}))


async def answer(client: KedaClient, metadata: Mapping[str, str]) -> float | grpc.StatusCode:
    """One GetMetrics as KEDA calls it: the value, or the code of the error it got."""
    try:
        return await client.value(metadata)
    except grpc.aio.AioRpcError as e:
        return e.code()


class Readings:
    """Every reading the agent of ``node`` takes of pod ``default/<pod>``'s engine, and every failed scrape,
    recorded from the agent's state (polled every 50 ms) while the test runs. ``close`` stops it."""

    def __init__(self, node: Node, pod: str) -> None:
        self.node = node
        self.key = ("default", pod)
        self.samples: dict[float, EngineSample] = {}
        self.missing: dict[float, EngineMissing] = {}
        self._task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            state = self.node.agent.state
            for s in state.engine_history.get(self.key, ()):
                self.samples.setdefault(s.timestamp, s)
            m = state.engine_missing.get(self.key)
            if m is not None:
                self.missing.setdefault(m.timestamp, m)
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def series(self, since: float = 0.0) -> list[tuple[float, ModelSignals]]:
        """The model's readings taken at or after ``since``, oldest first."""
        out = []
        for t in sorted(self.samples):
            m = self.samples[t].model(MODEL_NAME)
            if t >= since and m is not None:
                out.append((t, m))
        return out

    async def after(self, t: float, timeout: float = 20.0, what: str = "") -> tuple[float, ModelSignals]:
        """The first reading taken after ``t`` (waiting for it)."""
        await until(
            lambda: bool(self.series(t + 1e-9)), timeout, what or f"a reading of the engine after {t:.2f}"
        )
        return self.series(t + 1e-9)[0]

    async def idle(self, timeout: float = 60.0) -> tuple[float, ModelSignals]:
        """A reading with nothing waiting or running, taken after this call began (requests a test before
        left behind have ended)."""
        newest = time.time()

        async def next_reading() -> tuple[float, ModelSignals]:
            nonlocal newest
            newest, m = await self.after(newest, what="an idle reading of the engine")
            return newest, m

        return await until(
            next_reading,
            timeout,
            "the engine reading idle (nothing waiting or running)",
            interval=0,
            ok=lambda reading: reading[1].waiting == 0 and reading[1].running == 0,
        )


def _group(pgid: int) -> dict[int, str]:
    """The processes of process group ``pgid`` (Linux ``/proc``): pid to name (``comm``)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            state_ppid_pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
            if int(state_ppid_pgrp[2]) == pgid:
                found[int(entry.name)] = (entry / "comm").read_text().strip()
    return found


def _threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


_before_apart: set[int] = set()  # this process' CPUs before ``apart`` moved it


def relaunch(server: VllmServer) -> None:
    """``server.launch()`` (run it in a thread), started on every CPU this process had before ``apart``:
    vLLM's worker binds itself among the CPUs it starts on, and must not take the one left to the test."""
    if _before_apart:
        os.sched_setaffinity(0, _before_apart)
    server.launch()


@contextlib.contextmanager
def apart(server: VllmServer) -> Iterator[None]:
    """The server's processes on the CPUs its worker is bound to, this process on the others, for the
    block; every thread as it was after.

    Why: a busy vLLM keeps 2 CPUs running (its worker computing, bound to one; its engine core waiting for
    it in a loop of ``sched_yield``, as its shared-memory queue spins for a second after each read), and
    on these shared 2-core machines the other processes then wait to be run. Measured under a saturating
    load with the server's processes free to run anywhere: a process that only sleeps 20 ms at a time was
    not run for 0.3 to 4.5 s at a time, 12 s of 14 in all, and the test's own process (agent, scaler,
    load generator) most of the time, missing its scrapes, deadlines and timeouts, so that it measured the
    machine, not gpuscale. The same load with every process of the server on the worker's CPU and the
    test's on the other: not once (the shedding test then read the arrivals within 2 %). Nothing moves
    where the server's worker or a spare CPU is not found (Linux ``/proc``)."""
    pids = _group(server.pid) if server.pid is not None else {}
    workers = [pid for pid, name in pids.items() if name.startswith("VLLM::Worker")]
    try:
        engine_cpus = os.sched_getaffinity(workers[0]) if workers else set()
        spare = os.sched_getaffinity(0) - engine_cpus
    except OSError:
        engine_cpus, spare = set(), set()
    if not engine_cpus or not spare:
        yield
        return
    _before_apart.clear()
    _before_apart.update(os.sched_getaffinity(0))
    moves = [(tid, engine_cpus) for pid in pids for tid in _threads(pid)]
    moves += [(tid, spare) for tid in _threads(os.getpid())]
    saved: list[tuple[int, set[int]]] = []
    for tid, cpus in moves:
        with contextlib.suppress(OSError):
            saved.append((tid, os.sched_getaffinity(tid)))
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid, cpus in saved:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


@pytest.fixture
def vllm_apart(real_vllm: VllmServer) -> Iterator[VllmServer]:
    """``real_vllm``, with the server and the test's process on CPUs ``apart``."""
    with apart(real_vllm):
        yield real_vllm
