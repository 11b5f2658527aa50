"""One HPA sync (``reconcileAutoscaler``): bounds, metrics, stabilization, rate limits, scale events.

Pure: ``reconcile(spec, config, state, target, readings, now)`` returns the decision and the controller's new
memory. The legacy path (``behavior`` absent) and the behavior path are separate branches, as upstream.
Window membership follows the Go comparisons exactly: the legacy window keeps ``ts >= now - window``
(``!Before``), the behavior windows and policy periods keep ``ts > now - period`` (``After``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hpa import (
    ControllerConfig,
    HpaSpec,
    HpaState,
    MetricReading,
    ScaleTarget,
    ScalingRules,
    TimedValue,
    compute_replicas_for_metrics,
    tolerances_for,
)

__all__ = ["Reconcile", "reconcile"]

_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)


@dataclass(frozen=True)
class Reconcile:
    """The outcome of one sync. ``desired`` is written to ``/scale`` when ``rescale``. ``metric_replicas``
    is the max per-metric proposal, -1 when metrics made the sync skip, None when metrics were not read."""

    state: HpaState
    desired: int
    rescale: bool
    metric_replicas: int | None
    reason: str


def _store(recs: tuple[TimedValue, ...], old_index: int | None, new: TimedValue) -> tuple[TimedValue, ...]:
    if old_index is None:
        return (*recs, new)
    return tuple(new if i == old_index else r for i, r in enumerate(recs))


def stabilize_recommendation(
    recs: tuple[TimedValue, ...], prenormalized: int, window: int, now: int
) -> tuple[int, tuple[TimedValue, ...]]:
    """``stabilizeRecommendation`` (legacy path): max over recommendations not older than the window."""
    cutoff = now - window
    max_rec = prenormalized
    old: int | None = None
    for i, rec in enumerate(recs):
        if rec.at < cutoff:
            old = i
        elif rec.value > max_rec:
            max_rec = rec.value
    return max_rec, _store(recs, old, TimedValue(prenormalized, now))


def convert_desired_replicas_with_rules(current: int, desired: int, min_r: int, max_r: int) -> int:
    """``convertDesiredReplicasWithRules``: legacy scale-up limit ``max(2*current, 4)``."""
    scale_up_limit = int(max(2.0 * current, 4.0))
    maximum = scale_up_limit if max_r > scale_up_limit else max_r
    if desired < min_r:
        return min_r
    if desired > maximum:
        return maximum
    return desired


def stabilize_with_behaviors(
    recs: tuple[TimedValue, ...], current: int, desired: int, up_window: int, down_window: int, now: int
) -> tuple[int, tuple[TimedValue, ...]]:
    """``stabilizeRecommendationWithBehaviors``: the min/max envelope over one shared list."""
    up_cutoff = now - up_window
    down_cutoff = now - down_window
    up_rec = down_rec = desired
    old: int | None = None
    for i, rec in enumerate(recs):
        if rec.at > up_cutoff:
            up_rec = min(rec.value, up_rec)
        if rec.at > down_cutoff:
            down_rec = max(rec.value, down_rec)
        if rec.at < up_cutoff and rec.at < down_cutoff:
            old = i
    result = current
    if result < up_rec:
        result = up_rec
    if result > down_rec:
        result = down_rec
    return result, _store(recs, old, TimedValue(desired, now))


def _change_in_period(period: int, events: tuple[TimedValue, ...], now: int) -> int:
    """``getReplicasChangePerPeriod``."""
    cutoff = now - period
    return sum(e.value for e in events if e.at > cutoff)


def scale_up_limit(current: int, state: HpaState, rules: ScalingRules, now: int) -> int:
    """``calculateScaleUpLimitWithScalingRules``."""
    if rules.select_policy == "Disabled":
        return current
    pick_min = rules.select_policy == "Min"
    result = _INT32_MAX if pick_min else _INT32_MIN
    for p in rules.policies:
        start = (
            current
            - _change_in_period(p.period_seconds, state.up_events, now)
            + _change_in_period(p.period_seconds, state.down_events, now)
        )
        if p.type == "Pods":
            proposed = start + p.value
        else:
            proposed = math.ceil(float(start) * (1 + float(p.value) / 100))
        result = min(result, proposed) if pick_min else max(result, proposed)
    return result


def scale_down_limit(current: int, state: HpaState, rules: ScalingRules, now: int) -> int:
    """``calculateScaleDownLimitWithBehaviors`` (``Min`` = smallest change = highest floor)."""
    if rules.select_policy == "Disabled":
        return current
    pick_max = rules.select_policy == "Min"
    result = _INT32_MIN if pick_max else _INT32_MAX
    for p in rules.policies:
        start = (
            current
            - _change_in_period(p.period_seconds, state.up_events, now)
            + _change_in_period(p.period_seconds, state.down_events, now)
        )
        if p.type == "Pods":
            proposed = start - p.value
        else:
            proposed = int(float(start) * (1 - float(p.value) / 100))
        result = max(result, proposed) if pick_max else min(result, proposed)
    return result


def convert_with_behavior_rate(
    current: int, desired: int, min_r: int, max_r: int, spec: HpaSpec, state: HpaState, now: int
) -> int:
    """``convertDesiredReplicasWithBehaviorRate``: policies are limits, never targets."""
    assert spec.behavior is not None
    if desired > current:
        limit = max(scale_up_limit(current, state, spec.behavior.scale_up, now), current)
        maximum = min(max_r, limit)
        return maximum if desired > maximum else desired
    if desired < current:
        limit = min(scale_down_limit(current, state, spec.behavior.scale_down, now), current)
        minimum = max(min_r, limit)
        return minimum if desired < minimum else desired
    return desired


def store_scale_event(spec: HpaSpec, state: HpaState, prev: int, new: int, now: int) -> HpaState:
    """``storeScaleEvent``: only with behavior; reuses the last slot older than the longest period."""
    if spec.behavior is None:
        return state
    up = new > prev
    rules = spec.behavior.scale_up if up else spec.behavior.scale_down
    longest = max((p.period_seconds for p in rules.policies), default=0)
    events = state.up_events if up else state.down_events
    cutoff = now - longest
    old: int | None = None
    for i, e in enumerate(events):
        if e.at < cutoff:
            old = i
    stored = _store(events, old, TimedValue(abs(new - prev), now))
    if up:
        return HpaState(state.recommendations, stored, state.down_events)
    return HpaState(state.recommendations, state.up_events, stored)


def reconcile(
    spec: HpaSpec,
    config: ControllerConfig,
    state: HpaState,
    target: ScaleTarget,
    readings: tuple[MetricReading, ...],
    now: int,
    *,
    proposed: int | None = None,
) -> Reconcile:
    """``reconcileAutoscaler``. ``readings`` line up with ``spec.metrics``; None = the metric's API failed.
    ``proposed``: the replicas an oracle asks for, in place of what the metrics propose (exact, so no
    tolerance; and from zero replicas, as KEDA's activation would, where the HPA alone is disabled);
    everything after the metrics (stabilization, rate limits, bounds) applies as upstream."""
    current = target.spec_replicas
    if not state.recommendations:  # recordInitialRecommendation
        state = HpaState((TimedValue(current, now),), state.up_events, state.down_events)
    min_r = spec.min_replicas
    metric_replicas: int | None = None
    if current == 0 and min_r != 0 and proposed is None:  # an oracle's ask is never disabled
        return Reconcile(state, 0, False, None, "ScalingDisabled: the target has zero replicas")
    if current > spec.max_replicas:
        desired, reason = spec.max_replicas, "current replicas above maxReplicas"
    elif current < min_r:
        desired, reason = min_r, "current replicas below minReplicas"
    else:
        if proposed is not None:
            metric_replicas = proposed
        else:
            tol = tolerances_for(spec, config)
            metric_replicas = compute_replicas_for_metrics(spec, readings, target, tol)
        if metric_replicas == -1:
            return Reconcile(state, current, False, -1, "FailedComputeMetricsReplicas: no scaling")
        desired = max(metric_replicas, 0)
        reason = "metric above target" if desired > current else "all metrics below target"
        if spec.behavior is None:
            stabilized, recs = stabilize_recommendation(
                state.recommendations, desired, config.downscale_stabilization_seconds, now
            )
            desired = convert_desired_replicas_with_rules(current, stabilized, min_r, spec.max_replicas)
        else:
            down_window = spec.behavior.scale_down.stabilization_window_seconds
            if down_window is None:  # maybeInitScaleDownStabilizationWindow
                down_window = config.downscale_stabilization_seconds
            up_window = spec.behavior.scale_up.stabilization_window_seconds or 0
            stabilized, recs = stabilize_with_behaviors(
                state.recommendations, current, desired, up_window, down_window, now
            )
            desired = convert_with_behavior_rate(
                current, stabilized, min_r, spec.max_replicas, spec, state, now
            )
        state = HpaState(recs, state.up_events, state.down_events)
    if desired == current:
        return Reconcile(state, current, False, metric_replicas, "desired equals current")
    state = store_scale_event(spec, state, current, desired, now)
    return Reconcile(state, desired, True, metric_replicas, reason)
