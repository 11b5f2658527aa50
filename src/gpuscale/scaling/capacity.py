"""What one replica of a workload really serves, learned from its own pods while requests wait on them.

Why: a demand is turned into replicas by dividing it by what one replica serves. The user's figure
(``targetValue`` for ``request_rate``, ``replicaRate`` for the request path) is an assumption; a new model
version, longer prompts or a slower GPU make a replica serve less, and then a rate trigger stops short and
stays there while the queue grows. A replica with requests waiting on it serves as fast as it can: its rate
then is its capacity.

How: ``saturated_rate`` is the workload's served rate per Ready pod over the trigger's window, counted over
the pods on which requests waited at every reading of the window (finished less aborted:
``engine.served_rate``); ``None`` when no pod waited throughout. ``Capacities`` keeps, per workload, the
last ``keep`` such figures, at most one every ``spacing`` seconds (a burst is not nine observations of the
same second), and answers their median: one slow second does not move it, a lasting change does within
``keep // 2 + 1`` observations. Bounded in workloads like ``coldstart.ColdStarts``.

Pure: times are arguments.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence

from .engine import EngineSeries, gauge, in_window, served_rate
from .metadata import TriggerMetadata, derived

__all__ = ["Capacities", "saturated_rate"]


def saturated_rate(
    md: TriggerMetadata, engines: Sequence[EngineSeries], ready: frozenset[str], now: float
) -> float | None:
    """Requests served per second per Ready pod, over the pods of ``ready`` on which requests waited at
    every reading of ``md``'s window (at least two readings); ``None`` when there is no such pod, or one of
    them has no finished counter."""
    window = max(md.window, 2.0)
    rates: list[float] = []
    md = derived(md, window=window)
    for e in engines:
        if e.pod not in ready or e.departed or e.missing is not None or not e.samples:
            continue
        recent = in_window(e.samples, now, window)
        if len(recent) < 2:
            continue
        waiting = [gauge(s, "waiting", md.model) for s in recent]
        if any(w is None or w < 1.0 for w in waiting):
            continue
        rate = served_rate(md, e.samples, now)
        if rate is None:
            return None
        rates.append(rate)
    if not rates:
        return None
    return math.fsum(rates) / len(rates)


class Capacities:
    """Per workload (any hashable name, e.g. ``namespace/ScaledObject``), a replica's learned capacity."""

    def __init__(self, keep: int = 9, spacing: float = 10.0, max_workloads: int = 4096) -> None:
        if keep < 1 or max_workloads < 1 or spacing < 0:
            raise ValueError("keep and max_workloads must be at least 1, spacing at least 0")
        self._keep, self._spacing, self._max = keep, spacing, max_workloads
        self._seen: OrderedDict[str, tuple[float, deque[float]]] = OrderedDict()

    def due(self, workload: str, now: float) -> bool:
        """Whether an observation at ``now`` would be counted (none within ``spacing`` before it): callers
        skip computing one that would not."""
        entry = self._seen.get(workload)
        return entry is None or abs(now - entry[0]) >= self._spacing

    def observe(self, workload: str, now: float, rate: float) -> bool:
        """Count ``rate`` (requests/s one replica served while saturated) at ``now``; ``True`` if counted
        (not within ``spacing`` of the last one, finite and positive)."""
        if not math.isfinite(rate) or rate <= 0:
            return False
        entry = self._seen.get(workload)
        if entry is not None and abs(now - entry[0]) < self._spacing:
            return False
        values = entry[1] if entry is not None else deque(maxlen=self._keep)
        values.append(rate)
        self._seen[workload] = (now, values)
        self._seen.move_to_end(workload)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True

    def rate(self, workload: str) -> float | None:
        """The median of the workload's last observations; ``None`` before its first."""
        entry = self._seen.get(workload)
        return statistics.median(entry[1]) if entry is not None and entry[1] else None

    def __iter__(self) -> Iterator[tuple[str, float]]:
        """``(workload, requests/s)`` for every workload with an observation (for the gauge)."""
        for workload, (_, values) in list(self._seen.items()):
            if values:
                yield workload, statistics.median(values)

    def forget(self, workload: str) -> None:
        self._seen.pop(workload, None)
