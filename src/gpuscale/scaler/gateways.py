"""How each gateway, router or ingress writes a workload's demand in its Prometheus exposition, and the two
numbers the request path reads from it: ``arrived`` (a counter of the requests that reached the workload) and
``held`` (a gauge of the requests it holds in front of the workload now).

Why: the workload's own engines are silent at zero replicas and while every pod loads; what stands in front
of them still sees the requests. Each project names those series its own way, renames them between
releases, and labels them by its own notion of the workload (a cluster, an ingress, a model, a route).

How: one ``GatewayFormat`` per ``keys.REQUEST_PATH_FORMATS`` name lists, for each number, every sample name
it has been written under, newest first, and the label(s) ``requestPathMatch`` is compared with. ``read``
takes the first of those names the exposition has, so a source that writes a family under its old and its
new name at once (a deprecation's dual emission) counts once, and sums its series whose label equals the
match (every series without one); Envoy's arrivals add the requests it turned away for want of a healthy
endpoint, which its request counter leaves out. A family the exposition lacks, or whose series lack the
label, is ``None``; one with series, none of them the match's, is 0 (nothing arrived or held for it since
the source started). Neither number with a series of the match is a ``GatewayError``: the source is
missing, never 0 (a wrong match or format would read nothing forever). So is a counted value that cannot be
right (NaN, infinite, negative). Every name was checked against the project's own source: ``source`` names
it, and ``docs/gateways.md`` cites each.

Pure: an ``Exposition`` (``gpuscale.exposition.parse`` with ``selection(fmt)``) in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from ..exposition import Exposition, Labels, Selection
from ..scaling.keys import REQUEST_PATH_FORMATS
from .errors import GatewayError, NoSeries

__all__ = ["FORMATS", "GatewayFormat", "read", "selection"]


@dataclass(frozen=True, slots=True)
class GatewayFormat:
    """One ``requestPathFormat``: the sample names of its arrivals counter and its held gauge (every name
    each has had, newest first; empty where the project has none), the label(s) a series names its workload
    by (a series counts when any of them equals the match), and where the names are defined."""

    name: str
    arrived: tuple[str, ...]
    held: tuple[str, ...]
    label: str | tuple[str, ...]
    source: str
    # a second counter added to ``arrived``: requests the source answered itself because the workload had no
    # endpoint, which its arrivals counter does not count (Envoy's "no healthy upstream")
    turned_away: tuple[str, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        return (self.label,) if isinstance(self.label, str) else self.label


_FORMATS = (
    GatewayFormat(
        "envoy",
        arrived=("envoy_cluster_upstream_rq_total",),
        held=("envoy_cluster_upstream_rq_pending_active",),
        # Envoy's default tag; Istio's bootstrap extracts the cluster as cluster_name instead
        label=("envoy_cluster_name", "cluster_name"),
        source="envoyproxy/envoy envoy/upstream/upstream.h (ALL_CLUSTER_TRAFFIC_STATS), "
        "source/common/upstream/cluster_manager_impl.cc, source/common/config/well_known_names.h, "
        "source/server/admin/prometheus_stats.cc; istio/istio tools/packaging/common/envoy_bootstrap.json",
        # upstream_rq_total counts a request once a host's connection pool takes it; with no healthy host
        # Envoy answers 503 itself and counts upstream_cx_none_healthy instead
        turned_away=("envoy_cluster_upstream_cx_none_healthy",),
    ),
    GatewayFormat(
        "epp",
        arrived=(
            "llm_d_epp_request_total",
            "llm_d_router_epp_request_total",
            "inference_objective_request_total",
            "inference_model_request_total",
        ),
        held=(
            "llm_d_epp_flow_control_queue_size",
            "llm_d_router_epp_flow_control_queue_size",
            "inference_extension_flow_control_queue_size",
        ),
        label="model_name",
        source="llm-d/llm-d-router pkg/epp/metrics/metrics.go, pkg/epp/metrics/llm_d_router_metrics.go, "
        "docs/metrics.md; kubernetes-sigs/gateway-api-inference-extension pkg/epp/metrics/metrics.go",
    ),
    GatewayFormat(
        "ingress-nginx",
        arrived=("nginx_ingress_controller_requests",),
        held=(),  # nginx holds nothing for a backend without endpoints: it answers 503
        label=("ingress", "service"),
        source="kubernetes/ingress-nginx internal/ingress/metric/collectors/socket.go, main.go",
    ),
    GatewayFormat(
        "keda-http",
        arrived=("interceptor_request_count_total", "interceptor_requests_total"),
        held=(
            "interceptor_request_concurrency",
            "interceptor_pending_requests",
            "interceptor_pending_request_count",
        ),
        # route_name since the interceptor labels by route; host before
        label=("route_name", "host"),
        source="kedacore/http-add-on interceptor/metrics/instruments.go, prommetrics.go, prometheus_test.go",
    ),
    GatewayFormat(
        "vllm-router",
        arrived=("vllm:num_incoming_requests_total",),
        held=(),  # the router answers 503 while a model is at zero replicas; it exports no queue
        label="model",
        source="vllm-project/production-stack src/vllm_router/services/metrics_service/__init__.py",
    ),
)
FORMATS: Mapping[str, GatewayFormat] = MappingProxyType({f.name: f for f in _FORMATS})


def _format(fmt: str) -> GatewayFormat:
    found = FORMATS.get(fmt)
    if found is None:
        raise GatewayError(f'request path format "{fmt}" must be one of [{", ".join(REQUEST_PATH_FORMATS)}]')
    return found


@cache
def selection(fmt: str) -> Selection:
    """The families ``read`` reads for ``fmt``: parse with this, so nothing else in the body is parsed."""
    spec = _format(fmt)
    return Selection.of((*spec.arrived, *spec.turned_away, *spec.held))


def read(exposition: Exposition, fmt: str, match: str | None) -> tuple[float | None, float | None]:
    """``(arrived, held)`` of the workload ``match`` names (every series of the format when ``None``); see
    the module docstring. ``GatewayError`` when neither has a series of it, or a counted value cannot be
    right."""
    spec = _format(fmt)
    arrived, arrived_names, arrived_series = _read(
        exposition, (spec.arrived, spec.turned_away), spec.labels, match, "arrivals"
    )
    held, held_names, held_series = _read(exposition, (spec.held,), spec.labels, match, "held requests")
    if not arrived_series and not held_series:
        names = [*arrived_names, *held_names]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        wanted = "" if match is None else " with " + " or ".join(f'{k}="{match}"' for k in spec.labels)
        raise NoSeries(f"no series of {listed}{wanted}")
    return arrived, held


def _read(
    exposition: Exposition,
    families: tuple[tuple[str, ...], ...],
    labels: tuple[str, ...],
    match: str | None,
    what: str,
) -> tuple[float | None, list[str], int]:
    """The sum over ``families`` (each every name of one family, newest first) of their series of
    ``match``, ``None`` when none of them can say; the name read of each; how many series were counted."""
    total: float | None = None
    names: list[str] = []
    counted = 0
    for family in (f for f in families if f):
        name, samples = _family(exposition, family)
        value, series = _sum(name, samples, labels, match, what)
        names.append(name)
        counted += series
        if value is not None:
            total = value if total is None else total + value
    return total, names, counted


def _family(exposition: Exposition, names: tuple[str, ...]) -> tuple[str, Sequence[tuple[Labels, float]]]:
    """The first of ``names`` the exposition has, and its samples; else the newest name and none."""
    for name in names:
        samples = exposition.get(name)
        if samples:
            return name, samples
    return names[0], ()


def _sum(
    name: str, samples: Sequence[tuple[Labels, float]], labels: tuple[str, ...], match: str | None, what: str
) -> tuple[float | None, int]:
    """The sum of the series of ``match`` and how many there are; ``None`` when there are no samples, or
    when a match is asked and no series carries any of ``labels``."""
    if not samples:
        return None, 0
    if match is None:
        counted = list(samples)
    elif not any(k in lab for lab, _ in samples for k in labels):
        return None, 0
    else:
        counted = [(lab, v) for lab, v in samples if any(lab.get(k) == match for k in labels)]
    for lab, value in counted:
        why = "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else ""
        if not why and value < 0:
            why = f"negative ({value:g})"
        if why:
            raise GatewayError(f"{_series(name, lab)} is {why}: the {what} cannot be read")
    return math.fsum(v for _, v in counted), len(counted)


def _series(name: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"
