"""The real vLLM behind one of the demo's pods (``gpuscale demo --engine vllm``).

``RealVllm`` starts the installed real vLLM (``gpuscale.vllmcpu``: vLLM's CPU build serving a tiny random
Llama as ``tiny``, 4 sequences at once) when the demo starts, in a thread, so the demo runs meanwhile; its log
is ``<out>/logs/vllm.log``. Once it answers ``/health`` (about a minute on 2 cores) the demo cluster gives it
to one replica: the pod Ready longest (the last one a scale-down removes), or else the first pod to become
Ready. That pod's ``gpuscale.io/metrics-port`` annotation is rewritten to the real server's port, so its
node's real agent scrapes the real vLLM from its next round, and the router sends that pod's share of the
demand to the real server as real completions (``POST /v1/completions``, ``max_tokens`` tokens with
``ignore_eos``, so every request is as long). The other pods keep their mock engines. Should the pod go
(a scale-down), the real vLLM goes to the next pod Ready, as before; its requests in flight finish.

The router counts the pod's load as the requests it sent there and has not had answered (what a
least-outstanding-requests router counts), so a slower engine gets a smaller share. So that this machine
copes, at most ``max_outstanding`` requests are open at once (4 running, the rest waiting in vLLM's queue):
what the router would send beyond that is shed and counted. vLLM's CPU build binds its engine to one core,
and the demo runs it at a lower CPU priority (``nice`` 10): the demo's loop, the agents and the scaler come
first.

The demo reads the server's own ``/metrics`` once a second (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:request_success_total``), and follows the agents' ``Watch`` streams, as
the scaler does, for their readings of the pod's engine (``AgentReadings``): what the scaler scales on.
``close`` stops the server (SIGTERM to its process group, SIGKILL after 10 s; SIGKILL at once while it is
still starting), waits for it and for the thread that started it: at the end, on Ctrl-C and on an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp
import grpc
import grpc.aio

from .._proto import agent_pb2, agent_pb2_grpc
from ..vllmcpu import MODEL_NAME, Engine, VllmCpuError, VllmServer, free_port
from .errors import DemoError

__all__ = ["AgentReadings", "EngineReading", "RealVllm", "VllmSummary", "server_readings"]

log = logging.getLogger(__name__)

MAX_NUM_SEQS = 4  # vLLM's --max-num-seqs: the requests it runs at once
MAX_TOKENS = 32  # tokens per request (ignore_eos): about 8 requests/s at 4 at once on an idle 2-core machine
MAX_OUTSTANDING = 32  # requests open at once at most; what the router would send beyond is shed
NICE = 10  # the server's CPU priority: below the demo's loop, the agents and the scaler
STARTUP_TIMEOUT_S = 300.0
STOP_GRACE_S = 10.0  # from SIGTERM to SIGKILL; a healthy server stops in a few seconds
SCRAPE_EVERY_S = 1.0

_SERVER_SERIES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:request_success_total": "success",
}


def server_readings(text: str) -> dict[str, float]:
    """``waiting``, ``running`` and ``success`` (summed over their labels: every finish reason) from a vLLM
    ``/metrics`` exposition; a series it lacks is left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{")
        if not rest:  # no labels
            name = line.split(" ", 1)[0]
        key = _SERVER_SERIES.get(name)
        if key is None:
            continue
        try:
            value = float(line.rsplit("}", 1)[-1].split()[0])
        except (IndexError, ValueError):
            continue
        out[key] = out.get(key, 0.0) + value
    return out


class _Server(Protocol):
    """What ``RealVllm`` needs of its server (``gpuscale.vllmcpu.VllmServer``; a stand-in in tests)."""

    port: int
    log: Path
    process: subprocess.Popen[bytes] | None

    @property
    def url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...

    def launch(self, timeout: float = ...) -> None: ...

    def stop(self, grace: float = ...) -> None: ...

    def kill(self) -> None: ...


class _NiceServer(VllmServer):
    """The real vLLM at ``NICE`` (where ``nice`` is installed): on 2 cores the demo's timing comes first."""

    def command(self) -> list[str]:
        nice = shutil.which("nice")
        return [nice, "-n", str(NICE), *super().command()] if nice else super().command()


@dataclass(frozen=True)
class EngineReading:
    """One agent reading of a pod's engine: its time (Unix seconds), engine, and per model waiting and
    running requests (NaN where the reading lacks one)."""

    timestamp: float
    engine: str
    models: dict[str, tuple[float, float]]


class AgentReadings:
    """The agents' readings of the pods' engines, from their ``Watch`` streams (as the scaler follows them):
    per pod, the newest reading and how many readings of each model came."""

    def __init__(self) -> None:
        self.latest: dict[str, EngineReading] = {}
        self.counts: dict[tuple[str, str], int] = {}  # (pod, model) -> readings
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            self._tasks.append(asyncio.get_running_loop().create_task(self._follow(address)))

    def apply(self, update: agent_pb2.NodeUpdate) -> None:
        for state in update.engines:
            newest = self.latest.get(state.pod)
            for r in state.readings:
                if newest is not None and r.timestamp <= newest.timestamp:
                    continue
                models = {
                    m.model: (
                        m.waiting if m.HasField("waiting") else math.nan,
                        m.running if m.HasField("running") else math.nan,
                    )
                    for m in r.models
                }
                newest = EngineReading(r.timestamp, r.engine, models)
                self.latest[state.pod] = newest
                for model in models:
                    self.counts[(state.pod, model)] = self.counts.get((state.pod, model), 0) + 1

    async def _follow(self, address: str) -> None:
        while True:
            try:
                async with grpc.aio.insecure_channel(address) as channel:
                    call = agent_pb2_grpc.AgentStub(channel).Watch(
                        agent_pb2.WatchRequest(client="gpuscale-demo", history_seconds=1)
                    )
                    try:
                        while True:
                            msg = await call.read()
                            if msg is grpc.aio.EOF:
                                break
                            assert isinstance(msg, agent_pb2.NodeUpdate)
                            self.apply(msg)
                    finally:
                        call.cancel()
            except grpc.aio.AioRpcError as e:
                log.debug("the agent %s's Watch stream: %s", address, e.code().name)
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()


@dataclass(frozen=True)
class VllmSummary:
    """What the real vLLM did in the demo (``DemoResult.vllm``). Times in the demo's seconds."""

    port: int
    pid: int | None
    log: Path
    healthy_after: float | None  # seconds from its start to its first good /health; None: not within the run
    pods: tuple[str, ...]  # the pods whose engine it was, in turn
    first_served_at: float | None  # when it first had a pod
    sent: int
    answered: int
    failed: int
    shed: int
    success_total: float | None  # the server's own vllm:request_success_total, read last before it stopped
    agent_readings: int  # the agents' readings of it, streamed
    stopped: bool  # its process group is gone


@dataclass
class RealVllm:
    """The real vLLM and the requests the router sends it; see the module's doc."""

    server: _Server
    max_tokens: int = MAX_TOKENS
    max_outstanding: int = MAX_OUTSTANDING
    max_num_seqs: int = MAX_NUM_SEQS
    readings: AgentReadings = field(default_factory=AgentReadings)
    state: str = "new"  # new, starting, healthy, failed, stopped
    pod: str | None = None  # the pod whose engine it is now
    pods: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    first_served_at: float | None = None
    healthy_after: float | None = None
    outstanding: int = 0
    sent: int = 0
    answered: int = 0
    failed: int = 0
    shed: int = 0
    last_error: str = ""
    server_now: dict[str, float] = field(default_factory=dict)  # the server's own waiting, running, success
    _credit: float = 0.0
    _said_healthy: bool = False
    _started_at: float = 0.0
    _launch: asyncio.Future[None] | None = None
    _session: aiohttp.ClientSession | None = None
    _requests: set[asyncio.Task[None]] = field(default_factory=set)
    _scrape: asyncio.Task[None] | None = None

    @classmethod
    def for_engine(cls, engine: Engine, log_dir: Path) -> RealVllm:
        log_dir.mkdir(parents=True, exist_ok=True)
        server = _NiceServer(engine, free_port(), log_dir / "vllm.log", max_num_seqs=MAX_NUM_SEQS)
        return cls(server)

    # ----- the server's lifecycle
    @property
    def pid(self) -> int | None:
        p = self.server.process
        return p.pid if p is not None else None

    @property
    def healthy(self) -> bool:
        return self.state == "healthy"

    def starting_for(self) -> float:
        """Seconds since the server's start."""
        return time.monotonic() - self._started_at if self._started_at else 0.0

    async def start(self) -> None:
        """Start the server in a thread; return once its process runs (not yet healthy)."""
        loop = asyncio.get_running_loop()
        self.state = "starting"
        self._started_at = time.monotonic()
        self._launch = loop.run_in_executor(None, self.server.launch, STARTUP_TIMEOUT_S)
        self._launch.add_done_callback(self._launched)
        while self.server.process is None and not self._launch.done():
            await asyncio.sleep(0.01)

    def _launched(self, future: asyncio.Future[None]) -> None:
        if self.state != "starting":
            return  # closed meanwhile
        if future.cancelled() or future.exception() is not None:
            self.state = "failed"
            return
        self.state = "healthy"
        self.healthy_after = time.monotonic() - self._started_at
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_outstanding + 2),
            timeout=aiohttp.ClientTimeout(total=120.0),
        )
        self._scrape = asyncio.get_running_loop().create_task(self._scrape_forever())

    def check(self) -> None:
        """Raise ``DemoError`` when the server failed to start, or exited after it was healthy."""
        if self.state == "failed":
            assert self._launch is not None
            e = None if self._launch.cancelled() else self._launch.exception()
            first = str(e).splitlines()[0].rstrip(":") if isinstance(e, VllmCpuError) else repr(e)
            where = "" if str(self.server.log) in first else f"; its log is {self.server.log}"
            raise DemoError(f"--engine vllm: the real vLLM did not start: {first}{where}")
        process = self.server.process
        code = process.poll() if process is not None else None
        if self.state == "healthy" and code is not None:
            raise DemoError(
                f"--engine vllm: the real vLLM exited with code {code} while the demo ran; "
                f"its log is {self.server.log}"
            )

    def event(self, t: float, text: str) -> None:
        self.events.append(f"t={t:4.1f}s vllm: {text}")

    # ----- the pod whose engine it is
    def note(self, now: float) -> None:
        """Say (once) that the server is healthy, at the demo's ``now``."""
        if self.healthy and not self._said_healthy:
            self._said_healthy = True
            self.event(now, f"the real vLLM is healthy, {self.healthy_after:.0f} s after its start")

    def take(self, pod: str, now: float) -> None:
        self.pod = pod
        self.pods.append(pod)
        if self.first_served_at is None:
            self.first_served_at = now
        self.event(
            now,
            f"{pod}'s engine is now the real vLLM (its gpuscale.io/metrics-port → {self.server.port}); "
            "the router sends it that pod's share as completions",
        )

    def release(self, pod: str, now: float) -> None:
        if self.pod == pod:
            self.pod = None
            self.event(now, f"{pod} deleted; the real vLLM goes to the next pod Ready")

    # ----- the requests the router sends it
    def send(self, n: float) -> None:
        """``n`` requests (fractions carry over) arrive for the pod: each a completion sent now, unless
        ``max_outstanding`` are open (then shed)."""
        if self._session is None or n <= 0:
            return
        self._credit += n
        whole = int(self._credit)
        self._credit -= whole
        for _ in range(whole):
            if self.outstanding >= self.max_outstanding:
                self.shed += 1
                continue
            self.outstanding += 1
            self.sent += 1
            task = asyncio.get_running_loop().create_task(self._complete())
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _complete(self) -> None:
        assert self._session is not None
        body = {
            "model": MODEL_NAME,
            "prompt": "gpu scale",
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
        }
        try:
            async with self._session.post(f"{self.server.url}/v1/completions", json=body) as response:
                await response.read()
                if response.status == 200:
                    self.answered += 1
                else:
                    self.failed += 1
                    self.last_error = f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError) as e:
            self.failed += 1
            self.last_error = f"{type(e).__name__}: {e}"
        finally:
            self.outstanding -= 1

    @property
    def load(self) -> float:
        """The pod's load as the router counts it: requests sent and not yet answered."""
        return float(self.outstanding)

    @property
    def running(self) -> float:
        return float(min(self.outstanding, self.max_num_seqs))

    @property
    def waiting(self) -> float:
        """Requests waiting in the server: its own gauge, read within the second (else the requests open
        beyond the ``max_num_seqs`` it runs)."""
        w = self.server_now.get("waiting")
        return w if w is not None else float(max(0, self.outstanding - self.max_num_seqs))

    async def read_server(self) -> dict[str, float]:
        """The server's own ``/metrics`` now (``server_readings``); {} when it does not answer."""
        if self._session is None:
            return {}
        try:
            async with self._session.get(
                self.server.metrics_url, timeout=aiohttp.ClientTimeout(total=5)
            ) as r:
                return server_readings(await r.text())
        except (aiohttp.ClientError, TimeoutError):
            return {}

    async def _scrape_forever(self) -> None:
        while True:
            got = await self.read_server()
            if got:
                self.server_now = got
            await asyncio.sleep(SCRAPE_EVERY_S)

    # ----- what the agents read of it
    def agent_reading(self) -> EngineReading | None:
        """The agents' newest reading of the real vLLM (its model ``tiny``) as the current pod's engine."""
        if self.pod is None:
            return None
        r = self.readings.latest.get(self.pod)
        return r if r is not None and MODEL_NAME in r.models else None

    def agent_readings(self) -> int:
        return sum(self.readings.counts.get((pod, MODEL_NAME), 0) for pod in set(self.pods))

    # ----- the end
    async def close(self) -> VllmSummary:
        """Read the server's count of finished requests, drop what is still sent to it, stop it (at once
        while it starts: nothing to lose; else SIGTERM, SIGKILL after ``STOP_GRACE_S``); the summary."""
        success = None
        started = self.healthy
        if started:
            success = (await self.read_server()).get("success")
        if self.state != "new":
            self.state = "stopped"
        tasks = [*self._requests, *([self._scrape] if self._scrape is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._launch is not None and not self._launch.done():
            while self.server.process is None and not self._launch.done():  # the thread is about to start it
                await asyncio.sleep(0.01)
        if not started:
            await asyncio.to_thread(self.server.kill)
        await asyncio.to_thread(self.server.stop, STOP_GRACE_S)
        if self._launch is not None:
            with contextlib.suppress(Exception):
                await self._launch  # it saw the process exit
        await asyncio.to_thread(self.server.stop, STOP_GRACE_S)  # in case it started after the first
        if self._session is not None:
            await self._session.close()
        await self.readings.close()
        return VllmSummary(
            port=self.server.port,
            pid=self.pid,
            log=self.server.log,
            healthy_after=self.healthy_after,
            pods=tuple(self.pods),
            first_served_at=self.first_served_at,
            sent=self.sent,
            answered=self.answered,
            failed=self.failed,
            shed=self.shed,
            success_total=success,
            agent_readings=self.agent_readings(),
            stopped=await asyncio.to_thread(_group_gone, self.pid),
        )


def _group_gone(pid: int | None, wait_s: float = 5.0) -> bool:
    """Whether no live process of ``pid``'s process group (the server and its engine core) is left, within
    ``wait_s`` (a zombie, waiting for init to reap it, counts as gone)."""
    if pid is None:
        return True
    deadline = time.monotonic() + wait_s
    while True:
        if not _live_in_group(pid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _live_in_group(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            return True
    return False
