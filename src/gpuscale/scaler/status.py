"""The service's own errors, and the one table that turns any error into a gRPC status code.

Hierarchy (under ``ScalerError``, see ``errors.py``)::

    ScalerError
    ├── MetadataError        → INVALID_ARGUMENT   (errors.py)
    ├── NoDataError          → UNAVAILABLE        (errors.py)
    ├── UnattributedPods     → UNAVAILABLE        (gpuscale.scaling.errors)
    ├── MissingPods          → UNAVAILABLE        (gpuscale.scaling.errors)
    ├── RequestPathMissing   → UNAVAILABLE        (gpuscale.scaling.errors)
    ├── ScopeNotServed       → INVALID_ARGUMENT   this server does not answer the trigger's scope
    ├── NotReady             → UNAVAILABLE        no agent has reported yet
    ├── EmptyPool            → UNAVAILABLE        pool scope: no node with GPUs matches the nodeSelector
    ├── NoWorkloadSelector   → FAILED_PRECONDITION  workload scope without podSelector and no Kubernetes API
    └── RequestPathNeedsApi  → FAILED_PRECONDITION  requestPath and no Kubernetes API to find its Service

``WorkloadResolutionError`` (kube) maps to UNAVAILABLE when the API server did not answer or failed (0, 429,
5xx), NOT_FOUND for 404, FAILED_PRECONDITION otherwise. Anything else is a bug: INTERNAL, logged.
"""

from __future__ import annotations

import grpc

from ..kube.errors import KubeApiError
from ..scaling.errors import MetadataError, MissingPods, NoDataError, RequestPathMissing, UnattributedPods
from .errors import ScalerError

__all__ = [
    "EmptyPool",
    "NoWorkloadSelector",
    "NotReady",
    "RequestPathNeedsApi",
    "ScopeNotServed",
    "status_code",
]


class ScopeNotServed(ScalerError):
    """The trigger's ``scope`` is answered by another server (node scope: the agent; others: the scaler)."""


class NotReady(ScalerError):
    """Nothing to answer from yet: no agent has sent its first snapshot."""


class EmptyPool(ScalerError):
    """Pool scope: no node the scaler follows matches the trigger's ``nodeSelector``. Never a made-up 0: the
    labels may not have arrived yet (an agent without access to its Node sends none)."""

    def __init__(self, node_selector: object, nodes: int) -> None:
        self.node_selector = str(node_selector)
        self.nodes = nodes
        super().__init__(
            f'no node with GPUs matches nodeSelector "{self.node_selector}" (of {nodes} node'
            f"{'s' if nodes != 1 else ''} followed). A node's labels come from its agent, which reads its "
            "Node from the Kubernetes API (RBAC: get, list and watch on nodes); without them only "
            "kubernetes.io/hostname is known"
        )


class NoWorkloadSelector(ScalerError):
    """Workload scope needs the ScaledObject's target from the Kubernetes API, and there is none."""


class RequestPathNeedsApi(ScalerError):
    """``requestPath`` names a Service, found through the Kubernetes API, and the scaler has none."""


def status_code(e: BaseException) -> grpc.StatusCode:
    if isinstance(e, MetadataError | ScopeNotServed):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(
        e, NoDataError | NotReady | EmptyPool | UnattributedPods | MissingPods | RequestPathMissing
    ):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(e, NoWorkloadSelector | RequestPathNeedsApi):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(e, KubeApiError):
        if e.status == 0 or e.status == 429 or e.status >= 500:
            return grpc.StatusCode.UNAVAILABLE
        if e.status == 404:
            return grpc.StatusCode.NOT_FOUND
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL
