"""The workload: a demand trace, the engine's queue, pod start-up in phases, and what its GPUs report.

Pure. A pod starts in phases: **Pending** (scheduling, node provisioning, image pull) for
``provisioning_seconds``, then **loading** (Running, not Ready: the model loads; the GPU is busy 0 % and its
memory fills linearly from 0 to ``model_memory_gib``) for ``load_seconds``, then **Ready**.

Demand arrives at the engines' queue (``EngineQueue``): each second, Ready replicas start up to
``capacity_per_replica`` requests each, oldest first; what they cannot start waits, and a request that has
waited ``max_queue_seconds`` without starting is abandoned (its client times out): it is *unserved*. With
``max_queue_seconds`` 0 there is no queue: what Ready capacity cannot take in its second is unserved, the
model before the queue existed. Ready pods share the load evenly: each one's GPU utilization is
``100 * served / (ready * capacity_per_replica)``; the queue, the running requests (Little's law: served
* ``request_seconds``), the KV-cache fill and the time to first token follow (``Observation``).

Scale-down deletes pods as a ReplicaSet does: Pending first, then not Ready, then the newest; a deleted pod
holds its GPUs for ``termination_seconds`` more (GPU-hours), and nothing counts it.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from .requests import RequestsDemand
from .tokens import TokenParams

__all__ = [
    "BurstsDemand",
    "ConstantDemand",
    "DemandShape",
    "DiurnalDemand",
    "EngineQueue",
    "Observation",
    "Pod",
    "PointsDemand",
    "Served",
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
    # a request not started after waiting this long is abandoned (unserved); 0: no queue
    max_queue_seconds: int = 0
    request_seconds: float = 4.0  # how long a started request runs (prefill + decode): its batch slot
    # whether the engines count a request abandoned in the queue: False (what vLLM 0.10-0.13 do: a client's
    # abort moves no vllm:request_success_total series, vllm-project/vllm#31503), it leaves its waiting
    # count uncounted; True (the fix proposed in vllm-project/vllm#55837), finished with reason "abort"
    aborts_counted: bool = False
    base_ttft_seconds: float = 0.1  # time to first token with nothing queued (prefill)
    gpu_memory_gib: float = 80.0  # each GPU's memory
    # what the engine holds on each of its GPUs once loaded (weights + KV cache); None: 90 % of the GPU,
    # vLLM's --gpu-memory-utilization default
    model_memory_gib: float | None = None
    # how a replica serves: "requests" (capacity_per_replica requests/s, the EngineQueue) or "tokens"
    # (continuous batching by tokens, ``batching.TokenEngines``, with ``tokens``' parameters; a request log)
    replica_model: Literal["requests", "tokens"] = "requests"
    tokens: TokenParams | None = None

    @property
    def loaded_memory_percent(self) -> float:
        """The share of each GPU's memory a loaded engine holds, in percent."""
        held = 0.9 * self.gpu_memory_gib if self.model_memory_gib is None else self.model_memory_gib
        return min(100.0, 100.0 * held / self.gpu_memory_gib)


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


@dataclass(frozen=True)
class BurstsDemand:
    """Bursts separated by quieter gaps, each burst's length and level and each gap's drawn at random.

    ``bursts`` and ``gaps`` are ``(start second, seconds, value)``, in time order; a gap comes first, from 0,
    then they alternate. Drawn once by ``draw`` and held, so ``at`` is a binary search (O(log n)); past
    the last phase drawn, the last one's value holds.
    """

    bursts: tuple[tuple[int, int, float], ...]
    gaps: tuple[tuple[int, int, float], ...]
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _values: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # by start, a gap of 0 seconds before the burst that starts with it: the burst is what ``at`` finds
        phases = sorted((*self.bursts, *self.gaps))
        object.__setattr__(self, "_starts", tuple(p[0] for p in phases))
        object.__setattr__(self, "_values", tuple(p[2] for p in phases))

    @classmethod
    def draw(
        cls,
        base: float,
        burst_seconds: tuple[int, int],
        burst_multiple: tuple[float, float],
        gap_seconds: tuple[int, int],
        gap_demand: tuple[float, float],
        *,
        until: int,
        start_seconds: int | None = None,
        seed: int = 0,
    ) -> BurstsDemand:
        """Draw the phases from ``random.Random(seed)`` until one covers second ``until - 1``.

        Each gap draws its length from ``gap_seconds`` (the first only when ``start_seconds`` is None: it
        lasts ``start_seconds`` otherwise) then its value from ``gap_demand``; each burst its length from
        ``burst_seconds`` then its multiple of ``base`` from ``burst_multiple``. Lengths are whole seconds
        (``randint``, both ends included), values ``uniform``. The draws do not depend on ``until``: a
        longer horizon draws more of the same series. ``burst_seconds[0]`` must be >= 1.
        """
        if burst_seconds[0] < 1:
            raise ValueError(f"burst_seconds {burst_seconds}: a burst lasts at least 1 second")
        rng = random.Random(seed)
        first = rng.randint(*gap_seconds) if start_seconds is None else start_seconds
        gaps = [(0, first, rng.uniform(*gap_demand))]
        bursts: list[tuple[int, int, float]] = []
        t = first
        while t < until:
            seconds = rng.randint(*burst_seconds)
            bursts.append((t, seconds, base * rng.uniform(*burst_multiple)))
            t += seconds
            if t >= until:
                break
            seconds = rng.randint(*gap_seconds)
            gaps.append((t, seconds, rng.uniform(*gap_demand)))
            t += seconds
        return cls(tuple(bursts), tuple(gaps))

    def at(self, t: int) -> float:
        return self._values[max(0, bisect.bisect_right(self._starts, t) - 1)]


DemandShape = (
    ConstantDemand | StepDemand | SpikeDemand | DiurnalDemand | PointsDemand | BurstsDemand | RequestsDemand
)


def demand_series(shape: DemandShape, duration: int) -> tuple[float, ...]:
    return tuple(max(0.0, shape.at(t)) for t in range(duration))


def step_time(shape: DemandShape, series: tuple[float, ...]) -> int | None:
    """When "the step" happens, for time-to-first-scale-up: the shape's own time for step and spike, the
    first burst's for bursts, else the first second demand rises by more than 20 % of the trace's peak over
    one minute."""
    if isinstance(shape, StepDemand) and shape.after > shape.before:
        return shape.at_seconds
    if isinstance(shape, SpikeDemand) and shape.value > shape.base:
        return shape.at_seconds
    if isinstance(shape, BurstsDemand) and shape.bursts:
        return shape.bursts[0][0]
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
class Served:
    """What the queue did in one second: requests started (``served``), abandoned after waiting
    ``max_queue_seconds`` (``abandoned``), and still waiting at the end of the second (``waiting``)."""

    served: float
    abandoned: float
    waiting: float
    waited: float = 0.0  # seconds the started requests had waited, summed (vLLM's queue time)


_EPS = 1e-9


class EngineQueue:
    """The engines' queue, one fluid FIFO for the workload (requests spread evenly over the Ready replicas).

    ``step(t, arrivals, capacity)`` is one second: ``arrivals`` requests join the queue, up to ``capacity``
    of the oldest start (``served``), and those that arrived ``max_wait`` or more seconds ago and have not
    started are abandoned. A request that arrives and starts in the same second waits 0 s; so with
    ``max_wait`` 0 whatever the second's capacity cannot start is abandoned at once (no queue). The
    seconds each started request waited are added to ``delays`` (seconds -> requests); an abandoned one
    counts as having waited ``max_wait``. Deterministic; the only mutable state of the workload model.
    """

    __slots__ = ("_cohorts", "delays", "max_wait", "waiting")

    def __init__(self, max_wait: int) -> None:
        self.max_wait = max_wait
        self._cohorts: deque[list[float]] = deque()  # [arrival second, requests], oldest first
        self.waiting = 0.0
        self.delays: dict[int, float] = {}

    def step(self, t: int, arrivals: float, capacity: float) -> Served:
        arrivals = max(0.0, arrivals)
        capacity = max(0.0, capacity)
        delays = self.delays
        if not self._cohorts and arrivals <= capacity:  # the common case: nothing waits
            if arrivals > 0:
                delays[0] = delays.get(0, 0.0) + arrivals
            return Served(arrivals, 0.0, 0.0)
        if arrivals > 0:
            self._cohorts.append([float(t), arrivals])
        served, room, waited = 0.0, capacity, 0.0
        while self._cohorts and room > _EPS:
            cohort = self._cohorts[0]
            take = min(room, cohort[1])
            wait = t - int(cohort[0])
            delays[wait] = delays.get(wait, 0.0) + take
            waited += wait * take
            served += take
            room -= take
            cohort[1] -= take
            if cohort[1] <= _EPS:
                self._cohorts.popleft()
        abandoned = 0.0
        while self._cohorts and t - int(self._cohorts[0][0]) >= self.max_wait:
            gone = self._cohorts.popleft()[1]
            abandoned += gone
            delays[self.max_wait] = delays.get(self.max_wait, 0.0) + gone
        self.waiting = sum(c[1] for c in self._cohorts) if self._cohorts else 0.0
        return Served(served, abandoned, self.waiting, waited)


@dataclass(frozen=True)
class Observation:
    """The true state at one second: demand, what each Running pod reports, and the engines' state.

    ``util`` is each Ready pod's GPU utilization; a loading pod reports 0 % and its GPU memory filling
    (``loading_memory``, percent, one per ``loading`` pod); a Pending pod reports nothing. ``served``,
    ``waiting`` and ``running`` are the workload's requests started this second, waiting and running;
    ``kv_cache`` (percent) and ``ttft`` (seconds) are each Ready pod's, NaN with no Ready pod. Engine
    metrics come from Ready pods only: a loading engine serves no metrics yet."""

    demand: float
    util: float
    ready: tuple[str, ...]
    loading: tuple[str, ...]
    loading_memory: tuple[float, ...] = ()
    ready_memory: float = 0.0
    served: float = 0.0
    waiting: float = 0.0
    running: float = 0.0
    kv_cache: float = math.nan
    ttft: float = math.nan
    abandoned: float = 0.0  # requests abandoned this second (waited ``max_queue_seconds``): aborted
    waited: float = 0.0  # seconds the requests started this second had waited, summed

    def samples(self) -> dict[str, float]:
        values = dict.fromkeys(self.loading, 0.0)
        values.update(dict.fromkeys(self.ready, self.util))
        return values

    def memory(self) -> dict[str, float]:
        """Each Running pod's GPU memory in use, percent of the GPU."""
        values = dict(zip(self.loading, self.loading_memory, strict=True))
        values.update(dict.fromkeys(self.ready, self.ready_memory))
        return values


def observe(
    pods: tuple[Pod, ...], demand: float, workload: Workload, now: int, step: Served | None = None
) -> Observation:
    """The state at ``now``; ``step`` is what the queue did this second (None: every request beyond the
    Ready capacity is lost, no queue)."""
    ready = tuple(p.name for p in pods if now >= p.ready_at)
    loading_pods = [p for p in pods if p.running_at <= now < p.ready_at]
    capacity = len(ready) * workload.capacity_per_replica
    if step is None:
        step = Served(min(demand, capacity), max(0.0, demand - capacity), 0.0)
    full = workload.loaded_memory_percent
    memory = tuple(full * (now - p.running_at) / (p.ready_at - p.running_at) for p in loading_pods)
    if capacity <= 0:
        return Observation(
            demand,
            0.0,
            ready,
            tuple(p.name for p in loading_pods),
            memory,
            full,
            step.served,
            step.waiting,
            abandoned=step.abandoned,
            waited=step.waited,
        )
    running = step.served * workload.request_seconds
    slots = capacity * workload.request_seconds
    return Observation(
        demand,
        min(100.0, 100.0 * step.served / capacity),
        ready,
        tuple(p.name for p in loading_pods),
        memory,
        full,
        step.served,
        step.waiting,
        running,
        min(100.0, 100.0 * (running + step.waiting) / slots) if slots > 0 else 100.0,
        workload.base_ttft_seconds + step.waiting / capacity,
        abandoned=step.abandoned,
        waited=step.waited,
    )
