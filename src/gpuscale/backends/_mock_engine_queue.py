"""The mock vLLM engine's queue model: each model a fluid FIFO queue of cohorts, stepped in time.

Each model is a fluid FIFO queue of cohorts (the requests that arrived in one 0.1 s step). Requests arrive at
``demand(t)`` per second (the pod's share, split between its models by ``weights``), or all at once through
``arrive``; up to ``max_num_seqs`` run at once, the batch finishing ``running / service_time_s`` requests per
second (the longest-running first: a request runs ``service_time_s`` while the batch is full), so a model
serves at most ``max_num_seqs / service_time_s`` requests per second. Above that the queue
(``vllm:num_requests_waiting``) grows; the KV cache fills with the running batch; inter-token latency rises
with the batch. Each series moves when vLLM moves it:

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
itself, so a mean read from ``_sum / _count`` is the value). Pure: the engine (``mock_engine``) owns the clock
and calls ``step`` in steps of at most ``STEP_S``, and the exposition (``_mock_engine_families``) reads the
state.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "CACHE_HIT_SOURCES",
    "FINISH_REASONS",
    "ITL_BUCKETS",
    "PREFIX_HIT_SHARE",
    "REQUEST_LATENCY_BUCKETS",
    "SLEEP_STATES",
    "STEP_S",
    "TTFT_BUCKETS",
    "WAITING_REASONS",
    "MockEngineConfig",
    "ModelState",
    "admit",
    "build_1_2_5_buckets",
    "enqueue",
    "new_model",
    "publish",
    "step",
    "whole",
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
PREFIX_HIT_SHARE = 0.3  # of the prompt tokens, served from the prefix cache
_SPREAD = ((0.7, 0.25), (1.0, 0.5), (1.4, 0.25))  # (factor, share) of each observation
STEP_S = 0.1  # seconds: the longest step of the model
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
            out.append(("+Inf" if bound == math.inf else _le(bound), whole(cumulative)))
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


def whole(value: float) -> float:
    """A count as the engine has it: whole requests, whole tokens."""
    return float(math.floor(value + 1e-9))


def new_model(name: str, config: MockEngineConfig) -> ModelState:
    """A model's state before any request: empty queue and batch, vLLM's histograms with its buckets."""
    token_buckets = build_1_2_5_buckets(config.max_model_len)
    state = ModelState(name)
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
    return state


def step(s: ModelState, arrivals: float, now: float, dt: float, c: MockEngineConfig) -> None:
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
    h["vllm:inter_token_latency_seconds"].observe(c.itl_s * (1.0 + fill), done * (c.generation_tokens - 1))
    steps = s.in_batch / c.service_time_s * dt * c.generation_tokens / max(1.0, s.in_batch)
    h["vllm:iteration_tokens_total"].observe(max(1.0, s.in_batch), steps)
    end = now + dt
    # a caller's change to ``in_system`` since the last step
    added = s.in_system - s.in_queue - s.in_batch
    if added > _EPS:
        enqueue(s, added, end)
    elif added < -_EPS:
        _drop(s, -added)
    while s.batch and done > _EPS:
        head = s.batch[0]
        n = min(done, head.count)
        head.count -= n
        if head.count <= _EPS:
            s.batch.popleft()
        done -= n
        _finish(s, n, head, end, c)
    if c.patience_s is not None:
        while s.queue and s.queue[0].arrived + c.patience_s <= end + _TIME_EPS:
            gone = s.queue.popleft().count
            s.in_queue -= gone
            s.abandoned += gone
    if arrivals > 0:
        enqueue(s, arrivals, end)
    admit(s, end, c)
    publish(s, c)


def enqueue(s: ModelState, n: float, at: float) -> None:
    s.queue.append(_Waiting(n, at))
    s.in_queue += n


def _drop(s: ModelState, n: float) -> None:
    """``n`` requests go, the newest first (the queue's, then the batch's), counted by no series."""
    cohorts: deque[_Waiting] | deque[_Running]
    for cohorts, queued in ((s.queue, True), (s.batch, False)):
        while cohorts and n > _EPS:
            newest = cohorts[-1]
            gone = min(n, newest.count)
            newest.count -= gone
            if newest.count <= _EPS:
                cohorts.pop()
            if queued:
                s.in_queue -= gone
            else:
                s.in_batch -= gone
            s.abandoned += gone
            n -= gone


def admit(s: ModelState, now: float, c: MockEngineConfig) -> None:
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


def publish(s: ModelState, c: MockEngineConfig) -> None:
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
