"""This node's labels, kept current by list+watch (``informer.ListWatch`` on ``metadata.name=<node>``).

The agent sends them to the scaler, whose ``pool`` scope selects nodes by label (a node pool, a GPU
model, ``!spot``). The Downward API gives a pod its own labels, not its node's: the agent reads its Node.
Only label changes count; the kubelet's status updates of the Node do not bump ``version``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._http import Json
from .informer import NodeListWatch

__all__ = ["NodeLabelWatcher"]


class NodeLabelWatcher(NodeListWatch):
    """List+watch of the Node ``node_name``; ``labels`` is empty until it is read, or if it does not exist."""

    path = "/api/v1/nodes"
    stale_consequence = "the node's labels (for pool scope) may be out of date"
    _labels: Mapping[str, str] = MappingProxyType({})  # replaced whole on every change, never mutated

    @property
    def labels(self) -> Mapping[str, str]:
        return self._labels

    def describe(self) -> str:
        return f"node {self.node_name}"

    def _selector(self) -> list[tuple[str, str]]:
        return [("fieldSelector", f"metadata.name={self.node_name}")]

    def _set(self, labels: Mapping[str, str]) -> bool:
        if labels == self._labels:
            return False
        self._labels = labels
        return True

    def _replace(self, items: list[Json]) -> bool:
        mine = [i for i in items if (i.get("metadata") or {}).get("name") == self.node_name]
        return self._set(_labels_of(mine[0]) if mine else {})

    def _upsert(self, obj: Json) -> bool:
        if (obj.get("metadata") or {}).get("name") != self.node_name:
            return False
        return self._set(_labels_of(obj))

    def _delete(self, obj: Json) -> bool:
        if (obj.get("metadata") or {}).get("name") != self.node_name:
            return False
        return self._set({})


def _labels_of(obj: Json) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
