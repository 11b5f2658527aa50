"""The workload: a demand trace, GPU capacity per replica, pod start-up, and what its GPUs report.

Pure. A pod is created Pending, runs (model loading, GPU busy 0 %, not Ready) after
``provisioning_seconds``, and is Ready ``load_seconds`` later. Ready pods share the demand evenly; each one's
GPU utilization is ``min(100, 100 * demand / (ready * capacity_per_replica))``. Scale-down deletes pods as a
ReplicaSet does: Pending first, then not Ready, then the newest; a deleted pod holds its GPUs for
``termination_seconds`` more (GPU-hours), and nothing counts it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ConstantDemand",
    "DemandShape",
    "DiurnalDemand",
    "Observation",
    "Pod",
    "PointsDemand",
    "SpikeDemand",
    "StepDemand",
    "Workload",
    "demand_series",
    "observe",
    "scale_pods",
    "step_time",
]


@dataclass(frozen=True)
class Workload:
    name: str
    demand_unit: Literal["requests/s", "gpu-seconds/s"]
    capacity_per_replica: float
    gpus_per_replica: int = 1
    provisioning_seconds: int = 0
    load_seconds: int = 60
    initial_replicas: int = 1
    # a deleted pod keeps its GPUs this long (graceful shutdown), serving nothing and counted by no
    # controller: the HPA ignores pods being deleted, and so do the agents
    termination_seconds: int = 0


@dataclass(frozen=True)
class ConstantDemand:
    value: float

    def at(self, t: int) -> float:
        return self.value


@dataclass(frozen=True)
class StepDemand:
    """``before`` until ``at``, then ``after`` (back to ``before`` from ``until`` when set)."""

    before: float
    after: float
    at_seconds: int
    until_seconds: int | None = None

    def at(self, t: int) -> float:
        if t < self.at_seconds or (self.until_seconds is not None and t >= self.until_seconds):
            return self.before
        return self.after


@dataclass(frozen=True)
class SpikeDemand:
    """``base`` (often 0: idle), ``value`` from ``at`` for ``duration`` seconds."""

    base: float
    value: float
    at_seconds: int
    duration_seconds: int

    def at(self, t: int) -> float:
        return self.value if self.at_seconds <= t < self.at_seconds + self.duration_seconds else self.base


@dataclass(frozen=True)
class DiurnalDemand:
    """A cosine day: ``max`` at ``peak_at`` seconds, ``min`` half a period away."""

    min: float
    max: float
    period_seconds: int = 86400
    peak_at_seconds: int = 50400

    def at(self, t: int) -> float:
        phase = 2 * math.pi * (t - self.peak_at_seconds) / self.period_seconds
        return self.min + (self.max - self.min) * (1 + math.cos(phase)) / 2


@dataclass(frozen=True)
class PointsDemand:
    """``(t, value)`` points, sorted by ``t``; held (``step``) or interpolated (``linear``) between them."""

    points: tuple[tuple[int, float], ...]
    interpolation: Literal["step", "linear"] = "step"

    def at(self, t: int) -> float:
        times = [p[0] for p in self.points]
        i = bisect.bisect_right(times, t) - 1
        if i < 0:
            return self.points[0][1]
        if self.interpolation == "step" or i + 1 >= len(self.points):
            return self.points[i][1]
        (t0, v0), (t1, v1) = self.points[i], self.points[i + 1]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


DemandShape = ConstantDemand | StepDemand | SpikeDemand | DiurnalDemand | PointsDemand


def demand_series(shape: DemandShape, duration: int) -> tuple[float, ...]:
    return tuple(max(0.0, shape.at(t)) for t in range(duration))


def step_time(shape: DemandShape, series: tuple[float, ...]) -> int | None:
    """When "the step" happens, for time-to-first-scale-up: the shape's own time for step and spike, else
    the first second demand rises by more than 20 % of the trace's peak over one minute."""
    if isinstance(shape, StepDemand) and shape.after > shape.before:
        return shape.at_seconds
    if isinstance(shape, SpikeDemand) and shape.value > shape.base:
        return shape.at_seconds
    peak = max(series, default=0.0)
    for t in range(60, len(series)):
        if peak > 0 and series[t] - series[t - 60] > 0.2 * peak:
            return t - 60
    return None


@dataclass(frozen=True)
class Pod:
    id: int
    created: int
    running_at: int
    ready_at: int

    @property
    def name(self) -> str:
        return f"pod-{self.id}"


def scale_pods(
    pods: tuple[Pod, ...], replicas: int, now: int, workload: Workload, next_id: int
) -> tuple[tuple[Pod, ...], int]:
    """Create or delete pods so that ``len(pods) == replicas``; returns the pods and the next free id."""
    if replicas > len(pods):
        running_at = now + workload.provisioning_seconds
        new = tuple(
            Pod(next_id + i, now, running_at, running_at + workload.load_seconds)
            for i in range(replicas - len(pods))
        )
        return pods + new, next_id + len(new)
    if replicas < len(pods):

        def keep_rank(p: Pod) -> tuple[int, int, int]:
            # Higher ranks are kept: Running over Pending, Ready over not Ready, older over newer.
            return (int(now >= p.running_at), int(now >= p.ready_at), -p.created)

        keep = sorted(pods, key=keep_rank, reverse=True)[:replicas]
        kept_ids = {p.id for p in keep}
        return tuple(p for p in pods if p.id in kept_ids), next_id
    return pods, next_id


@dataclass(frozen=True)
class Observation:
    """The true state at one second: demand, and the GPU utilization each Running pod reports
    (``util`` for Ready pods, 0 for loading ones). Pending pods report nothing."""

    demand: float
    util: float
    ready: tuple[str, ...]
    loading: tuple[str, ...]

    def samples(self) -> dict[str, float]:
        values = dict.fromkeys(self.loading, 0.0)
        values.update(dict.fromkeys(self.ready, self.util))
        return values


def observe(pods: tuple[Pod, ...], demand: float, workload: Workload, now: int) -> Observation:
    ready = tuple(p.name for p in pods if now >= p.ready_at)
    loading = tuple(p.name for p in pods if p.running_at <= now < p.ready_at)
    capacity = len(ready) * workload.capacity_per_replica
    util = min(100.0, 100.0 * demand / capacity) if capacity > 0 else 0.0
    return Observation(demand, util, ready, loading)
