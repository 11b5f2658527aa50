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

How: each model is a fluid FIFO queue of cohorts (the requests that arrived in one 0.1 s step). Requests
arrive at ``demand(t)`` per second (the pod's share, split between its models by ``weights``), or all at
once through ``arrive``; up to ``max_num_seqs`` run at once, the batch finishing ``running /
service_time_s`` requests per second (the longest-running first: a request runs ``service_time_s`` while the
batch is full), so a model serves at most ``max_num_seqs / service_time_s`` requests per second. Above that
the queue (``vllm:num_requests_waiting``) grows; the KV cache fills with the running batch; inter-token
latency rises with the batch. Each series moves when vLLM moves it:

- a request leaving the queue for the batch is prefilled: ``vllm:prompt_tokens`` counts its prompt and
  ``vllm:time_to_first_token_seconds`` observes its wait plus ``prefill_s`` (at the first token, not at the
  end);
- while it runs, ``vllm:generation_tokens`` and ``vllm:inter_token_latency_seconds`` count its tokens;
- when it finishes, ``vllm:request_success`` counts it (a tenth ``length``, the rest ``stop``) and the
  per-request histograms observe it: ``vllm:request_queue_time_seconds`` the wait it had in the queue (so its
  ``_count`` moves as requests finish, not as they leave the queue), ``vllm:e2e_request_latency_seconds`` its
  time since arrival, and the rest;
- with ``patience_s`` set, a client gives up on a request that has waited that long in the queue (a
  gateway's timeout): it leaves the queue and no series counts it, ``finished_reason="abort"`` included, as
  released vLLM counts no client's disconnect.

Each observation is spread over the buckets of 0.7, 1 and 1.4 times its value (the ``_sum`` adds the value
itself, so a mean read from ``_sum / _count`` is the value). The state advances to ``clock()`` on every
scrape in steps of at most 0.1 s: deterministic for a given clock, demand and arrivals.
"""

from __future__ import annotations

import math
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_1_0_0, choose_encoder, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

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
NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # str(FinishReason) of vllm/v1/engine
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
WAITING_REASONS = ("capacity", "deferred")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # PromptTokenStats.ALL_SOURCES
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")  # CacheHitSource
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
PREFIX_HIT_SHARE = 0.3  # of the prompt tokens, served from the prefix cache
_SPREAD = ((0.7, 0.25), (1.0, 0.5), (1.4, 0.25))  # (factor, share) of each observation
_STEP_S = 0.1
_EPS = 1e-9
_TIME_EPS = 1e-6  # seconds: Unix times as floats are good to about 2e-7 s


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
    empty). ``patience_s``: how long a client lets its request wait in the queue before it disconnects (None:
    forever)."""

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
    patience_s: float | None = None


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
        self.sum += value * count  # the spread is the buckets'; the sum is the values' own

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
class _Waiting:
    """Requests that arrived together and wait in the queue."""

    count: float
    arrived: float


@dataclass(slots=True)
class _Running:
    """Requests that left the queue together and run."""

    count: float
    arrived: float
    started: float


@dataclass(slots=True)
class ModelState:
    """One model's state: its queue and batch, and everything vLLM counts about it. ``in_system`` is
    ``waiting + running``; what a caller adds to it directly arrives at the next step (``MockEngine.arrive``
    adds requests now), and what a caller takes from it goes, the newest first, counted by no series."""

    name: str
    in_system: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0  # 0-1, as vLLM reports it
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    started: float = 0.0  # requests that left the queue for the batch (each observed in the TTFT histogram)
    finished: float = 0.0
    abandoned: float = 0.0  # gave up (``patience_s``) or taken from ``in_system``: no series counts them
    preemptions: float = 0.0
    histograms: dict[str, _Histogram] = field(default_factory=dict)
    queue: deque[_Waiting] = field(default_factory=deque)  # FIFO, oldest first
    batch: deque[_Running] = field(default_factory=deque)  # in the order they started (and finish)
    in_queue: float = 0.0  # the requests in ``queue`` and in ``batch``: what ``waiting`` and ``running`` say
    in_batch: float = 0.0


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
                "vllm:request_num_preemptions": _Histogram(NUM_PREEMPTIONS_BUCKETS),
                "vllm:request_prefill_kv_computed_tokens": _Histogram(token_buckets),
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
                self._step(state, arriving * share, self._at, dt, c)
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
                self._enqueue(state, n * share, self._at)
                self._admit(state, self._at, c)
                self._publish(state, c)

    def _step(self, s: ModelState, arrivals: float, now: float, dt: float, c: MockEngineConfig) -> None:
        """One step: the batch runs from ``now`` to ``end = now + dt``, generating its tokens and finishing
        ``running / service_time_s`` requests per second, the longest-running first; at ``end`` the finished
        ones are counted, clients give up, the step's arrivals join the queue and the batch takes what it has
        room for."""
        # (under one request left, it finishes at one request's pace: a batch empties, never only tends to)
        done = min(s.in_batch, max(1.0, s.in_batch) * dt / c.service_time_s)
        fill = s.in_batch / c.max_num_seqs
        h = s.histograms
        # a running request generates generation_tokens over its service_time_s: as many tokens a step as
        # the requests it finishes would have generated
        s.generation_tokens += done * c.generation_tokens
        h["vllm:inter_token_latency_seconds"].observe(
            c.itl_s * (1.0 + fill), done * (c.generation_tokens - 1)
        )
        steps = s.in_batch / c.service_time_s * dt * c.generation_tokens / max(1.0, s.in_batch)
        h["vllm:iteration_tokens_total"].observe(max(1.0, s.in_batch), steps)
        end = now + dt
        # a caller's change to ``in_system`` since the last step
        added = s.in_system - s.in_queue - s.in_batch
        if added > _EPS:
            self._enqueue(s, added, end)
        elif added < -_EPS:
            self._drop(s, -added)
        while s.batch and done > _EPS:
            head = s.batch[0]
            n = min(done, head.count)
            head.count -= n
            if head.count <= _EPS:
                s.batch.popleft()
            done -= n
            self._finish(s, n, head, end, c)
        if c.patience_s is not None:
            while s.queue and s.queue[0].arrived + c.patience_s <= end + _TIME_EPS:
                gone = s.queue.popleft().count
                s.in_queue -= gone
                s.abandoned += gone
        if arrivals > 0:
            self._enqueue(s, arrivals, end)
        self._admit(s, end, c)
        self._publish(s, c)

    @staticmethod
    def _enqueue(s: ModelState, n: float, at: float) -> None:
        s.queue.append(_Waiting(n, at))
        s.in_queue += n

    @staticmethod
    def _drop(s: ModelState, n: float) -> None:
        """``n`` requests go, the newest first (the queue's, then the batch's), counted by no series."""
        while s.queue and n > _EPS:
            gone = min(n, s.queue[-1].count)
            s.queue[-1].count -= gone
            if s.queue[-1].count <= _EPS:
                s.queue.pop()
            s.in_queue -= gone
            s.abandoned += gone
            n -= gone
        while s.batch and n > _EPS:
            gone = min(n, s.batch[-1].count)
            s.batch[-1].count -= gone
            if s.batch[-1].count <= _EPS:
                s.batch.pop()
            s.in_batch -= gone
            s.abandoned += gone
            n -= gone

    @staticmethod
    def _admit(s: ModelState, now: float, c: MockEngineConfig) -> None:
        """Move requests from the head of the queue into the batch while it has room: each is prefilled now,
        its prompt counted and its time to first token observed."""
        room = c.max_num_seqs - s.in_batch
        while s.queue and room > _EPS:
            head = s.queue[0]
            take = min(room, head.count)
            head.count -= take
            if head.count <= _EPS:
                s.queue.popleft()
            room -= take
            s.in_queue -= take
            s.in_batch += take
            s.batch.append(_Running(take, head.arrived, now))
            s.started += take
            s.prompt_tokens += take * c.prompt_tokens
            s.histograms["vllm:time_to_first_token_seconds"].observe(now - head.arrived + c.prefill_s, take)

    @staticmethod
    def _finish(s: ModelState, n: float, r: _Running, now: float, c: MockEngineConfig) -> None:
        """``n`` requests of ``r`` finish: counted as finished, and observed as vLLM observes a finished
        request (its wait in the queue among them)."""
        s.in_batch -= n
        s.finished += n
        inference = now - r.started
        prefill = min(c.prefill_s, inference)
        decode = inference - prefill
        h = s.histograms
        h["vllm:e2e_request_latency_seconds"].observe(now - r.arrived, n)
        h["vllm:request_queue_time_seconds"].observe(r.started - r.arrived, n)
        h["vllm:request_inference_time_seconds"].observe(inference, n)
        h["vllm:request_prefill_time_seconds"].observe(prefill, n)
        h["vllm:request_decode_time_seconds"].observe(decode, n)
        h["vllm:request_time_per_output_token_seconds"].observe(
            decode / (c.generation_tokens - 1) if c.generation_tokens > 1 else 0.0, n
        )
        h["vllm:request_num_preemptions"].observe(0.0, n)
        h["vllm:request_prefill_kv_computed_tokens"].observe(c.prompt_tokens * (1.0 - PREFIX_HIT_SHARE), n)
        h["vllm:request_prompt_tokens"].observe(c.prompt_tokens, n)
        h["vllm:request_generation_tokens"].observe(c.generation_tokens, n)
        h["vllm:request_max_num_generation_tokens"].observe(c.generation_tokens, n)
        h["vllm:request_params_n"].observe(1, n)
        h["vllm:request_params_max_tokens"].observe(c.generation_tokens, n)

    @staticmethod
    def _publish(s: ModelState, c: MockEngineConfig) -> None:
        """The gauges, from the queue and the batch."""
        if not s.queue:  # no rounding left behind
            s.in_queue = 0.0
        if not s.batch:
            s.in_batch = 0.0
        s.waiting = s.in_queue
        s.running = s.in_batch
        s.in_system = s.waiting + s.running
        fill = s.running / c.max_num_seqs
        s.kv_cache_usage = min(
            1.0, fill * (c.prompt_tokens + c.generation_tokens / 2) / (c.prompt_tokens + c.generation_tokens)
        )

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


# vLLM's default families (vllm/v1/metrics/loggers.py, perf.py), in the order vLLM 0.32.0 serves them: name,
# help, and what fills it.
_Value = Callable[[ModelState], float]
_PERF = "(for Model Flops Utilization calculations)."
_PERF_COUNTERS: tuple[tuple[str, str, _Value], ...] = (
    (
        "vllm:estimated_flops_per_gpu",
        f"Estimated number of floating point operations per GPU {_PERF}",
        lambda s: 0.0,
    ),
    (
        "vllm:estimated_read_bytes_per_gpu",
        f"Estimated number of bytes read from memory per GPU {_PERF}",
        lambda s: 0.0,
    ),
    (
        "vllm:estimated_write_bytes_per_gpu",
        f"Estimated number of bytes written to memory per GPU {_PERF}",
        lambda s: 0.0,
    ),
)
_WAITING_BY_REASON = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
    "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all "
    "reasons equals vllm:num_requests_waiting."
)
_SLEEP_DOC = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
_CACHED_BY_SOURCE = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
    "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at "
    "admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits."
)
_COUNTERS: tuple[tuple[str, str, _Value], ...] = (
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        lambda s: s.prompt_tokens,
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        lambda s: s.prompt_tokens * PREFIX_HIT_SHARE,
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
)
_PROMPT_BY_SOURCE: dict[str, _Value] = {
    "local_compute": lambda s: s.prompt_tokens - s.prompt_tokens * PREFIX_HIT_SHARE,
    "local_cache_hit": lambda s: s.prompt_tokens * PREFIX_HIT_SHARE,
    "external_kv_transfer": lambda s: 0.0,
}
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
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens)."
    ),
}
_LABELS = ["model_name", "engine"]


def _cache_config(config: MockEngineConfig) -> dict[str, str]:
    """``vllm:cache_config_info``'s labels: vLLM 0.32.0's ``CacheConfig`` fields as ``str()`` writes them."""
    return {
        "block_size": str(config.block_size),
        "gpu_memory_utilization": "0.9",
        "swa_bounded_replay": "True",
        "cache_dtype": "auto",
        "is_attention_free": "False",
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "enable_prefix_caching": "True",
        "prefix_caching_hash_algo": "sha256",
        "prefix_cache_retention_interval": "0",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "use_replayssm": "False",
        "replayssm_buffer_len": "16",
        "use_kda_recoverssm": "False",
        "enable_mamba_shared_prefix_checkpoint": "False",
        "kv_cache_memory_bytes": "None",
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
        "kv_cache_dtype_skip_layers": "[]",
        "user_specified_block_size": "False",
        "_block_size_resolved": "True",
        "num_gpu_blocks": "None",
        "num_cpu_blocks": "None",
        "kv_sharing_fast_prefill": "False",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": "None",
        "kv_cache_size_tokens": "None",
        "effective_attention_block_size": str(config.block_size),
        "hash_block_size": "None",
        "cache_hit_alignment_tokens": "None",
        "prefix_match_unit": "None",
        "mamba_page_size_padded": "None",
        "skip_page_size_padded": "None",
        "engine": "0",
    }


def _created(family: Metric, labels: dict[str, str], created: float) -> None:
    """The ``_created`` sample prometheus_client's default registry writes for each counter and histogram
    series: when the series was made (the engine's start)."""
    family.samples.append(Sample(family.name + "_created", labels, created))


class _VllmCollector(Collector):
    """The families vLLM's ``PrometheusStatLogger`` defines by default, filled from the engine's state (one
    engine index, ``engine="0"``, per model)."""

    def __init__(self, engine: MockEngine) -> None:
        self.engine = engine

    def _counter(
        self, name: str, doc: str, labels: list[str], rows: list[tuple[list[str], float]]
    ) -> CounterMetricFamily:
        counter = CounterMetricFamily(name, doc, labels=labels)
        for values, value in rows:
            counter.add_metric(values, _whole(value), created=self.engine.started)
        return counter

    def collect(self) -> Iterator[Metric]:
        states = list(self.engine.models.values())
        for name, doc, value in _PERF_COUNTERS:
            yield self._counter(name, doc, _LABELS, [([s.name, "0"], value(s)) for s in states])
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels=_LABELS
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=_LABELS
        )
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason", _WAITING_BY_REASON, labels=[*_LABELS, "reason"]
        )
        for s in states:
            running.add_metric([s.name, "0"], float(round(s.running)))
            waiting.add_metric([s.name, "0"], float(round(s.waiting)))
            for reason in WAITING_REASONS:
                by_reason.add_metric(
                    [s.name, "0", reason], float(round(s.waiting)) if reason == "capacity" else 0.0
                )
        yield from (running, waiting, by_reason)
        sleep = GaugeMetricFamily("vllm:engine_sleep_state", _SLEEP_DOC, labels=[*_LABELS, "sleep_state"])
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=_LABELS
        )
        for s in states:
            for state in SLEEP_STATES:
                sleep.add_metric([s.name, "0", state], 1.0 if state == "awake" else 0.0)
            kv.add_metric([s.name, "0"], s.kv_cache_usage)
        yield from (sleep, kv)
        for name, doc, value in _COUNTERS:
            yield self._counter(name, doc, _LABELS, [([s.name, "0"], value(s)) for s in states])
        yield self._counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*_LABELS, "source"],
            [([s.name, "0", source], fill(s)) for s in states for source, fill in _PROMPT_BY_SOURCE.items()],
        )
        yield self._counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            _LABELS,
            [([s.name, "0"], s.prompt_tokens * PREFIX_HIT_SHARE) for s in states],
        )
        yield self._counter(
            "vllm:prompt_tokens_cached_by_source",
            _CACHED_BY_SOURCE,
            [*_LABELS, "source"],
            [
                ([s.name, "0", source], s.prompt_tokens * PREFIX_HIT_SHARE if source == "device" else 0.0)
                for s in states
                for source in CACHE_HIT_SOURCES
            ],
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            _LABELS,
            [([s.name, "0"], s.generation_tokens) for s in states],
        )
        rows: list[tuple[list[str], float]] = []
        for s in states:
            # a tenth end at max_tokens ("length"), the rest at a stop token; none aborted, none in error: the
            # series sum to the whole requests finished (what the agent reads as requests_finished), each
            # never falling
            length = _whole(s.finished * 0.1)
            counts = {"stop": _whole(s.finished) - length, "length": length}
            rows += [([s.name, "0", reason], counts.get(reason, 0.0)) for reason in FINISH_REASONS]
        yield self._counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*_LABELS, "finished_reason"],
            rows,
        )
        yield self._counter(  # the API server's, per model: no engine label
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            [([s.name, reason], 0.0) for s in states for reason in ADMISSION_REASONS],
        )
        for name, doc in _HISTOGRAMS.items():
            family = HistogramMetricFamily(name, doc, labels=_LABELS)
            for s in states:
                hist = s.histograms[name]
                family.add_metric([s.name, "0"], hist.buckets(), hist.sum)
                _created(family, {"model_name": s.name, "engine": "0"}, self.engine.started)
            yield family
        labels = _cache_config(self.engine.config)
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(labels)
        )
        info.add_metric(list(labels.values()), 1.0)
        yield info


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
