"""Errors of the KEDA external scaler service.

Hierarchy::

    GpuscaleError
    ├── ScalingError             the scaling core's (``gpuscale.scaling.errors``): MetadataError,
    │                            SelectorError, ProfileError, NoDataError
    └── ScalerError              anything the service raises on purpose (``status.py``: ScopeNotServed,
                                 NotReady, EmptyPool, UnattributedPods, NoWorkloadSelector, …)
"""

from __future__ import annotations

from ..errors import GpuscaleError
from ..scaling.errors import MetadataError, NoDataError, ProfileError, ScalingError, SelectorError

__all__ = ["MetadataError", "NoDataError", "ProfileError", "ScalerError", "ScalingError", "SelectorError"]


class ScalerError(GpuscaleError):
    """Base of the scaler service's own errors."""
