"""The demo pods' inference engines: one mock vLLM ``/metrics`` per pod (``MockEngine``), on a loopback port.

Each pod gets a listening socket when it is created; its port goes in the pod's ``gpuscale.io/metrics-port``
annotation, as a vLLM Deployment's template would say it. When the pod's container starts (Pending →
loading) the engine serves on that socket and the pod gets the IP ``127.0.0.1``: from then on the node's
real agent discovers it (the annotation and ``status.podIP`` from the API, the GPU from the kubelet),
scrapes, parses and streams it, and the real scaler answers engine triggers (``queue_length``) from it.

The router sends each request to the Ready pod with the fewest requests in its engine (waiting and running),
as LLM routers do (least outstanding requests): ``least_loaded``. Under an even load that is an even share; a
pod with a backlog gets nothing new until the others are as loaded, so the backlog drains at the pod's full
rate while the others take the demand. In front of it the stand-in gateway (``gateway.DemoGateway``) holds the
requests while no pod is Ready and hands them on at once when one is (``route``'s ``release``). A loading
engine gets none (it reads 0 waiting). Each engine serves ``capacity_per_replica`` requests per second
(``max_num_seqs`` / service time); above that its queue (``vllm:num_requests_waiting``) grows, below it
drains. A Ready pod's GPU is as busy as its engine's batch: ``busy_percent``, its running sequences over
``max_num_seqs``.

With ``--engine vllm`` one pod's engine is the real vLLM instead (``realvllm.RealVllm``, given to a pod with
``bind_real``): its load is the requests sent to it and not yet answered, its share of the demand goes to it
as real completions, and its mock engine gets nothing more.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..backends.mock_engine import MockEngine, MockEngineConfig, MockEngineServer, start_mock_engine
from .realvllm import RealVllm

__all__ = ["ANNOTATION", "DemoEngines", "engine_config", "least_loaded"]

ANNOTATION = "gpuscale.io/metrics-port"
SERVICE_TIME_S = 2.0  # seconds a request runs; max_num_seqs follows from the replica's capacity


def engine_config(capacity_per_replica: float) -> MockEngineConfig:
    """One model serving ``capacity_per_replica`` requests/s: ``max_num_seqs`` requests, each 2 s."""
    seqs = max(1, round(capacity_per_replica * SERVICE_TIME_S))
    return MockEngineConfig(models=("demo-llm",), max_num_seqs=seqs, service_time_s=SERVICE_TIME_S)


def least_loaded(demand: float, loads: Mapping[str, float], horizon_s: float) -> dict[str, float]:
    """The requests/s each pod gets when every arrival goes to the pod with the fewest requests in it.

    ``loads``: the requests in each Ready pod's engine now; the ``demand * horizon_s`` requests arriving over
    the next ``horizon_s`` seconds fill the least loaded pods up to a common level (water-filling), so the
    pods at the bottom rise together and a pod above that level gets none. Equal loads share evenly."""
    if not loads or demand <= 0 or horizon_s <= 0:
        return dict.fromkeys(loads, 0.0)
    remaining = demand * horizon_s
    ordered = sorted(loads.values())
    level, n = ordered[0], 1  # the level the arrivals fill up to, and the pods under it
    while n < len(ordered) and (ordered[n] - level) * n <= remaining:
        remaining -= (ordered[n] - level) * n
        level, n = ordered[n], n + 1
    level += remaining / n
    return {pod: max(0.0, level - load) / horizon_s for pod, load in loads.items()}


@dataclass
class _Engine:
    engine: MockEngine
    sock: socket.socket
    server: MockEngineServer | None = None
    task: asyncio.Task[None] | None = None


class DemoEngines:
    """The engines of the demo's pods, by pod name."""

    def __init__(
        self,
        capacity_per_replica: float,
        clock: Callable[[], float] = time.time,
        real: RealVllm | None = None,
    ) -> None:
        self.config = engine_config(capacity_per_replica)
        self.real = real
        self._clock = clock
        self._routed_at: float | None = None
        self._engines: dict[str, _Engine] = {}
        self._demand: dict[str, float] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._scrapes_before = 0  # of engines removed since

    def create(self, pod: str) -> int:
        """A listening socket for ``pod``'s engine; its port (the pod's annotation)."""
        sock = socket.create_server(("127.0.0.1", 0))
        sock.setblocking(False)

        def demand(t: float) -> float:
            return self._demand.get(pod, 0.0)

        self._engines[pod] = _Engine(MockEngine(self.config, demand, clock=self._clock), sock)
        port: int = sock.getsockname()[1]
        return port

    def start(self, pod: str) -> None:
        """The pod's container started: serve its engine."""
        e = self._engines.get(pod)
        if e is not None and e.task is None:

            async def serve(e: _Engine = e) -> None:
                e.server = await start_mock_engine(e.engine, sock=e.sock)

            e.task = asyncio.get_running_loop().create_task(serve())

    def real_pod(self) -> str | None:
        """The pod whose engine is the real vLLM now (None: none, or no real vLLM)."""
        return self.real.pod if self.real is not None else None

    def bind_real(self, pod: str, now: float) -> None:
        """``pod``'s engine is the real vLLM from now on; its mock engine gets no more requests."""
        if self.real is not None and pod in self._engines:
            self.real.take(pod, now)

    def remove(self, pod: str) -> None:
        if self.real is not None and self.real.pod == pod:
            self.real.pod = None  # its requests in flight finish
        e = self._engines.pop(pod, None)
        self._demand.pop(pod, None)
        if e is not None:
            self._scrapes_before += e.server.scrapes if e.server is not None else 0
            task = asyncio.get_running_loop().create_task(self._close(e))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close(e: _Engine) -> None:
        if e.task is not None:
            await e.task
        if e.server is not None:
            await e.server.close()
        e.sock.close()

    def route(self, demand: float, ready: Mapping[str, bool], release: float = 0.0) -> None:
        """Send ``demand`` (requests/s) since the last call to the least loaded Ready pods
        (``least_loaded``) and bring every engine to now; then ``release`` requests more (those the gateway
        held until a pod was Ready), all at once. The real vLLM's pod gets its share as completions."""
        now = self._clock()
        horizon = max(1e-3, now - self._routed_at) if self._routed_at is not None else 1e-3
        self._routed_at = now
        loads = {
            pod: self.load_of(pod) for pod, is_ready in ready.items() if is_ready and pod in self._engines
        }
        rates = least_loaded(demand, loads, horizon)
        real = self.real_pod()
        self._demand = {pod: rates.get(pod, 0.0) if pod != real else 0.0 for pod in self._engines}
        for e in self._engines.values():
            e.engine.advance(now)
        if real is not None and self.real is not None:
            self.real.send(rates.get(real, 0.0) * horizon)
        if release > 0 and loads:  # the held requests, at once, each to the least loaded pod then
            shares = least_loaded(release, {pod: self.load_of(pod) for pod in loads}, 1.0)
            for pod, n in shares.items():
                if pod == real and self.real is not None:
                    self.real.send(n)
                else:
                    self._arrive(pod, n)

    def _arrive(self, pod: str, n: float) -> None:
        """``n`` requests arrive at ``pod``'s engine now, shared evenly by its models (the demo's engines
        serve one): they queue (``waiting``) behind its running batch until it has room."""
        engine = self._engines[pod].engine
        models = list(engine.models.values())
        for state in models:
            state.in_system += n / len(models)
            state.running = min(state.in_system, float(self.config.max_num_seqs))
            state.waiting = max(0.0, state.in_system - state.running)

    def load_of(self, pod: str) -> float:
        """Requests in ``pod``'s engine now, waiting and running (the real vLLM's: sent, not yet answered)."""
        if self.real is not None and pod == self.real.pod:
            return self.real.load
        e = self._engines.get(pod)
        return sum(s.in_system for s in e.engine.models.values()) if e is not None else 0.0

    def busy_percent(self, pod: str) -> float:
        """How busy ``pod``'s GPU is: its engine's running sequences over ``max_num_seqs``, in %."""
        if self.real is not None and pod == self.real.pod:
            return 100.0 * self.real.running / self.real.max_num_seqs
        e = self._engines.get(pod)
        if e is None:
            return 0.0
        running = sum(s.running for s in e.engine.models.values())
        return min(100.0, 100.0 * running / self.config.max_num_seqs)

    def waiting(self) -> float:
        """Requests waiting in every engine now (the sum of ``vllm:num_requests_waiting``)."""
        return sum(self.waiting_of(pod) for pod in self._engines)

    def waiting_of(self, pod: str) -> float:
        if self.real is not None and pod == self.real.pod:
            return self.real.waiting
        e = self._engines.get(pod)
        return sum(s.waiting for s in e.engine.models.values()) if e is not None else 0.0

    def scrapes(self) -> int:
        """``/metrics`` requests the engines answered (the agents' scrapes)."""
        live = sum(e.server.scrapes for e in self._engines.values() if e.server is not None)
        return self._scrapes_before + live

    async def close(self) -> None:
        for pod in list(self._engines):
            self.remove(pod)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
