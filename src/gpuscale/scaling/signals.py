"""What the decisions read: the per-pod engine values of one call (``Signals``, each computed once), the
demand the engines are asked over what they serve, the workload's total and its forecast one cold start
ahead, the backlog, whether the queue grows, and the request rate one replica is to serve.

Pure: time is an argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .aggregate import Evaluation
from .engine import EngineSeries, gauge, in_window, pod_value, pod_value_at, served_rate
from .forecast import Forecast, forecast
from .metadata import TriggerMetadata, derived
from .view import LOOKBACK_MAX_S

__all__ = [
    "LOOKBACK_POINTS",
    "Signals",
    "backlog",
    "demand_ratio",
    "engine_total",
    "forecast_ahead",
    "queue_grows",
    "replica_rate",
    "there",
]

# The forecast looks back over the cold start (at most ``view.LOOKBACK_MAX_S``) in at most this many steps.
LOOKBACK_POINTS = 24


class Signals:
    """The per-pod engine values of one ``answer`` call at ``now``, each computed once however many steps
    ask for it (keyed by the metadata that says what to compute and the pod)."""

    __slots__ = ("_now", "_served", "_values")

    def __init__(self, now: float) -> None:
        self._now = now
        self._values: dict[tuple[TriggerMetadata, str, bool], float | None] = {}
        self._served: dict[tuple[TriggerMetadata, str], float | None] = {}

    def value(self, md: TriggerMetadata, e: EngineSeries) -> float | None:
        """``engine.pod_value`` of ``md`` over ``e``'s readings at ``now``."""
        key = (md, e.pod, e.departed)
        if key not in self._values:
            self._values[key] = pod_value(md, e.samples, self._now)
        return self._values[key]

    def served(self, md: TriggerMetadata, e: EngineSeries) -> float | None:
        """``engine.served_rate`` of ``e`` over ``md``'s window at ``now``."""
        key = (md, e.pod)
        if key not in self._served:
            self._served[key] = served_rate(md, e.samples, self._now)
        return self._served[key]


def demand_ratio(
    md: TriggerMetadata,
    engines: Sequence[EngineSeries],
    pods: frozenset[str],
    signals: Signals,
) -> float | None:
    """What the engines of ``pods`` are asked over what they serve, over the trigger's window: the requests
    arriving per second (``request_rate``'s arrivals: finished + the growth of those waiting and running)
    over those served per second (finished less aborted: a queue at its timeout sheds requests as aborts,
    which are not served), summed over the pods. ``None`` unless every one of ``pods`` has an engine that
    says both (the finished counter and the queue gauges), some request was served and some are waiting
    (with nothing waiting the engines keep up: whatever the counters say, the GPUs are not what caps the
    answer)."""
    by_pod = {e.pod: e for e in engines if not e.departed}
    arriving = served = waiting = 0.0
    rate_md = derived(md, metric="request_rate")
    for pod in pods:
        e = by_pod.get(pod)
        if e is None or e.missing is not None or not e.samples:
            return None
        a = signals.value(rate_md, e)
        f = signals.served(md, e)
        if a is None or f is None:
            return None
        arriving += a
        served += f
        waiting += gauge(e.samples[-1], "waiting", md.model) or 0.0
    if served <= 0 or waiting <= 0:
        return None
    return arriving / served


def there(e: EngineSeries, t: float) -> bool:
    """Whether a departed pod was still serving at ``t``: up to a reading interval past its last reading (its
    last value must not count on after it left, beside the pods that took its share)."""
    s = e.samples
    if not s:
        return False
    spacing = s[-1].timestamp - s[-2].timestamp if len(s) >= 2 else 0.0
    return t < s[-1].timestamp + spacing


def engine_total(md: TriggerMetadata, engines: Sequence[EngineSeries], signals: Signals, now: float) -> float:
    """The workload's value at ``now`` over ``engines``: the sum of the pods' values (additive metrics;
    the only ones ``scaleAhead`` allows), a pod without one counting nothing."""
    values = [signals.value(md, e) for e in engines if not e.departed or there(e, now)]
    return math.fsum(v for v in values if v is not None)


def forecast_ahead(
    md: TriggerMetadata, engines: Sequence[EngineSeries], now: float, horizon: float, present: float
) -> Forecast:
    """``forecast.forecast`` of the workload's value over the look-back (the cold start, at most
    ``LOOKBACK_MAX_S``, at least two windows), ``LOOKBACK_POINTS`` instants at most (one per reading
    interval at least)."""
    lookback = min(horizon, LOOKBACK_MAX_S)
    lookback = max(lookback, 2 * md.window)
    intervals = [e.samples[-1].timestamp - e.samples[-2].timestamp for e in engines if len(e.samples) >= 2]
    interval = min(intervals) if intervals else 1.0
    step = max(lookback / LOOKBACK_POINTS, interval)
    times: list[float] = []
    t = now - lookback
    while t <= now + 1e-9:
        times.append(t)
        t += step
    values: list[list[float]] = [[] for _ in times]
    for e in engines:
        memo = e.memo.setdefault(md, {}) if e.memo is not None else None
        for i, t in enumerate(times):
            if e.departed and not there(e, t):
                continue
            v = pod_value_at(md, e.samples, t, memo)
            if v is not None:
                values[i].append(v)
    # each instant's sum as engine_total makes it (fsum: exact, whatever the order of the pods)
    points = [(t, math.fsum(vs)) for t, vs in zip(times, values, strict=True)]
    return forecast(points, present, horizon)


def backlog(md: TriggerMetadata, ready: Sequence[EngineSeries], signals: Signals) -> float:
    """The requests waiting on the Ready pods: the mean over the window of each pod's waiting, summed."""
    waiting = derived(md, metric="queue_length")
    values = [signals.value(waiting, e) for e in ready if e.samples]
    return math.fsum(v for v in values if v is not None)


def queue_grows(md: TriggerMetadata, engines: Sequence[EngineSeries], result: Evaluation, now: float) -> bool:
    """Whether the requests waiting on the answer's pods grew over the window (newest over oldest reading)."""
    first = last = 0.0
    for e in engines:
        if e.pod not in result.fresh_pods or e.departed or not e.samples:
            continue
        recent = in_window(e.samples, now, max(md.window, 2.0))
        if len(recent) < 2:
            return False
        a, b = gauge(recent[0], "waiting", md.model), gauge(recent[-1], "waiting", md.model)
        if a is None or b is None:
            return False
        first, last = first + a, last + b
    return last > first


def replica_rate(md: TriggerMetadata, capacity: float | None) -> float | None:
    """Requests/s one replica is to serve, the request path's demand is divided by: ``replicaRate``, else
    ``targetValue`` with ``request_rate`` (the same figure), else the learned ``capacity``; the learned
    capacity where it is less than the figure given (a replica serves less than assumed). ``None``: not
    known (the request path then only wakes the workload and holds its count)."""
    rate = md.replica_rate
    if rate is None and md.metric == "request_rate":
        rate = md.target_value
    if capacity is not None and (rate is None or capacity < rate):
        return capacity  # a replica serves less than assumed: divide by what it serves
    return rate
