"""What a simulated run is given and what it returns: the ``Policy`` (its metrics, its ScaledObject, its
faults, or the ``Oracle``) and the per-second ``Timeline``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from .batching import TokenTimeline
from .faults import Fault
from .hpa import HpaSpec
from .keda import ScaledObjectSpec, TriggerSpec
from .pipeline import GpuscalePipeline, PrometheusPipeline, Signal
from .workload import Workload

__all__ = ["MetricSource", "Oracle", "Policy", "Timeline", "oracle_replicas"]


@dataclass(frozen=True)
class MetricSource:
    """Where one HPA metric comes from. ``trigger`` is set for ScaledObject policies."""

    signal: Signal
    via: Literal["gpuscale", "prometheus"]
    trigger: TriggerSpec | None = None


@dataclass(frozen=True)
class Oracle:
    """The ``oracle`` policy: it knows the demand (and the queue) at every instant and asks for exactly the
    replicas they need (``oracle_replicas``): no metric, no pipeline, no KEDA. ``controller``:

    * ``hpa`` (the default): the ask is the HPA's proposal at each of its syncs, in place of the metrics'
      (so no tolerance: it is exact), and the HPA's own limits apply as to every KEDA policy (the legacy
      path: ``max(2c, 4)`` per sync up, the 300 s stabilization window down). Only the cold start and the
      HPA stand between demand and capacity: the limit of any policy the HPA decides.
    * ``direct``: it writes ``/scale`` itself every second: no sync period, tolerance, stabilization window
      or rate limit; only its bounds and the pods' start phases. The limit of reacting at once.

    ``drain_queue``: also ask for the capacity that starts the waiting requests before they time out."""

    min_replicas: int = 1
    max_replicas: int = 100
    drain_queue: bool = True
    controller: Literal["hpa", "direct"] = "hpa"


def oracle_replicas(oracle: Oracle, demand: float, waiting: float, workload: Workload) -> int:
    """``ceil((demand + waiting / maxQueueSeconds) / capacityPerReplica)`` within the oracle's bounds: the
    replicas the present demand needs, plus (``drain_queue``, with a queue) those that start the requests
    waiting now within ``maxQueueSeconds``. Without them a queue at exactly the demand's capacity never
    drains: every request would wait as long as the backlog is."""
    if oracle.drain_queue and workload.max_queue_seconds > 0:
        demand += waiting / workload.max_queue_seconds
    need = math.ceil(demand / workload.capacity_per_replica - 1e-9) if demand > 0 else 0
    return max(oracle.min_replicas, min(oracle.max_replicas, need))


@dataclass(frozen=True)
class Policy:
    name: str
    hpa: HpaSpec
    sources: tuple[MetricSource, ...]
    scaled_object: ScaledObjectSpec | None = None
    gpuscale: GpuscalePipeline = field(default_factory=GpuscalePipeline)
    prometheus: PrometheusPipeline = field(default_factory=PrometheusPipeline)
    hpa_offset_seconds: int = 0
    keda_offset_seconds: int = 0
    initial_replicas: int | None = None
    # The ScaledObject is created at t=0 (KEDA: no lastActiveTime yet, so an idle workload may go to zero
    # after initialCooldownPeriod); by default it has run before and counts as active at t=0.
    new_scaled_object: bool = False
    faults: tuple[Fault, ...] = ()
    oracle: Oracle | None = None  # set: the oracle policy (``hpa`` carries its bounds, no metric)


@dataclass(frozen=True)
class Timeline:
    """One entry per simulated second. ``metric`` is the first metric's value as last fetched (NaN before).

    ``capacity`` and ``ready`` are what served the second; ``served`` and ``unserved`` the requests started
    and abandoned in it, ``waiting`` those still queued at its end; ``kv_cache`` and ``ttft`` each Ready
    pod's (NaN with none). ``delays``: (seconds waited, requests) over the run, an abandoned request counted
    at ``max_queue_seconds``; ``waiting_at_end``: requests still queued when the run ends (unserved)."""

    policy: str
    demand: tuple[float, ...]
    capacity: tuple[float, ...]
    desired: tuple[int, ...]
    ready: tuple[int, ...]
    pods: tuple[int, ...]
    metric: tuple[float, ...]
    utilization: tuple[float, ...]
    served: tuple[float, ...]
    unserved: tuple[float, ...]
    waiting: tuple[float, ...]
    kv_cache: tuple[float, ...]
    ttft: tuple[float, ...]
    delays: tuple[tuple[int, float], ...]
    waiting_at_end: float
    tokens: TokenTimeline | None = None  # the token model's series (workload.replicaModel tokens)
