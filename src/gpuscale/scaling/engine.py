"""Inference-engine signals over a window: gauges per pod, token rates from counter deltas, latency quantiles
from histogram bucket deltas. Pure: samples and ``now`` in, numbers (or ``None``: missing) out.

Why: an engine exposes counters and histograms counted since it started; a trigger wants what happened in
its ``window`` (generation tokens per second now, TTFT p95 over the last minute). These are the same
computations as PromQL's ``rate`` and ``histogram_quantile(q, increase(…_bucket[window]))``, done on the
agent's samples of one pod.

How:

- The window is the samples with ``now - window < timestamp <= now`` (oldest first, as a pod's history
  keeps them). A rate or a delta needs two samples of it at different times; fewer is ``None``.
- **Restarts.** A counter that goes backwards, or a histogram whose buckets change or whose cumulative
  count falls, means the engine restarted: the computation starts over from that sample, so what came
  before it never counts and a rate is never negative. (Prometheus' ``rate`` instead adds the value after
  the reset, assuming the counter restarted at 0; starting over is more conservative: right after a
  restart the value is missing until two samples follow it.)
- ``model=None`` takes every model of the newest sample in the window: token rates and bucket deltas add up
  over them, waiting and running requests add up, the KV-cache fill is the fullest model's. If any one of
  them lacks the value, the pod's value is ``None``: a missing part never reads as 0.
- ``quantile`` is Prometheus' ``histogram_quantile`` (``promql/quantile.go`` ``bucketQuantile``): find the
  bucket holding the rank ``q * count``, interpolate linearly within it (from 0 for the first bucket when
  its bound is positive); a rank in the ``+Inf`` bucket answers the highest finite bound. No observation in
  the window is ``None``: no latency was measured, which is not a latency of 0.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..model import BucketCounts, EngineSample, ModelSignals
from .metadata import TriggerMetadata

__all__ = [
    "CounterField",
    "EngineSeries",
    "GaugeField",
    "HistogramField",
    "PodValueMemo",
    "arrival_rate",
    "counter_rate",
    "gauge",
    "histogram_delta",
    "histogram_quantile",
    "in_window",
    "merge",
    "pod_value",
    "pod_value_at",
    "quantile",
    "served_rate",
]

# The signals of model.ENGINE_SIGNALS by kind, spelled out for the type checker (which cannot derive a
# Literal); tests/test_signal_table.py holds them equal to it.
GaugeField = Literal["waiting", "running", "kv_cache_usage"]
CounterField = Literal[
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
    "requests_aborted",
    "queue_time_sum",
    "queue_time_count",
]
HistogramField = Literal["ttft", "itl"]


def _timestamp(sample: EngineSample) -> float:
    return sample.timestamp


def in_window(samples: Sequence[EngineSample], now: float, window: float) -> list[EngineSample]:
    """The samples with ``now - window < timestamp <= now``, oldest first (``samples`` are: a binary
    search finds the window's ends)."""
    lo = bisect.bisect_right(samples, now - window, key=_timestamp)
    hi = bisect.bisect_right(samples, now, lo=lo, key=_timestamp)
    if isinstance(samples, list | tuple):
        return list(samples[lo:hi])
    return [samples[i] for i in range(lo, hi)]


def _models(newest: EngineSample, model: str | None) -> list[str]:
    return [m.model for m in newest.models] if model is None else [model]


def gauge(sample: EngineSample, field: GaugeField, model: str | None = None) -> float | None:
    """One sample's value for the pod (``model=None``: waiting and running summed over its models, the
    KV-cache fill of the fullest) or for one model; ``None`` when a part is absent or there is no model."""
    values: list[float] = []
    for name in _models(sample, model):
        m = sample.model(name)
        value = getattr(m, field) if m is not None else None
        if value is None:
            return None
        values.append(value)
    if not values:
        return None
    return max(values) if field == "kv_cache_usage" else math.fsum(values)


def _series(samples: Sequence[EngineSample], name: str) -> list[tuple[float, ModelSignals | None]]:
    return [(s.timestamp, s.model(name)) for s in samples]


def _restart(points: Sequence[tuple[float, ...]], counters: tuple[int, ...]) -> int:
    """The index of the first reading since the engine last restarted: the last at which one of the
    ``counters`` (tuple positions) went backwards; 0 when none did."""
    start = 0
    for i in range(1, len(points)):
        if any(points[i][c] < points[i - 1][c] for c in counters):
            start = i
    return start


def _model_rate(samples: Sequence[EngineSample], name: str, field: CounterField) -> float | None:
    points: list[tuple[float, float]] = []
    for t, m in _series(samples, name):
        value: float | None = getattr(m, field) if m is not None else None
        if value is not None:
            points.append((t, value))
    points = points[_restart(points, (1,)) :]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    (t0, v0), (t1, v1) = points[0], points[-1]
    return (v1 - v0) / (t1 - t0)


def counter_rate(
    samples: Sequence[EngineSample], now: float, window: float, field: CounterField, model: str | None = None
) -> float | None:
    """Per second over the window (``generation_tokens``: the engine's tokens/s), summed over the models
    when ``model`` is ``None``."""
    return _summed(samples, now, window, model, lambda picked, name: _model_rate(picked, name, field))


def _summed(
    samples: Sequence[EngineSample],
    now: float,
    window: float,
    model: str | None,
    per_model: Callable[[Sequence[EngineSample], str], float | None],
) -> float | None:
    """``per_model`` over the window's readings, summed over the newest reading's models (or ``model``);
    ``None`` when the window is empty or any model's figure is."""
    picked = in_window(samples, now, window)
    if not picked:
        return None
    names = _models(picked[-1], model)
    if not names:
        return None
    total = 0.0
    for name in names:
        rate = per_model(picked, name)
        if rate is None:
            return None
        total += rate
    return total


def _model_arrivals(samples: Sequence[EngineSample], name: str) -> float | None:
    """Requests arriving per second at one model: finished ones plus the growth of those waiting and running
    (a request arrives, waits, runs, finishes), between the first and the newest reading that has all three
    since the engine last restarted (its finished counter went backwards); never negative."""
    points: list[tuple[float, float, float]] = []
    for s in samples:
        m = s.model(name)
        if m is None or m.requests_finished is None or m.waiting is None or m.running is None:
            continue
        points.append((s.timestamp, m.requests_finished, m.waiting + m.running))
    points = points[_restart(points, (1,)) :]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    (t0, f0, i0), (t1, f1, i1) = points[0], points[-1]
    counted = max(0.0, (f1 - f0 + i1 - i0) / (t1 - t0))
    joined = _model_joining(samples, name)
    # the queue's own estimate only where the counters miss requests by more than an estimate's noise (the
    # HPA's 10 % tolerance): while nothing is lost they are exact, and Little's law over a window is not
    if joined is not None and joined > counted * (1.0 + _JOINING_MARGIN):
        return joined
    return counted


_JOINING_MARGIN = 0.1


def _model_joining(samples: Sequence[EngineSample], name: str) -> float | None:
    """Requests joining one model's queue per second by Little's law: the mean number waiting over the mean
    time the requests that left the queue had waited (``queue_time_sum``/``_count`` deltas, since the count
    last went back). It holds where the finished counter misses requests: released vLLM counts none a
    client abandons (vllm-project/vllm#31503), so a queue shedding at its clients' timeout reads, in
    finished plus growth, only what is served. ``None`` without the queue-time counters, or when no request
    left the queue or none waits."""
    points: list[tuple[float, float, float]] = []
    waiting: list[float] = []
    for s in samples:
        m = s.model(name)
        if m is None or m.queue_time_sum is None or m.queue_time_count is None or m.waiting is None:
            continue
        points.append((s.timestamp, m.queue_time_sum, m.queue_time_count))
        waiting.append(m.waiting)
    start = _restart(points, (1, 2))
    points, waiting = points[start:], waiting[start:]
    if len(points) < 2:
        return None
    left = points[-1][2] - points[0][2]
    waited = points[-1][1] - points[0][1]
    mean_waiting = math.fsum(waiting) / len(waiting)
    if left <= 0 or waited <= 0 or mean_waiting <= 0:
        return None
    return mean_waiting / (waited / left)


def arrival_rate(
    samples: Sequence[EngineSample], now: float, window: float, model: str | None = None
) -> float | None:
    """Requests arriving per second over the window (``_model_arrivals``), summed over the models when
    ``model`` is ``None``; ``None`` when a model lacks the finished counter or a queue gauge."""
    return _summed(samples, now, window, model, _model_arrivals)


def _restarted(before: BucketCounts, after: BucketCounts) -> bool:
    return before.bounds != after.bounds or any(
        a < b for a, b in zip(after.counts, before.counts, strict=True)
    )


def _model_delta(samples: Sequence[EngineSample], name: str, field: HistogramField) -> BucketCounts | None:
    points: list[tuple[float, BucketCounts]] = []
    for t, m in _series(samples, name):
        h = getattr(m, field) if m is not None else None
        if h is not None:
            points.append((t, h))
    start = 0
    for i in range(1, len(points)):
        if _restarted(points[i - 1][1], points[i][1]):
            start = i
    points = points[start:]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    first, last = points[0][1], points[-1][1]
    return BucketCounts(last.bounds, tuple(b - a for a, b in zip(first.counts, last.counts, strict=True)))


def histogram_delta(
    samples: Sequence[EngineSample],
    now: float,
    window: float,
    field: HistogramField,
    model: str | None = None,
) -> BucketCounts | None:
    """The observations of the window, per bucket (cumulative), merged over the models when ``model`` is
    ``None``. Merge the deltas of several pods with ``merge`` for a workload's quantile."""
    picked = in_window(samples, now, window)
    if not picked:
        return None
    deltas: list[BucketCounts] = []
    for name in _models(picked[-1], model):
        delta = _model_delta(picked, name, field)
        if delta is None:
            return None
        deltas.append(delta)
    return merge(deltas)


def merge(histograms: Iterable[BucketCounts]) -> BucketCounts | None:
    """Bucket-wise sum; ``None`` when there is none, or their buckets differ (they cannot be added)."""
    items = list(histograms)
    if not items:
        return None
    bounds = items[0].bounds
    if any(h.bounds != bounds for h in items[1:]):
        return None
    return BucketCounts(bounds, tuple(math.fsum(c) for c in zip(*(h.counts for h in items), strict=True)))


def quantile(q: float, histogram: BucketCounts) -> float | None:
    """Prometheus' ``histogram_quantile(q, …)`` of cumulative bucket counts; ``None`` where it answers NaN:
    no observation, fewer than two buckets, no ``+Inf`` bucket, a rank of 0 in an empty first bucket
    (``tests/scaling/test_engine_quantile_prometheus.py`` holds it to a real Prometheus)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q:g} must be between 0 and 1")
    bounds, counts = histogram.bounds, list(histogram.counts)
    if len(bounds) < 2 or bounds[-1] != math.inf or len(counts) != len(bounds):
        return None
    for i in range(1, len(counts)):  # promql's ensureMonotonic
        counts[i] = max(counts[i], counts[i - 1])
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0 if b == 0 else bounds[b - 1]
    end, count = bounds[b], counts[b]
    if b > 0:
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count) if count > 0 else None  # 0/0: Prometheus says NaN


def histogram_quantile(
    samples: Sequence[EngineSample],
    now: float,
    window: float,
    field: HistogramField,
    q: float,
    model: str | None = None,
) -> float | None:
    """``quantile`` of the window's ``histogram_delta`` (TTFT p95: ``field="ttft", q=0.95``)."""
    delta = histogram_delta(samples, now, window, field, model)
    return None if delta is None else quantile(q, delta)


# ----- a trigger over a workload's engines -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EngineSeries:
    """What the scaler holds of one of the workload's pods' engine: its readings (oldest first) and, when its
    newest scrape failed (or the pod has no endpoint, or its agent reads no engines), why: ``missing``.
    ``departed``: a pod deleted within the forecast's look-back, kept only for what the workload did then
    (a scale-down must not read as a rise: without the departed pods' share the past would look lower)."""

    pod: str
    samples: Sequence[EngineSample]
    missing: str | None = None
    departed: bool = False
    # Where the caller keeps the pod's readings from one call to the next (the simulator does), its values
    # already computed, per metadata and instant: ``pod_value_at`` reuses a value only while every reading
    # of its window is still held and no later one can join it, so the answers are the same with or without.
    memo: PodValueMemo | None = field(default=None, compare=False, repr=False)


PodValueMemo = dict[TriggerMetadata, dict[float, float | None]]


def pod_value_at(
    md: TriggerMetadata, samples: Sequence[EngineSample], now: float, memo: dict[float, float | None] | None
) -> float | None:
    """``pod_value(md, samples, now)``, from ``memo`` (one metadata's values by instant) where it holds it.
    A value is final once the readings reach past ``now`` (none later can fall in its window) and the oldest
    held is no younger than its window's start (none of the window was dropped); only a final one is kept,
    and one is reused only while both still hold."""
    if memo is None or not samples:
        return pod_value(md, samples, now)
    final = samples[-1].timestamp >= now and samples[0].timestamp <= now - md.stale_after
    if not final:
        return pod_value(md, samples, now)
    try:
        return memo[now]
    except KeyError:
        value = memo[now] = pod_value(md, samples, now)
        return value


def _model_served(samples: Sequence[EngineSample], name: str) -> float | None:
    """Requests one model served per second: finished less aborted (an absent aborted counter: none),
    between the first and the newest reading with the finished counter since either counter went back (an
    engine restart starts both over); never negative."""
    points: list[tuple[float, float, float]] = []
    for s in samples:
        m = s.model(name)
        if m is None or m.requests_finished is None:
            continue
        points.append((s.timestamp, m.requests_finished, m.requests_aborted or 0.0))
    points = points[_restart(points, (1, 2)) :]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    (t0, f0, a0), (t1, f1, a1) = points[0], points[-1]
    return max(0.0, (f1 - f0 - (a1 - a0)) / (t1 - t0))


def served_rate(md: TriggerMetadata, samples: Sequence[EngineSample], now: float) -> float | None:
    """One pod's requests served per second over ``md``'s window (the fresh readings, at least the newest
    two), summed over its models (or ``md.model``): finished less aborted (``_model_served``); ``None``
    when a model's engine has no finished counter."""
    fresh = in_window(samples, now, md.stale_after)
    if not fresh:
        return None
    return _summed(fresh, now, max(md.window, _two_samples(fresh, now)), md.model, _model_served)


def pod_value(md: TriggerMetadata, samples: Sequence[EngineSample], now: float) -> float | None:
    """One pod's value of an engine metric, or ``None`` (its engine did not say: missing). Gauges are the
    mean of the window's readings (the newest fresh one when none is that young, as GPU samples are
    smoothed); rates and latencies come from the window's counter and bucket deltas (``request_rate``: the
    arrivals, ``arrival_rate``). A latency over a window
    in which no request finished is 0: the engine answered, and nothing waited."""
    fresh = in_window(samples, now, md.stale_after)
    if not fresh:
        return None
    metric, model = md.metric, md.model
    if metric in ("queue_length", "requests_in_flight", "kv_cache_usage"):
        recent = in_window(fresh, now, md.window) or fresh[-1:]
        values: list[float] = []
        for s in recent:
            if metric == "kv_cache_usage":
                v = gauge(s, "kv_cache_usage", model)
            else:
                v = gauge(s, "waiting", model)
                if v is not None and metric == "requests_in_flight":
                    running = gauge(s, "running", model)
                    v = None if running is None else v + running
            if v is not None:
                values.append(v)
        return math.fsum(values) / len(values) if values else None
    if metric == "generation_tokens_per_second":
        return counter_rate(fresh, now, max(md.window, _two_samples(fresh, now)), "generation_tokens", model)
    if metric == "request_rate":
        return arrival_rate(fresh, now, max(md.window, _two_samples(fresh, now)), model)
    field: HistogramField = "itl" if metric == "itl_p95" else "ttft"
    q = 0.5 if metric == "ttft_p50" else 0.95
    delta = histogram_delta(fresh, now, max(md.window, _two_samples(fresh, now)), field, model)
    if delta is None:
        return None
    if delta.total <= 0:
        # no request finished in the window: nothing waited (0), unless requests are waiting: then the
        # engine is stuck, and its latency is not known (missing, never a 0)
        waiting = gauge(fresh[-1], "waiting", model)
        return 0.0 if waiting == 0 else None
    return quantile(q, delta)


def _two_samples(samples: Sequence[EngineSample], now: float) -> float:
    """A window reaching back from ``now`` just past the second newest reading (a rate needs two)."""
    if len(samples) < 2:
        return 0.0
    return now - samples[-2].timestamp + 1e-6
