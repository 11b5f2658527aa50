"""KEDA's ``externalscaler`` messages, built and read in this one place.

Both the deprecated int64 fields and the float fields are filled: KEDA ≤ 2.16 reads only ``targetSize`` and
``metricValue``, KEDA ≥ 2.17 prefers the float when it is greater than 0. The int target is never below 1 (a
target of 0 means "no target" to KEDA); values are rounded, and NaN, infinities and negatives become 0, as
KEDA ≥ 2.20 would make them anyway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .._proto import externalscaler_pb2 as pb

__all__ = [
    "ScaledObjectKey",
    "is_active_response",
    "metric_spec_response",
    "metric_value_response",
    "scaled_object_key",
    "scaled_object_ref",
]

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ScaledObjectKey:
    """What a ``ScaledObjectRef`` says: the ScaledObject and its trigger's metadata."""

    name: str
    namespace: str
    metadata: Mapping[str, str]


def scaled_object_key(ref: pb.ScaledObjectRef) -> ScaledObjectKey:
    return ScaledObjectKey(ref.name, ref.namespace, ref.scalerMetadata)


def scaled_object_ref(name: str, namespace: str, metadata: Mapping[str, str]) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=dict(metadata))


def _finite(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


def _int64(value: float) -> int:
    return min(_INT64_MAX, round(value))


def metric_spec_response(metric_name: str, target: float) -> pb.GetMetricSpecResponse:
    t = _finite(target)
    spec = pb.MetricSpec(metricName=metric_name, targetSize=max(1, _int64(t)), targetSizeFloat=t)
    return pb.GetMetricSpecResponse(metricSpecs=[spec])


def metric_value_response(metric_name: str, value: float) -> pb.GetMetricsResponse:
    v = _finite(value)
    item = pb.MetricValue(metricName=metric_name, metricValue=_int64(v), metricValueFloat=v)
    return pb.GetMetricsResponse(metricValues=[item])


def is_active_response(active: bool) -> pb.IsActiveResponse:
    return pb.IsActiveResponse(result=active)
