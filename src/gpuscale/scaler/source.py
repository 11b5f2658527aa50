"""Where the service reads GPUs from: the cluster state (``gpuscale scaler``) or one agent's own node state
(``gpuscale agent --serve-external-scaler``), behind one small Protocol.

A ``Query`` says which GPUs a trigger means; ``select`` answers it with a ``Selection`` (the series to
evaluate, and in workload scope how many of the workload's pods were found); a ``ChangeFeed`` wakes a
``StreamIsActive`` when something it depends on changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..scaling.aggregate import GpuSeries
from ..scaling.engine import EngineSeries
from ..scaling.profiles import Scope
from ..scaling.selector import LabelSelector
from ..scaling.view import GpuPod, PodStart

__all__ = ["ChangeFeed", "GpuSource", "PodStart", "Query", "Selection"]


@dataclass(frozen=True, slots=True)
class Query:
    """The GPUs of a trigger: ``workload`` (the pods in ``namespace`` matching ``pod_selector``), ``node``
    (the serving agent's), or ``pool`` (the nodes matching ``node_selector``)."""

    scope: Scope
    namespace: str | None = None
    pod_selector: LabelSelector | None = None
    node_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """``series`` to evaluate; ``pods``: the workload's pods found (0 with no pods: the value is 0), of which
    ``gpu_pods`` ask for a GPU (as their agents report it), on connected, stale or forgotten nodes."""

    series: tuple[GpuSeries, ...]
    pods: int = 0
    uuids: frozenset[str] = frozenset()
    gpu_pods: tuple[GpuPod, ...] = ()
    engines: tuple[EngineSeries, ...] = ()  # workload scope: each GPU pod's engine, as its agent reads it
    started: tuple[PodStart, ...] = ()  # workload scope: the GPU pods their agents report Ready, and since


class ChangeFeed(Protocol):
    def follow(self, uuids: frozenset[str]) -> None:
        """Wake on new samples of these GPUs (and on any change of which GPUs are in scope)."""

    async def wait(self) -> None:
        """Return after the next relevant change."""

    def close(self) -> None: ...


class GpuSource(Protocol):
    def scope_problem(self, scope: Scope) -> str | None:
        """Why this source cannot answer ``scope``, or ``None``."""

    def problem(self) -> str | None:
        """Why nothing can be answered yet (no agent has reported), or ``None``."""

    def select(self, query: Query) -> Selection: ...

    def node_count(self) -> int:
        """How many nodes this source follows."""

    def follows(self, node: str) -> bool:
        """Whether the agent of ``node`` is streaming its complete view (its word on the node's pods is
        live)."""

    def feed(self, query: Query) -> ChangeFeed: ...
