"""KEDA's ``externalscaler`` messages, built and read in this one place.

Both the deprecated int64 fields and the float fields are filled: KEDA ≤ 2.16 reads only ``targetSize`` and
``metricValue``, KEDA ≥ 2.17 prefers the float when it is greater than 0. The int target is never below 1 (a
target of 0 means "no target" to KEDA); values are rounded, and NaN, infinities and negatives become 0, as
KEDA ≥ 2.20 would make them anyway.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .._proto import externalscaler_pb2 as pb
from .errors import MetadataError

__all__ = [
    "ScaledObjectKey",
    "check_ref",
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


# What the API server accepts: a ScaledObject's name is a DNS subdomain, its namespace a DNS label. Anything
# else never reaches a request path (where it would travel unescaped).
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_ref(key: ScaledObjectKey) -> None:
    """``INVALID_ARGUMENT`` for a ScaledObjectRef whose name or namespace no Kubernetes object can have."""
    problems = []
    if key.namespace and not _LABEL.match(key.namespace):
        problems.append(
            f"the ScaledObjectRef's namespace {key.namespace[:100]!r} is not a Kubernetes namespace name "
            "(1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"
        )
    if not key.name or len(key.name) > 253 or not _SUBDOMAIN.match(key.name):
        problems.append(
            f"the ScaledObjectRef's name {key.name[:100]!r} is not a Kubernetes object name (at most 253 "
            "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
        )
    if problems:
        raise MetadataError(tuple(problems))
