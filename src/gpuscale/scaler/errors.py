"""Errors of the KEDA external scaler service.

Hierarchy::

    GpuscaleError
    ├── ScalingError             the scaling core's (``gpuscale.scaling.errors``): MetadataError,
    │                            SelectorError, ProfileError, NoDataError
    └── ScalerError              anything the service raises on purpose (``status.py``: ScopeNotServed,
        │                        NotReady, EmptyPool, UnattributedPods, NoWorkloadSelector, …)
        └── GatewayError         a request path's exposition has no usable series of the workload
                                 (``gateways.py``): the source is missing, never a made-up 0
"""

from __future__ import annotations

from ..errors import GpuscaleError
from ..scaling.errors import MetadataError, NoDataError, ProfileError, ScalingError, SelectorError

__all__ = [
    "GatewayError",
    "MetadataError",
    "NoDataError",
    "NoSeries",
    "ProfileError",
    "ScalerError",
    "ScalingError",
    "SelectorError",
]


class ScalerError(GpuscaleError):
    """Base of the scaler service's own errors."""


class GatewayError(ScalerError):
    """A request path's exposition says nothing usable about the workload (one line: which series, and why):
    no series of its format for the match, or a counted series whose value cannot be right (NaN, infinite,
    negative). The request path is then missing, never read as 0."""


class NoSeries(GatewayError):
    """The exposition has no series of the format for the match (a gateway replica that has not served the
    workload since it started has none yet)."""
