"""HPA syncs (horizontal.go), hand-computed sequences. One External AverageValue metric, target 70, whose
total is chosen per sync; pods are all Ready and status == spec, so the proposal is ceil(total / 70)
(outside tolerance)."""

from __future__ import annotations

import pytest

from gpuscale.sim.controller import reconcile
from gpuscale.sim.hpa import (
    Behavior,
    ControllerConfig,
    ExternalReading,
    HpaSpec,
    HpaState,
    MetricSpec,
    PodInfo,
    ScaleTarget,
    ScalingPolicy,
    ScalingRules,
    default_behavior_rules,
)

METRIC = (MetricSpec("m", "External", "AverageValue", 70_000),)
CONFIG = ControllerConfig()


def run(spec: HpaSpec, start: int, proposals: list[int], config: ControllerConfig = CONFIG) -> list[int]:
    """Replicas after each 15 s sync (t = 0, 15, 30, ...) when the metric asks for ``proposals[i]``."""
    state, current, out = HpaState(), start, []
    for i, want in enumerate(proposals):
        pods = tuple(PodInfo(f"p{k}", "Running", True) for k in range(current))
        result = reconcile(
            spec,
            config,
            state,
            ScaleTarget(current, current, pods),
            (ExternalReading((want * 70_000,)),),
            15 * i,
        )
        state = result.state
        current = result.desired if result.rescale else current
        out.append(current)
    return out


def behavior(up: ScalingRules | None = None, down: ScalingRules | None = None) -> Behavior:
    return Behavior(up or default_behavior_rules("up"), down or default_behavior_rules("down"))


def test_legacy_scale_up_limit_is_max_2c_4() -> None:
    # No behavior: max(2*1, 4) = 4, then max(2*4, 4) = 8, then 16, capped at maxReplicas 20.
    assert run(HpaSpec(1, 20, METRIC, None), 1, [50, 50, 50, 50]) == [4, 8, 16, 20]


def test_default_behavior_scale_up_is_max_c_plus_4_2c_per_sync() -> None:
    # Defaults Pods 4/15s, Percent 100/15s, Max: 2 -> max(6, 4) = 6 -> max(10, 12) = 12 -> 24 -> 48 (hpa.md 1.7).
    # The previous event (15 s old) is not strictly newer than now-15, so each sync has a fresh budget.
    assert run(HpaSpec(1, 100, METRIC, behavior()), 2, [60, 60, 60, 60]) == [6, 12, 24, 48]


def test_legacy_initial_scale_down_hold_is_inclusive_300s() -> None:
    # The first sync seeds (5, t=0). The legacy window keeps ts >= now-300 (not Before), so (5, 0) still
    # counts at t=300; at t=315 it is older, all stored proposals are 1, and there is no rate limit: 5 -> 1.
    out = run(HpaSpec(1, 10, METRIC, None), 5, [1] * 23)
    assert out[:21] == [5] * 21  # t = 0 .. 300
    assert out[21:] == [1, 1]  # t = 315, 330


def test_behavior_scale_down_window_is_strict_300s() -> None:
    # Behavior path: window membership is ts > now-300 (After). At t=300, (5, 0) is not newer: 5 -> 1 at once
    # (default scale-down policy 100 % / 15 s).
    out = run(HpaSpec(1, 10, METRIC, behavior()), 5, [1] * 22)
    assert out[:20] == [5] * 20  # t = 0 .. 285
    assert out[20:] == [1, 1]  # t = 300, 315


def test_scale_up_stabilization_is_the_min_of_the_window() -> None:
    # scaleUp window 30 s, from 2 replicas, proposals 2, 8, 8, 8:
    # t=0: recs (2,0) seed + (2,0) -> 2. t=15: recs newer than -15 include 2 -> upRec = min(8, 2) = 2 -> 2.
    # t=30: recs newer than 0: only (8,15) -> upRec 8, capped by max(2+4, ceil(2*2)) = 6 -> 6.
    # t=45: upRec 8; the +4 event at t=30 is not newer than 45-15 = 30, so start = 6: max(10, 12) -> 8.
    up = ScalingRules(30, "Max", default_behavior_rules("up").policies)
    assert run(HpaSpec(1, 20, METRIC, behavior(up=up)), 2, [2, 8, 8, 8]) == [2, 2, 6, 8]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        # Pods 4 / 60 s and Percent 50 / 60 s from 10 replicas, metric asks for 40.
        ("Max", [15, 15, 15, 15, 23]),  # max(10+4, ceil(10*1.5)) = 15; held for 60 s; then max(19, 23) = 23
        ("Min", [14, 14, 14, 14, 18]),  # min(14, 15) = 14; held; then min(18, 21) = 18
        ("Disabled", [10, 10, 10, 10, 10]),
    ],
)
def test_scale_up_select_policy_with_period_accounting(select: str, expected: list[int]) -> None:
    up = ScalingRules(0, select, (ScalingPolicy("Pods", 4, 60), ScalingPolicy("Percent", 50, 60)))  # type: ignore[arg-type]
    assert run(HpaSpec(1, 100, METRIC, behavior(up=up)), 10, [40] * 5) == expected


def test_period_start_counts_both_directions() -> None:
    # Up policy Pods 2 / 60 s, down policy 100 % / 15 s, no windows. t=0: 4 -> 6 (+2). t=15: metric asks 3:
    # 6 -> 3 (-3). t=30: metric asks 10: start = 3 - 2 (added) + 3 (removed) = 4, limit 4 + 2 = 6 -> 6.
    up = ScalingRules(0, "Max", (ScalingPolicy("Pods", 2, 60),))
    down = ScalingRules(0, "Max", (ScalingPolicy("Percent", 100, 15),))
    assert run(HpaSpec(1, 20, METRIC, behavior(up, down)), 4, [10, 3, 10]) == [6, 3, 6]


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (12, [8, 8]),  # above maxReplicas 8: straight to 8, no rate limit, metric ignored
        (0, [0, 0]),  # zero replicas, minReplicas 1: ScalingDisabled (KEDA owns 0 <-> 1)
    ],
)
def test_bypass_paths(start: int, expected: list[int]) -> None:
    down = ScalingRules(0, "Max", (ScalingPolicy("Pods", 1, 60),))
    assert run(HpaSpec(1, 8, METRIC, behavior(down=down)), start, [1, 1]) == expected


def test_below_min_goes_to_min() -> None:
    assert run(HpaSpec(3, 8, METRIC, None), 1, [1]) == [3]


@pytest.mark.parametrize(
    ("configurable", "expected"),
    [
        (True, [10, 10]),  # behavior.scaleUp.tolerance 0.3: ratio 12/10 = 1.2 is within
        (False, [12, 12]),  # gate off (before 1.35): the 0.1 flag applies, 1.2 > 1.1 -> ceil(840/70) = 12
    ],
)
def test_per_direction_tolerance(configurable: bool, expected: list[int]) -> None:
    up = ScalingRules(0, "Max", default_behavior_rules("up").policies, tolerance=0.3)
    spec = HpaSpec(1, 20, METRIC, behavior(up=up))
    assert run(spec, 10, [12, 12], ControllerConfig(configurable_tolerance=configurable)) == expected
