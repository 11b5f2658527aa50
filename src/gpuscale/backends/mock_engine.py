"""A mock vLLM engine: a ``/metrics`` endpoint that speaks vLLM's exposition, driven by demand.

Why: the demo, the tests and the benchmarks must exercise the real discovery → scrape → parse path with no
GPU and no vLLM. This serves every ``vllm:`` series a vLLM V1 engine serves by default, under its names,
types, help texts, labels (``model_name``, ``engine``) and histogram buckets, as the real vLLM 0.32.0 serves
them (``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger`` and ``perf.py`` ``PerfMetricsProm``), with a
``_created`` series for every counter and histogram: one API server serves vLLM's metrics from
prometheus_client's default registry, which writes them (only ``--api-server-count`` above 1 switches to the
multiprocess collector, which writes none). It answers ``/metrics`` as vLLM does: in the text format
(``text/plain; version=1.0.0; charset=utf-8``) whatever the ``Accept`` header asks.
``tests/engine/test_mock_matches_real.py`` holds it to a real vLLM on the same load: the same answer, the same
``vllm:`` families, types, help texts, label names and bucket bounds, the same moments the counts move.

Deliberately left out: what vLLM emits only when a feature is on (LoRA, speculative decoding, KV-connector
transfer, ``--kv-cache-metrics``, watermarking, NaN checks); the families that are not vLLM's own and that
gpuscale never reads: ``python_*`` and ``process_*`` (prometheus_client's default collectors, about the
server process) and ``http_*`` (prometheus-fastapi-instrumentator, the API server's HTTP requests).
``vllm:estimated_*_per_gpu`` (the FLOPs and bytes estimate) stays 0, as it reads on the CPU build; no
request is preempted and none is rejected at admission, so those series stay 0 too.

How: each model is a fluid FIFO queue of cohorts (``_mock_engine_queue``: requests arrive at ``demand(t)`` per
second, up to ``max_num_seqs`` run at once, each series moves when vLLM moves it), which the engine steps to
``clock()`` on every scrape in steps of at most 0.1 s: deterministic for a given clock, demand and arrivals.
``_mock_engine_families`` writes the state out as vLLM's families; this module holds the engine and serves it
over HTTP.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_1_0_0, choose_encoder, generate_latest

from ._mock_engine_families import VllmCollector
from ._mock_engine_queue import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    STEP_S,
    TTFT_BUCKETS,
    MockEngineConfig,
    ModelState,
    admit,
    build_1_2_5_buckets,
    enqueue,
    new_model,
    publish,
    step,
)

__all__ = [
    "ITL_BUCKETS",
    "REQUEST_LATENCY_BUCKETS",
    "TTFT_BUCKETS",
    "MockEngine",
    "MockEngineConfig",
    "MockEngineServer",
    "ModelState",
    "build_1_2_5_buckets",
    "start_mock_engine",
]


class MockEngine:
    """The engine's state over time. ``demand(t)``: requests per second arriving at this pod at ``t`` seconds
    since the engine started; ``clock``: Unix seconds (inject one to drive it by hand)."""

    def __init__(
        self,
        config: MockEngineConfig | None = None,
        demand: Callable[[float], float] = lambda t: 0.0,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or MockEngineConfig()
        if not self.config.models:
            raise ValueError("a mock engine serves at least one model")
        if self.config.service_time_s <= 0:
            raise ValueError("a mock engine's service_time_s must be above 0")
        self.demand = demand
        self._clock = clock
        self.started = clock()
        self._at = self.started
        self.models = {name: new_model(name, self.config) for name in self.config.models}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(VllmCollector(self))

    @property
    def capacity_rps(self) -> float:
        """Requests per second one model serves at most."""
        return self.config.max_num_seqs / self.config.service_time_s

    def _weights(self) -> list[float]:
        w = list(self.config.weights) or [1.0] * len(self.models)
        total = sum(w) or 1.0
        return [x / total for x in w]

    def advance(self, now: float | None = None) -> None:
        """Move the state to ``now`` (default: the clock)."""
        now = self._clock() if now is None else now
        c = self.config
        weights = self._weights()
        while self._at < now:
            dt = min(STEP_S, now - self._at)
            t = self._at - self.started
            arriving = max(0.0, float(self.demand(t))) * dt
            for share, state in zip(weights, self.models.values(), strict=False):
                step(state, arriving * share, self._at, dt, c)
            self._at += dt

    def arrive(self, n: float, model: str | None = None) -> None:
        """``n`` requests arrive now (at the state's time: ``advance`` first), all to ``model`` or shared by
        the models' ``weights``; those the batch has room for start at once."""
        if n <= 0:
            return
        c = self.config
        shares = [1.0 if s.name == model else 0.0 for s in self.models.values()] if model else self._weights()
        for share, state in zip(shares, self.models.values(), strict=False):
            if share > 0:
                enqueue(state, n * share, self._at)
                admit(state, self._at, c)
                publish(state, c)

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type: without ``accept``, what vLLM's ``/metrics`` answers whatever the
        client's ``Accept`` header: the text format, ``text/plain; version=1.0.0; charset=utf-8``
        (prometheus-fastapi-instrumentator's handler answers ``/metrics``; vLLM's mount of prometheus_client's
        own app, which would negotiate, comes after it and is never reached). With ``accept``:
        prometheus_client's content negotiation instead (OpenMetrics: for parser tests, benchmarks)."""
        self.advance()
        if accept is None:
            return generate_latest(self.registry), CONTENT_TYPE_PLAIN_1_0_0
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


@dataclass(slots=True)
class MockEngineServer:
    """A mock engine listening: ``url`` is its ``/metrics``. ``close`` stops it."""

    engine: MockEngine
    runner: web.AppRunner
    host: str
    port: int
    scrapes: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_mock_engine(
    engine: MockEngine, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None
) -> MockEngineServer:
    """Serve ``engine`` on ``host:port`` (0: a free port) with aiohttp: ``GET /metrics`` (the text format
    whatever the ``Accept`` header, as vLLM answers), ``GET /health``;
    ``sock``: a listening socket to serve on instead (bound earlier, so its port is known before)."""
    app = web.Application()
    server: MockEngineServer | None = None

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = engine.exposition()  # as vLLM answers: the Accept header is not read
        if server is not None:
            server.scrapes += 1
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    if sock is None:
        sock = socket.create_server((host, port))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    host, port = sock.getsockname()[:2]
    server = MockEngineServer(engine, runner, host, port)
    return server
