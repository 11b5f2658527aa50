"""Node scope served by an agent itself (``gpuscale agent --serve-external-scaler``): a ``GpuSource`` over
the agent's in-memory node state, read through a Protocol so that this layer never imports the agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import grpc.aio
from prometheus_client import CollectorRegistry

from ..model import GpuSample
from ..scaling.aggregate import GpuSeries
from ..scaling.metadata import MetadataCache
from ..scaling.profiles import ProfileSet, Scope
from .metrics import ScalerMetrics
from .service import ExternalScalerService, add_external_scaler
from .source import Query, Selection

__all__ = ["LocalNodeSource", "NodeStateView", "add_node_scope"]


class NodeStateView(Protocol):
    """What the service reads of ``gpuscale.agent.state.NodeState``."""

    @property
    def node_name(self) -> str: ...

    @property
    def history(self) -> Mapping[str, Sequence[GpuSample]]: ...

    @property
    def version(self) -> int: ...

    @property
    def rounds(self) -> int: ...

    async def wait_changed(self, seen_version: int, timeout: float) -> bool: ...


class _LocalFeed:
    def __init__(self, state: NodeStateView) -> None:
        self._state = state
        self._seen = state.version

    def follow(self, uuids: frozenset[str]) -> None:
        pass  # every sampling round touches every GPU of the node

    async def wait(self) -> None:
        while not await self._state.wait_changed(self._seen, timeout=3600.0):
            pass
        self._seen = self._state.version

    def close(self) -> None:
        pass


class LocalNodeSource:
    """The GPUs of the node whose agent serves the call; only ``scope: node``."""

    def __init__(self, state: NodeStateView) -> None:
        self._state = state

    def scope_problem(self, scope: Scope) -> str | None:
        if scope == "node":
            return None
        return (
            f'scope "{scope}" is answered by the cluster scaler (gpuscale scaler); this agent of node '
            f'"{self._state.node_name}" answers only scope "node": set scope: node in the trigger metadata, '
            "or point scalerAddress at the scaler"
        )

    def problem(self) -> str | None:
        return None if self._state.rounds > 0 else "no GPU has been sampled yet"

    def select(self, query: Query) -> Selection:
        series = tuple(GpuSeries(uuid, samples) for uuid, samples in self._state.history.items())
        return Selection(series, 0, frozenset(self._state.history))

    def node_count(self) -> int:
        return 1

    def follows(self, node: str) -> bool:
        return node == self._state.node_name

    def feed(self, query: Query) -> _LocalFeed:
        return _LocalFeed(self._state)


def add_node_scope(
    server: grpc.aio.Server,
    state: NodeStateView,
    *,
    registry: CollectorRegistry | None = None,
    profiles: ProfileSet | None = None,
) -> ExternalScalerService:
    """Serve ``externalscaler.ExternalScaler`` for this node's GPUs on ``server`` (an agent's), with the
    ``gpuscale_scaler_*`` metrics on ``registry``."""
    service = ExternalScalerService(
        LocalNodeSource(state),
        metadata=MetadataCache(profiles),
        metrics=ScalerMetrics(registry) if registry is not None else None,
    )
    add_external_scaler(server, service)
    return service
