"""The mutable state of one ``simulate`` call (``RunState``), private to its loop, and two reads of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import EngineSample, GpuSample
from ..scaling.capacity import Capacities
from ..scaling.coldstart import ColdStarts
from ..scaling.engine import PodValueMemo
from ..scaling.requestpath import PathReading
from .batching import TokenEngines, TokenSecond
from .faults import Fault
from .hpa import HpaState
from .keda import KedaState
from .policy import Policy
from .workload import EngineQueue, Observation, Pod

__all__ = ["RunState", "fault", "sampled"]


@dataclass
class RunState:
    """Mutable loop state, private to one ``simulate`` call (the loop is the only writer)."""

    pods: tuple[Pod, ...]
    next_id: int
    replicas: int
    hpa_state: HpaState
    keda_state: KedaState
    push_active: tuple[bool | None, ...]
    history: list[Observation]
    metric: float = float("nan")
    # what the scaler holds of each Running pod's GPU: its samples, oldest first (gpuscale triggers only)
    samples: dict[str, list[GpuSample]] = field(default_factory=dict)
    # Running pods a samples-missing fault darkens: the scaler knows them (from the API, or their agent's last
    # report), so they are missing pods even when they never sent a sample
    dark: frozenset[str] = frozenset()
    # and of each Ready pod's engine: its readings, oldest first (gpuscale engine triggers only)
    engines: dict[str, list[EngineSample]] = field(default_factory=dict)
    # and of pods deleted within the forecast's look-back: their readings until they went
    departed: dict[str, list[EngineSample]] = field(default_factory=dict)
    # each pod's engine values already computed for the forecast (scaling.engine.pod_value_at)
    engine_memos: dict[str, PodValueMemo] = field(default_factory=dict)
    # pods deleted and still holding their GPUs: (pod, the second it is gone)
    terminating: tuple[tuple[Pod, int], ...] = ()
    queue: EngineQueue = field(default_factory=lambda: EngineQueue(0))
    # each Ready pod's engine counters: (requests finished so far, requests in flight at its last reading,
    # of the finished those aborted: abandoned in the queue; the seconds the requests it started had waited,
    # and how many: vLLM's queue-time histogram's _sum and _count)
    counters: dict[str, tuple[float, float, float, float, float]] = field(default_factory=dict)
    # the workload's cold start as the scaler learns it from its pods (scheduled to Ready)
    cold_starts: ColdStarts = field(default_factory=ColdStarts)
    aborts_counted: bool = False  # workload.aborts_counted: the engines count an abandoned request
    # what the request path in front of the workload counts each second: the requests arrived so far, and
    # those it holds (waiting with no Ready pod to take them)
    path: list[PathReading] = field(default_factory=list)
    arrived: float = 0.0
    # a replica's capacity as the scaler learns it while requests wait (request_rate triggers)
    capacities: Capacities = field(default_factory=Capacities)
    # the token model's engines (workload.replica_model "tokens"), in place of ``queue``, and its seconds
    tokens: TokenEngines | None = None
    token_seconds: list[TokenSecond] = field(default_factory=list)


def sampled(run: RunState, times: tuple[int, ...]) -> list[Observation]:
    return [run.history[s] for s in times if 0 <= s < len(run.history)]


def fault(policy: Policy, kind: str, t: float) -> Fault | None:
    return next((f for f in policy.faults if f.kind == kind and f.active(t)), None)
