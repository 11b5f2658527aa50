"""Per-policy figures from a timeline: cost, shortfall, utilization, stability, reaction time.

Pure. Definitions (also in docs/simulator.md):

- ``gpu_hours``: every pod that exists (Pending, loading or Ready) holds its GPUs: sum(pods) * gpus / 3600.
- ``seconds_over_capacity`` / ``share_of_time_over_capacity``: seconds where demand > Ready capacity.
- ``share_of_demand_unserved``: the requests never started (abandoned after waiting ``maxQueueSeconds``, or
  still waiting when the run ends) / sum(demand). With ``maxQueueSeconds`` 0 (no queue) this is
  sum(max(0, demand - capacity)) / sum(demand).
- ``p95_queueing_delay``: 95th percentile (nearest rank, weighted by requests) of the seconds each request
  waited before it started, an abandoned one counted at ``maxQueueSeconds``; ``peak_waiting``: the most
  requests waiting at once.
- ``p95_utilization``: 95th percentile (nearest rank) of the Ready pods' utilization, over seconds with any.
- ``scale_events``: changes of the desired replica count; ``direction_changes``: an up after a down or a
  down after an up.
- ``time_to_first_scale_up``: seconds from the step (``step_at``) to the first increase of desired replicas.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .policy import Timeline

__all__ = ["Summary", "direction_changes", "summarize", "weighted_percentile"]


@dataclass(frozen=True)
class Summary:
    policy: str
    gpu_hours: float
    seconds_over_capacity: int
    share_of_time_over_capacity: float
    share_of_demand_unserved: float
    p95_queueing_delay: float
    peak_waiting: float
    p95_utilization: float | None
    mean_utilization: float | None
    scale_events: int
    scale_ups: int
    scale_downs: int
    direction_changes: int
    max_replicas: int
    step_at: int | None
    time_to_first_scale_up: int | None
    time_to_capacity: int | None

    def as_dict(self) -> dict[str, object]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _changes(desired: tuple[int, ...]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(desired) if b != a]


def direction_changes(desired: tuple[int, ...]) -> int:
    signs = [1 if c > 0 else -1 for c in _changes(desired)]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def weighted_percentile(histogram: tuple[tuple[int, float], ...], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of values given as (value, weight) sorted by value; 0 when
    there is no weight."""
    total = math.fsum(w for _, w in histogram)
    if total <= 0:
        return 0.0
    rank, seen = q * total, 0.0
    for value, weight in histogram:
        seen += weight
        if seen >= rank - 1e-9 * total:
            return float(value)
    return float(histogram[-1][0])


def summarize(tl: Timeline, gpus_per_replica: int, step_at: int | None) -> Summary:
    n = len(tl.demand)
    over = sum(1 for d, c in zip(tl.demand, tl.capacity, strict=True) if d > c + 1e-9)
    total = math.fsum(tl.demand)
    unserved = math.fsum(tl.unserved) + tl.waiting_at_end
    utils = sorted(u for u in tl.utilization if not math.isnan(u))
    p95 = utils[max(0, math.ceil(0.95 * len(utils)) - 1)] if utils else None
    changes = _changes(tl.desired)
    first_up: int | None = None
    to_capacity: int | None = None
    if step_at is not None:
        for t in range(max(step_at, 1), n):
            if tl.desired[t] > tl.desired[t - 1]:
                first_up = t - step_at
                break
        for t in range(step_at, n):
            if tl.capacity[t] + 1e-9 >= tl.demand[t]:
                to_capacity = t - step_at
                break
    return Summary(
        policy=tl.policy,
        gpu_hours=sum(tl.pods) * gpus_per_replica / 3600,
        seconds_over_capacity=over,
        share_of_time_over_capacity=over / n if n else 0.0,
        share_of_demand_unserved=unserved / total if total > 0 else 0.0,
        p95_queueing_delay=weighted_percentile(tl.delays, 0.95),
        peak_waiting=max(tl.waiting, default=0.0),
        p95_utilization=p95,
        mean_utilization=sum(utils) / len(utils) if utils else None,
        scale_events=len(changes),
        scale_ups=sum(1 for c in changes if c > 0),
        scale_downs=sum(1 for c in changes if c < 0),
        direction_changes=direction_changes(tl.desired),
        max_replicas=max(tl.desired, default=0),
        step_at=step_at,
        time_to_first_scale_up=first_up,
        time_to_capacity=to_capacity,
    )
