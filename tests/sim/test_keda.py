"""KEDA's operator decisions (RequestScale) and the HPA it generates, hand-computed."""

from __future__ import annotations

import pytest

from gpuscale.sim.keda import (
    Fallback,
    KedaState,
    ScaledObjectSpec,
    TriggerSpec,
    fallback_milli,
    hpa_for,
    request_scale,
)

TRIGGER = TriggerSpec("t", "prometheus", "AverageValue", 70.0, 0.0, "demand")


def so(**kw: object) -> ScaledObjectSpec:
    return ScaledObjectSpec(triggers=(TRIGGER,), **kw)  # type: ignore[arg-type]


def test_generated_hpa_defaults() -> None:
    hpa = hpa_for(so())
    assert (hpa.min_replicas, hpa.max_replicas, hpa.behavior) == (1, 100, None)  # min max(1, 0); nil behavior
    assert hpa.metrics[0].name == "s0-prometheus"
    assert (hpa.metrics[0].source, hpa.metrics[0].target_type, hpa.metrics[0].target_milli) == (
        "External",
        "AverageValue",
        70_000,
    )
    assert hpa_for(so(min_replica_count=3, max_replica_count=9)).min_replicas == 3


@pytest.mark.parametrize(
    ("spec", "state", "current", "active", "error", "now", "replicas"),
    [
        (so(), KedaState(), 0, True, False, 30, 1),  # activation 0 -> 1
        (so(min_replica_count=3), KedaState(), 0, True, False, 30, 3),  # 0 -> minReplicaCount
        (so(), KedaState(100), 5, True, False, 130, None),  # active at N: the HPA owns 1 <-> N
        (so(), KedaState(100), 7, False, False, 400, None),  # 100 + 300 < 400 is false: still cooling down
        (so(), KedaState(100), 7, False, False, 401, 0),  # 401: straight from 7 to 0, bypassing the HPA
        (so(min_replica_count=2, idle_replica_count=0), KedaState(0), 4, False, False, 301, 0),  # to idle
        (so(min_replica_count=2, idle_replica_count=0), KedaState(0), 0, True, False, 330, 2),  # idle -> min
        # Inactive with failing triggers: no scale to zero, fallback or not (fallback acts through the
        # metrics server, hpa.md 2.2-2.3); from zero, an error does not wake the workload either.
        (so(fallback=Fallback(3, 6)), KedaState(0), 2, False, True, 30, None),
        (so(), KedaState(0), 2, False, True, 400, None),
        (so(fallback=Fallback(3, 6)), KedaState(0), 0, False, True, 30, None),
        (so(min_replica_count=2), KedaState(0), 1, False, False, 30, 2),  # below min while inactive
        (so(), KedaState(None, 0), 3, False, False, 1, 0),  # never active: creation + initialCooldown(0) < 1
    ],
)
def test_request_scale(
    spec: ScaledObjectSpec,
    state: KedaState,
    current: int,
    active: bool,
    error: bool,
    now: int,
    replicas: int | None,
) -> None:
    assert request_scale(spec, state, current, active, error, now).replicas == replicas


def test_activation_refreshes_last_active_time() -> None:
    assert request_scale(so(), KedaState(10), 3, True, False, 70).state.last_active_time == 70


def test_active_with_a_failing_trigger_does_not_refresh_last_active_time() -> None:
    """KEDA's RequestScale: active with errors sets Ready Unknown and leaves lastActiveTime, so the cooldown
    runs from the last poll where every trigger answered."""
    assert request_scale(so(), KedaState(10), 3, True, True, 70).state.last_active_time == 10
    assert request_scale(so(), KedaState(10), 0, True, True, 70).replicas == 1  # from zero it still wakes


@pytest.mark.parametrize(
    ("fallback", "metric_type", "current", "ready", "expected"),
    [
        (Fallback(3, 6), "AverageValue", 2, 2, 420_000),  # target x replicas: ceil(420/70) = 6
        (Fallback(3, 6), "Value", 4, 3, 140_000),  # target x replicas / ready = 70 * 6 / 3
        (Fallback(3, 6, "currentReplicasIfHigher"), "AverageValue", 8, 8, 560_000),  # max(8, 6) = 8
        (Fallback(3, 6, "currentReplicasIfLower"), "AverageValue", 8, 8, 420_000),  # min(8, 6) = 6
    ],
)
def test_fallback_metric(
    fallback: Fallback, metric_type: str, current: int, ready: int, expected: int
) -> None:
    assert fallback_milli(fallback, metric_type, 70_000, current, ready) == expected  # type: ignore[arg-type]
