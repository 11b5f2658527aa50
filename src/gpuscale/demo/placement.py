"""Where the demo's replicas run and how busy their GPUs are: scheduling, scale-down order, demand spreading.

Pure: data in, data out, time given. A pod holds one whole GPU. It is Pending (scheduled, container not yet
started: no GPU assignment reported, no samples) until ``running_at``, then Running but loading its model
(the GPU reads 0 %) until ``ready_at``, then Ready and serving its share of the demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DemoGpu",
    "DemoPod",
    "PodPhase",
    "choose_gpu",
    "demand_documents",
    "pods_to_remove",
    "spread_demand",
]

PodPhase = Literal["Pending", "Loading", "Ready"]


@dataclass(frozen=True)
class DemoGpu:
    node: str
    index: int
    uuid: str

    @property
    def label(self) -> str:
        return f"{self.node}/{self.index}"


@dataclass(frozen=True)
class DemoPod:
    """A replica. ``pid`` is the process it runs on its GPU (for per-container figures)."""

    name: str
    number: int
    uid: str
    container_id: str
    pid: int
    gpu: DemoGpu
    created_at: float
    running_at: float
    ready_at: float

    def phase(self, now: float) -> PodPhase:
        if now < self.running_at:
            return "Pending"
        if now < self.ready_at:
            return "Loading"
        return "Ready"


def choose_gpu(gpus: Sequence[DemoGpu], pods: Iterable[DemoPod]) -> DemoGpu | None:
    """A free GPU on the node with the most free GPUs (spreading replicas over nodes, as the scheduler's
    default spreading does); ties go to the node listed first, then the lowest index. None: all are taken."""
    taken = {p.gpu for p in pods}
    free = [g for g in gpus if g not in taken]
    if not free:
        return None
    nodes = list(dict.fromkeys(g.node for g in gpus))
    free_per_node = {n: sum(1 for g in free if g.node == n) for n in nodes}
    best = max(nodes, key=lambda n: (free_per_node[n], -nodes.index(n)))
    return min((g for g in free if g.node == best), key=lambda g: g.index)


_DELETE_FIRST: dict[PodPhase, int] = {"Pending": 0, "Loading": 1, "Ready": 2}


def pods_to_remove(pods: Sequence[DemoPod], count: int, now: float) -> list[DemoPod]:
    """The ``count`` pods a ReplicaSet deletes first on scale-down: not yet running before starting before
    ready, and the newest first among equals."""
    ranked = sorted(pods, key=lambda p: (_DELETE_FIRST[p.phase(now)], -p.created_at, -p.number))
    return ranked[: max(0, count)]


def spread_demand(
    demand: float, pods: Sequence[DemoPod], now: float, capacity_per_replica: float
) -> dict[str, float]:
    """GPU utilization (%) per Running pod: the demand is shared evenly by the Ready pods, each at
    ``min(100, share / capacity_per_replica * 100)``; a loading pod's GPU reads 0. Pending pods are absent."""
    ready = [p for p in pods if p.phase(now) == "Ready"]
    share = demand / len(ready) if ready else 0.0
    util = min(100.0, 100.0 * share / capacity_per_replica) if capacity_per_replica > 0 else 0.0
    out: dict[str, float] = {}
    for p in pods:
        phase = p.phase(now)
        if phase == "Ready":
            out[p.name] = round(util, 3)
        elif phase == "Loading":
            out[p.name] = 0.0
    return out


def demand_documents(
    gpus: Sequence[DemoGpu], pods: Sequence[DemoPod], utilization: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Per node, the mock backend's demand file (``FileDemand``): every GPU listed, a Running pod's GPU with
    its utilization and the pod's process, every other GPU idle."""
    by_gpu = {p.gpu: p for p in pods if p.name in utilization}
    docs: dict[str, dict[str, Any]] = {}
    for g in gpus:
        entry: dict[str, Any] = {"utilization": 0.0, "processes": []}
        pod = by_gpu.get(g)
        if pod is not None:
            entry = {"utilization": utilization[pod.name], "processes": [{"pid": pod.pid, "share": 1.0}]}
        docs.setdefault(g.node, {"gpus": {}})["gpus"][str(g.index)] = entry
    return docs
