"""A mock vLLM engine: a ``/metrics`` endpoint that speaks vLLM's exposition, driven by demand.

Why: the demo, the tests and the benchmarks must exercise the real discovery → scrape → parse path with no
GPU and no vLLM. This serves every series a vLLM V1 engine serves by default, under its names, types, help
texts, labels (``model_name``, ``engine``) and histogram buckets, as vLLM defines them in
``vllm/v1/metrics/loggers.py`` (the ``PrometheusStatLogger`` of the 0.11/0.12 line: the version that has
``vllm:inter_token_latency_seconds`` and no longer emits ``vllm:gpu_cache_usage_perc`` or
``vllm:time_per_output_token_seconds`` by default). It leaves out what vLLM emits only when a feature is on
(LoRA, speculative decoding, KV-connector transfer, ``--kv-cache-metrics``, NaN checks) and the HTTP series
of prometheus-fastapi-instrumentator. vLLM serves its metrics through prometheus_client's multiprocess
collector, which writes no ``_created`` series; neither does this.

How: each model is a fluid queue. Requests arrive at ``demand(t)`` per second (the pod's share, split
between its models by ``weights``); up to ``max_num_seqs`` run at once, each for ``service_time_s``, so a
model serves at most ``max_num_seqs / service_time_s`` requests per second. Above that the queue
(``vllm:num_requests_waiting``) grows; the KV cache fills with the running batch; time to first token is
the queueing time (Little's law: waiting / service rate) plus a prefill time; inter-token latency rises with
the batch. Each observation is spread over 0.7, 1 and 1.4 times its value. The state advances
to ``clock()`` on every scrape in steps of at most 0.1 s: deterministic for a given clock and demand.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

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

# Buckets exactly as vllm/v1/metrics/loggers.py defines them.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)  # fmt: skip  (inter_token_latency_seconds and request_time_per_output_token_seconds)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)  # fmt: skip  (e2e_request_latency, request_{queue,inference,prefill,decode}_time)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort")  # str(FinishReason) of vllm/v1/engine
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
_SPREAD = ((0.7, 0.25), (1.0, 0.5), (1.4, 0.25))  # (factor, share) of each observation
_STEP_S = 0.1


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … up to ``max_value``."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(value)
        exponent += 1


@dataclass(frozen=True, slots=True)
class MockEngineConfig:
    """What one mock engine serves and how fast. ``weights``: each model's share of the demand (equal when
    empty)."""

    models: tuple[str, ...] = ("mock-llm",)
    weights: tuple[float, ...] = ()
    max_num_seqs: int = 32
    service_time_s: float = 4.0
    prompt_tokens: int = 512
    generation_tokens: int = 128
    prefill_s: float = 0.08
    itl_s: float = 0.02
    max_model_len: int = 8192
    block_size: int = 16


class _Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0.0] * (len(self.bounds) + 1)  # per bucket (not cumulative); the last is +Inf
        self.sum = 0.0

    def observe(self, value: float, count: float) -> None:
        if count <= 0:
            return
        for factor, share in _SPREAD:
            v = value * factor
            i = next((k for k, b in enumerate(self.bounds) if v <= b), len(self.bounds))
            self.counts[i] += count * share
            self.sum += v * count * share

    def buckets(self) -> list[tuple[str, float]]:
        out, cumulative = [], 0.0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += count
            out.append(("+Inf" if bound == math.inf else _le(bound), _whole(cumulative)))
        return out


def _le(bound: float) -> str:
    # prometheus_client writes le with floatToGoString: 1.0, 0.001, 2560.0
    return repr(float(bound))


@dataclass(slots=True)
class ModelState:
    """One model's state: the fluid queue and everything vLLM counts about it."""

    name: str
    in_system: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0  # 0-1, as vLLM reports it
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    finished: float = 0.0
    preemptions: float = 0.0
    histograms: dict[str, _Histogram] = field(default_factory=dict)

    def queue_time(self, config: MockEngineConfig) -> float:
        """How long a request arriving now waits (Little's law: the queue over the service rate)."""
        return self.waiting / (config.max_num_seqs / config.service_time_s)

    def ttft(self, config: MockEngineConfig) -> float:
        """Time to first token of a request arriving now: its wait, then its prefill."""
        return self.queue_time(config) + config.prefill_s


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
        self.demand = demand
        self._clock = clock
        self.started = clock()
        self._at = self.started
        token_buckets = build_1_2_5_buckets(self.config.max_model_len)
        self.models = {name: ModelState(name) for name in self.config.models}
        for state in self.models.values():
            state.histograms = {
                "vllm:request_prompt_tokens": _Histogram(token_buckets),
                "vllm:request_generation_tokens": _Histogram(token_buckets),
                "vllm:iteration_tokens_total": _Histogram(ITERATION_TOKENS_BUCKETS),
                "vllm:request_max_num_generation_tokens": _Histogram(token_buckets),
                "vllm:request_params_n": _Histogram(PARAMS_N_BUCKETS),
                "vllm:request_params_max_tokens": _Histogram(token_buckets),
                "vllm:time_to_first_token_seconds": _Histogram(TTFT_BUCKETS),
                "vllm:inter_token_latency_seconds": _Histogram(ITL_BUCKETS),
                "vllm:request_time_per_output_token_seconds": _Histogram(ITL_BUCKETS),
                "vllm:e2e_request_latency_seconds": _Histogram(REQUEST_LATENCY_BUCKETS),
                "vllm:request_queue_time_seconds": _Histogram(REQUEST_LATENCY_BUCKETS),
                "vllm:request_inference_time_seconds": _Histogram(REQUEST_LATENCY_BUCKETS),
                "vllm:request_prefill_time_seconds": _Histogram(REQUEST_LATENCY_BUCKETS),
                "vllm:request_decode_time_seconds": _Histogram(REQUEST_LATENCY_BUCKETS),
            }
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_VllmCollector(self))

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
            dt = min(_STEP_S, now - self._at)
            t = self._at - self.started
            arriving = max(0.0, float(self.demand(t))) * dt
            for share, state in zip(weights, self.models.values(), strict=False):
                self._step(state, arriving * share, dt, c)
            self._at += dt

    def _step(self, s: ModelState, arrivals: float, dt: float, c: MockEngineConfig) -> None:
        s.in_system += arrivals
        running = min(s.in_system, float(c.max_num_seqs))
        done = min(s.in_system, running / c.service_time_s * dt)
        s.in_system -= done
        s.running = min(s.in_system, float(c.max_num_seqs))
        s.waiting = max(0.0, s.in_system - s.running)
        fill = s.running / c.max_num_seqs
        s.kv_cache_usage = min(
            1.0, fill * (c.prompt_tokens + c.generation_tokens / 2) / (c.prompt_tokens + c.generation_tokens)
        )
        queue_time = s.queue_time(c)
        ttft = queue_time + c.prefill_s
        itl = c.itl_s * (1.0 + fill)
        decode = itl * (c.generation_tokens - 1)
        s.prompt_tokens += done * c.prompt_tokens
        s.generation_tokens += done * c.generation_tokens
        s.finished += done
        h = s.histograms
        h["vllm:time_to_first_token_seconds"].observe(ttft, done)
        h["vllm:inter_token_latency_seconds"].observe(itl, done * (c.generation_tokens - 1))
        h["vllm:request_time_per_output_token_seconds"].observe(itl, done)
        h["vllm:e2e_request_latency_seconds"].observe(ttft + decode, done)
        h["vllm:request_queue_time_seconds"].observe(queue_time, done)
        h["vllm:request_inference_time_seconds"].observe(ttft - queue_time + decode, done)
        h["vllm:request_prefill_time_seconds"].observe(ttft - queue_time, done)
        h["vllm:request_decode_time_seconds"].observe(decode, done)
        h["vllm:request_prompt_tokens"].observe(c.prompt_tokens, done)
        h["vllm:request_generation_tokens"].observe(c.generation_tokens, done)
        h["vllm:request_max_num_generation_tokens"].observe(c.generation_tokens, done)
        h["vllm:request_params_max_tokens"].observe(c.generation_tokens, done)
        h["vllm:request_params_n"].observe(1, done)
        steps = running / c.service_time_s * dt * c.generation_tokens / max(1.0, running)
        h["vllm:iteration_tokens_total"].observe(max(1.0, running), steps)

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type ``/metrics`` answers with: OpenMetrics when ``accept`` asks for it, else
        the text format 0.0.4 (prometheus_client's content negotiation, as vLLM's ``make_asgi_app`` does)."""
        self.advance()
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


# vLLM's default families (vllm/v1/metrics/loggers.py): name, help, and what fills it.
_GAUGES: tuple[tuple[str, str, Callable[[ModelState], float]], ...] = (
    (
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        lambda s: round(s.running),
    ),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda s: round(s.waiting)),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda s: s.kv_cache_usage),
)
_COUNTERS: tuple[tuple[str, str, Callable[[ModelState], float]], ...] = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        lambda s: s.prompt_tokens,
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        lambda s: s.prompt_tokens * 0.3,
    ),
    (
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
        "queried tokens.",
        lambda s: 0.0,
    ),
    (
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
        "cached tokens.",
        lambda s: 0.0,
    ),
    (
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        lambda s: 0.0,
    ),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", lambda s: 0.0),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda s: s.preemptions),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda s: s.prompt_tokens),
    ("vllm:generation_tokens", "Number of generation tokens processed.", lambda s: s.generation_tokens),
)
_HISTOGRAMS = {
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
}
_SLEEP_DOC = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
_LABELS = ["model_name", "engine"]


class _VllmCollector(Collector):
    """The families vLLM's ``PrometheusStatLogger`` defines, filled from the engine's state (one engine
    index, ``engine="0"``, per model)."""

    def __init__(self, engine: MockEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        states = list(self.engine.models.values())
        for name, doc, value in _GAUGES:
            gauge = GaugeMetricFamily(name, doc, labels=_LABELS)
            for s in states:
                gauge.add_metric([s.name, "0"], float(value(s)))
            yield gauge
        sleep = GaugeMetricFamily("vllm:engine_sleep_state", _SLEEP_DOC, labels=[*_LABELS, "sleep_state"])
        for s in states:
            for state in SLEEP_STATES:
                sleep.add_metric([s.name, "0", state], 1.0 if state == "awake" else 0.0)
        yield sleep
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "engine"],
        )
        info.add_metric([str(self.engine.config.block_size), "auto", "True", "0.9", "0"], 1.0)
        yield info
        for name, doc, value in _COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=_LABELS)
            for s in states:
                counter.add_metric([s.name, "0"], _whole(value(s)))
            yield counter
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*_LABELS, "finished_reason"],
        )
        for s in states:
            # a tenth end at max_tokens ("length"), the rest at a stop token, none aborted: the series sum to
            # the whole requests finished (what the agent reads as requests_finished), each never falling
            length = _whole(s.finished * 0.1)
            for reason, count in zip(FINISH_REASONS, (_whole(s.finished) - length, length, 0.0), strict=True):
                success.add_metric([s.name, "0", reason], count)
        yield success
        for name, doc in _HISTOGRAMS.items():
            family = HistogramMetricFamily(name, doc, labels=_LABELS)
            for s in states:
                hist = s.histograms[name]
                family.add_metric([s.name, "0"], hist.buckets(), hist.sum)
            yield family


def _whole(value: float) -> float:
    """A count as the engine has it: whole requests, whole tokens."""
    return float(math.floor(value + 1e-9))


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
    """Serve ``engine`` on ``host:port`` (0: a free port) with aiohttp: ``GET /metrics``, ``GET /health``;
    ``sock``: a listening socket to serve on instead (bound earlier, so its port is known before)."""
    app = web.Application()
    server: MockEngineServer | None = None

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = engine.exposition(request.headers.get("Accept"))
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
