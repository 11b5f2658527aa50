"""A workload's cold start, learned from its own pods: how long a new replica takes from being scheduled to
its engine being Ready (image pull, model load, CUDA graphs), the lead a decision needs for its capacity to
arrive when the demand does (``scaleAhead: auto``).

Why learned, not configured: the figure depends on the node (a cached image or not), the model and the
engine's version, and it changes; the pods say it every time one starts.

How: each pod that becomes Ready is one observation, ``ready_at - scheduled_at`` (the PodScheduled
condition's transition, the pod's creation when that is not known; the Ready condition's transition), seen
by the agents and the API's list alike and counted once per pod. The estimate is the median of the
workload's last ``keep`` observations: one pod on a cold node (a 10-minute image pull) does not move it, and
a lasting change (a bigger model) does within ``keep // 2 + 1`` pods. Observations that cannot be right
(not positive, not finite) are ignored; longer than ``MAX_COLD_START_S`` are capped there. Bounded:
``keep`` per workload, at most ``max_workloads`` workloads (the least recently observed forgotten first), and
at most ``max_pods`` pods remembered as counted (each observation of a pod refreshes it, so the pods still
alive, seen again at every list, are never counted twice).

Pure: times are arguments.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from collections.abc import Iterator

__all__ = ["MAX_COLD_START_S", "ColdStarts"]

# One hour: longer than any cold start a scale-ahead could usefully lead by.
MAX_COLD_START_S = 3600.0


class ColdStarts:
    """Per workload (any hashable name, e.g. ``namespace/ScaledObject``), the last ``keep`` cold starts."""

    def __init__(self, keep: int = 9, max_workloads: int = 4096, max_pods: int = 65536) -> None:
        if keep < 1 or max_workloads < 1 or max_pods < 1:
            raise ValueError("keep, max_workloads and max_pods must be at least 1")
        self._keep = keep
        self._max = max_workloads
        self._max_pods = max_pods
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._counted: OrderedDict[tuple[str, str], float] = OrderedDict()  # (workload, pod) -> ready_at

    def observe(self, workload: str, pod: str, scheduled_at: float, ready_at: float) -> bool:
        """Count pod ``pod``'s cold start (Unix seconds in, once per pod); ``True`` if it was counted."""
        seconds = ready_at - scheduled_at
        if not math.isfinite(seconds) or seconds <= 0:
            return False
        key = (workload, pod)
        if self._counted.get(key) == ready_at:
            self._counted.move_to_end(key)
            return False
        self._counted[key] = ready_at  # a new Ready transition of the same pod (a restart) counts again
        self._counted.move_to_end(key)
        while len(self._counted) > self._max_pods:
            self._counted.popitem(last=False)
        values = self._seen.get(workload)
        if values is None:
            values = self._seen[workload] = deque(maxlen=self._keep)
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)
        values.append(min(seconds, MAX_COLD_START_S))
        self._seen.move_to_end(workload)
        return True

    def seconds(self, workload: str) -> float | None:
        """The workload's cold start (the median of its last observations), ``None`` before its first."""
        values = self._seen.get(workload)
        return statistics.median(values) if values else None

    def __iter__(self) -> Iterator[tuple[str, float]]:
        """``(workload, seconds)`` for every workload with an observation (for the gauge)."""
        for workload, values in list(self._seen.items()):
            if values:
                yield workload, statistics.median(values)

    def forget(self, workload: str) -> None:
        self._seen.pop(workload, None)
