"""The HPA's data and its replica calculator (``replica_calculator.go``), as upstream runs them.

Pure functions over frozen data; names follow ``pkg/controller/podautoscaler`` so each branch can be checked
against the Go source. All metric arithmetic is in integer milli-units; time is whole seconds. The sync
itself (stabilization, rate policies, min/max) is in ``gpuscale.sim.controller``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Behavior",
    "ControllerConfig",
    "ExternalReading",
    "HpaSpec",
    "HpaState",
    "MetricReading",
    "MetricSpec",
    "PodInfo",
    "PodsReading",
    "ScaleTarget",
    "ScalingPolicy",
    "ScalingRules",
    "TimedValue",
    "Tolerances",
    "compute_replicas_for_metrics",
    "default_behavior_rules",
    "tolerances_for",
]

SelectPolicy = Literal["Max", "Min", "Disabled"]
PolicyType = Literal["Pods", "Percent"]
SourceType = Literal["Pods", "External"]
TargetType = Literal["AverageValue", "Value"]


@dataclass(frozen=True)
class ScalingPolicy:
    type: PolicyType
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """``HPAScalingRules`` after API defaulting. ``stabilization_window_seconds`` None on scale-down means
    "use the controller flag" (``maybeInitScaleDownStabilizationWindow``)."""

    stabilization_window_seconds: int | None
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


def default_behavior_rules(direction: Literal["up", "down"]) -> ScalingRules:
    """The defaults ``SetDefaults_HorizontalPodAutoscalerBehavior`` fills in (autoscaling/v2 defaults.go)."""
    if direction == "up":
        return ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))
    return ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``spec.metrics``: a ``Pods`` (AverageValue only) or ``External`` metric."""

    name: str
    source: SourceType
    target_type: TargetType
    target_milli: int


@dataclass(frozen=True)
class HpaSpec:
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    behavior: Behavior | None


@dataclass(frozen=True)
class ControllerConfig:
    """kube-controller-manager flags. ``configurable_tolerance``: the ``HPAConfigurableTolerance`` gate
    (beta, on by default, from Kubernetes 1.35)."""

    sync_period_seconds: int = 15
    tolerance: float = 0.1
    downscale_stabilization_seconds: int = 300
    configurable_tolerance: bool = True


@dataclass(frozen=True)
class Tolerances:
    scale_down: float
    scale_up: float

    def is_within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class PodInfo:
    """A pod matching the target's selector. ``phase`` Pending or Running; ``ready`` the Ready condition."""

    name: str
    phase: Literal["Pending", "Running"]
    ready: bool


@dataclass(frozen=True)
class ScaleTarget:
    """The ``/scale`` subresource plus the pod list the replica calculator lists."""

    spec_replicas: int
    status_replicas: int
    pods: tuple[PodInfo, ...]


@dataclass(frozen=True)
class PodsReading:
    """``custom.metrics.k8s.io`` answer for a Pods metric: pod name -> milli-value."""

    values_milli: Mapping[str, int]


@dataclass(frozen=True)
class ExternalReading:
    """``external.metrics.k8s.io`` answer: one milli-value per returned series (summed by the HPA)."""

    values_milli: tuple[int, ...]


# None: the metrics API returned an error (the metric is invalid this cycle).
MetricReading = PodsReading | ExternalReading | None


@dataclass(frozen=True)
class TimedValue:
    """A timestamped recommendation or scale event (``value`` = replicas or replica change)."""

    value: int
    at: int


@dataclass(frozen=True)
class HpaState:
    """What the controller remembers per HPA between syncs (``recommendations``, ``scaleUpEvents``,
    ``scaleDownEvents``). Lists keep Go's slot order: an outdated slot is overwritten, else appended."""

    recommendations: tuple[TimedValue, ...] = ()
    up_events: tuple[TimedValue, ...] = ()
    down_events: tuple[TimedValue, ...] = ()


def tolerances_for(spec: HpaSpec, config: ControllerConfig) -> Tolerances:
    """``tolerancesForHpa``: the flag, overridden per direction only with behavior and the feature gate."""
    down = up = config.tolerance
    if spec.behavior is not None and config.configurable_tolerance:
        if spec.behavior.scale_down.tolerance is not None:
            down = spec.behavior.scale_down.tolerance
        if spec.behavior.scale_up.tolerance is not None:
            up = spec.behavior.scale_up.tolerance
    return Tolerances(scale_down=down, scale_up=up)


# --- replica_calculator.go ------------------------------------------------------------------------------

_INT32_MAX = 2**31 - 1


def _ceil_replicas(x: float) -> int:
    """``int32(math.Ceil(x))`` as the replica calculator saturates it: at most 2^31-1 (also for +Inf)."""
    if x >= _INT32_MAX or math.isnan(x):
        return _INT32_MAX
    return math.ceil(x)


def _usage_ratio(values: Mapping[str, int], target_milli: int) -> float:
    """``GetMetricUsageRatio``: int64 average (truncating) over target."""
    total = sum(values.values())
    current = total // len(values) if total >= 0 else -(-total // len(values))  # Go int64 division
    return current / target_milli


def calc_plain_metric_replicas(
    values_milli: Mapping[str, int],
    pods: tuple[PodInfo, ...],
    current_replicas: int,
    target_milli: int,
    tol: Tolerances,
) -> int | None:
    """``calcPlainMetricReplicas`` with ``groupPods`` for a non-resource metric; None on error."""
    if not values_milli or not pods:
        return None
    metrics = dict(values_milli)
    ready_count = 0
    unready: list[str] = []
    missing: list[str] = []
    for pod in pods:
        if pod.phase == "Pending":
            unready.append(pod.name)
        elif pod.name not in metrics:
            missing.append(pod.name)
        else:
            ready_count += 1  # a Running pod with a sample counts as ready for non-CPU metrics
    for name in unready:
        metrics.pop(name, None)
    if not metrics:
        return None
    ratio = _usage_ratio(metrics, target_milli)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if tol.is_within(ratio):
            return current_replicas
        return _ceil_replicas(ratio * ready_count)
    if missing:
        if ratio < 1.0:
            for name in missing:
                metrics[name] = target_milli
        elif ratio > 1.0:
            for name in missing:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in unready:
            metrics[name] = 0
    new_ratio = _usage_ratio(metrics, target_milli)
    if tol.is_within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current_replicas
    new_replicas = _ceil_replicas(new_ratio * len(metrics))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (
        new_ratio > 1.0 and new_replicas < current_replicas
    ):
        return current_replicas
    return new_replicas


def _ready_pods(pods: tuple[PodInfo, ...]) -> int | None:
    """``getReadyPodsCount``: Running and Ready pods; error (None) when the selector matches no pod."""
    if not pods:
        return None
    return sum(1 for p in pods if p.phase == "Running" and p.ready)


def external_value_replicas(
    usage_milli: int, target_milli: int, current_replicas: int, pods: tuple[PodInfo, ...], tol: Tolerances
) -> int | None:
    """``GetExternalMetricReplicas`` -> ``getUsageRatioReplicaCount`` (``Value`` target)."""
    ratio = usage_milli / target_milli
    if current_replicas == 0:
        return _ceil_replicas(ratio)
    if tol.is_within(ratio):
        return current_replicas
    ready = _ready_pods(pods)
    if ready is None:
        return None
    return _ceil_replicas(ratio * ready)


def external_average_replicas(
    usage_milli: int, target_milli: int, status_replicas: int, tol: Tolerances
) -> int:
    """``GetExternalPerPodMetricReplicas`` (``AverageValue`` target): basis ``status.replicas``."""
    denominator = target_milli * status_replicas
    ratio = usage_milli / denominator if denominator else math.inf
    if tol.is_within(ratio):
        return status_replicas
    return _ceil_replicas(usage_milli / target_milli)


def compute_replicas_for_metric(
    metric: MetricSpec, reading: MetricReading, target: ScaleTarget, tol: Tolerances
) -> int | None:
    if reading is None:
        return None
    if metric.source == "Pods":
        if not isinstance(reading, PodsReading):
            return None
        return calc_plain_metric_replicas(
            reading.values_milli, target.pods, target.spec_replicas, metric.target_milli, tol
        )
    if not isinstance(reading, ExternalReading) or not reading.values_milli:
        return None  # "no metrics returned from external metrics API"
    usage = sum(reading.values_milli)
    if metric.target_type == "Value":
        return external_value_replicas(usage, metric.target_milli, target.spec_replicas, target.pods, tol)
    return external_average_replicas(usage, metric.target_milli, target.status_replicas, tol)


def compute_replicas_for_metrics(
    spec: HpaSpec, readings: tuple[MetricReading, ...], target: ScaleTarget, tol: Tolerances
) -> int:
    """``computeReplicasForMetrics``: the max valid proposal; -1 when all are invalid, or some are and the
    valid ones ask to scale down."""
    replicas = 0
    invalid = 0
    for metric, reading in zip(spec.metrics, readings, strict=True):
        proposal = compute_replicas_for_metric(metric, reading, target, tol)
        if proposal is None:
            invalid += 1
            continue
        if replicas == 0 or proposal > replicas:
            replicas = proposal
    if invalid >= len(spec.metrics) or (invalid > 0 and replicas < target.spec_replicas):
        return -1
    return replicas
