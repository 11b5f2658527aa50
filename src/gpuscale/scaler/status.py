"""The service's own errors, and the one table that turns any error into a gRPC status code.

Hierarchy (under ``ScalerError``, see ``errors.py``)::

    ScalerError
    ├── MetadataError        → INVALID_ARGUMENT   (errors.py)
    ├── NoDataError          → UNAVAILABLE        (errors.py)
    ├── ScopeNotServed       → INVALID_ARGUMENT   this server does not answer the trigger's scope
    ├── NotReady             → UNAVAILABLE        no agent has reported yet
    └── NoWorkloadSelector   → FAILED_PRECONDITION  workload scope without podSelector and no Kubernetes API

``WorkloadResolutionError`` (kube) maps to UNAVAILABLE when the API server did not answer or failed (0, 429,
5xx), NOT_FOUND for 404, FAILED_PRECONDITION otherwise. Anything else is a bug: INTERNAL, logged.
"""

from __future__ import annotations

import grpc

from ..kube.errors import KubeApiError
from .errors import MetadataError, NoDataError, ScalerError

__all__ = ["NoWorkloadSelector", "NotReady", "ScopeNotServed", "status_code"]


class ScopeNotServed(ScalerError):
    """The trigger's ``scope`` is answered by another server (node scope: the agent; others: the scaler)."""


class NotReady(ScalerError):
    """Nothing to answer from yet: no agent has sent its first snapshot."""


class NoWorkloadSelector(ScalerError):
    """Workload scope needs the ScaledObject's target from the Kubernetes API, and there is none."""


def status_code(e: BaseException) -> grpc.StatusCode:
    if isinstance(e, MetadataError | ScopeNotServed):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(e, NoDataError | NotReady):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(e, NoWorkloadSelector):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(e, KubeApiError):
        if e.status == 0 or e.status == 429 or e.status >= 500:
            return grpc.StatusCode.UNAVAILABLE
        if e.status == 404:
            return grpc.StatusCode.NOT_FOUND
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL
