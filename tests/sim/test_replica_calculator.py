"""The per-metric proposals (replica_calculator.go), hand-computed. Values are milli-units: 70 -> 70000."""

from __future__ import annotations

import pytest

from gpuscale.sim.hpa import (
    ExternalReading,
    HpaSpec,
    MetricSpec,
    PodInfo,
    ScaleTarget,
    Tolerances,
    calc_plain_metric_replicas,
    compute_replicas_for_metrics,
    external_average_replicas,
    external_value_replicas,
)

TOL = Tolerances(0.1, 0.1)


def ready(*names: str) -> tuple[PodInfo, ...]:
    return tuple(PodInfo(n, "Running", True) for n in names)


def pending(*names: str) -> tuple[PodInfo, ...]:
    return tuple(PodInfo(n, "Pending", False) for n in names)


def loading(*names: str) -> tuple[PodInfo, ...]:
    return tuple(PodInfo(n, "Running", False) for n in names)


@pytest.mark.parametrize(
    ("values", "pods", "current", "expected"),
    [
        # hpa.md 1.8: avg 90, ratio 90/70 = 1.286 > 1.1 -> ceil(1.286 * 3) = ceil(3.857) = 4
        ({"a": 90_000, "b": 95_000, "c": 85_000}, ready("a", "b", "c"), 3, 4),
        # avg 66.67 (int milli 66666), ratio 0.952 within [0.9, 1.1] -> stay at 3
        ({"a": 64_000, "b": 66_000, "c": 70_000}, ready("a", "b", "c"), 3, 3),
        # 2 Ready at 100 + 2 Pending, ratio 1.43 > 1 with unready pods: Pending := 0,
        # new avg 200/4 = 50, ratio 0.714: direction flipped -> keep current 4
        ({"a": 100_000, "b": 100_000}, ready("a", "b") + pending("c", "d"), 4, 4),
        # same, but the new pods are Running-not-Ready reporting 0: they count as ready with value 0,
        # avg 50, ratio 0.714 -> ceil(0.714 * 4) = ceil(2.857) = 3
        ({"a": 100_000, "b": 100_000, "c": 0, "d": 0}, ready("a", "b") + loading("c", "d"), 4, 3),
        # 4 pods, d has no sample; ratio 20/70 = 0.286 < 1: missing := target 70,
        # new avg (60 + 70) / 4 = 32.5, ratio 0.464 -> ceil(0.464 * 4) = ceil(1.857) = 2
        ({"a": 20_000, "b": 20_000, "c": 20_000}, ready("a", "b", "c", "d"), 4, 2),
        # 3 pods, c missing; ratio 100/70 > 1: missing := 0, new avg 66.67, ratio 0.952 within -> keep 3
        ({"a": 100_000, "b": 100_000}, ready("a", "b", "c"), 3, 3),
        # 3 pods, c missing; ratio 140/70 = 2: missing := 0, avg 93.33, ratio 1.333 -> ceil(1.333 * 3) = 4
        ({"a": 140_000, "b": 140_000}, ready("a", "b", "c"), 3, 4),
        # int64 average truncates: (70001 + 70000) / 2 = 70000 (not 70000.5) -> ratio exactly 1 -> keep 2
        ({"a": 70_001, "b": 70_000}, ready("a", "b"), 2, 2),
    ],
)
def test_pods_average_value(
    values: dict[str, int], pods: tuple[PodInfo, ...], current: int, expected: int
) -> None:
    assert calc_plain_metric_replicas(values, pods, current, 70_000, TOL) == expected


def test_pods_metric_with_only_pending_samples_is_an_error() -> None:
    assert calc_plain_metric_replicas({"a": 5}, pending("a"), 1, 70_000, TOL) is None


@pytest.mark.parametrize(
    ("usage", "status", "expected"),
    [
        (270_000, 3, 4),  # hpa.md 1.8: ratio 270/(70*3) = 1.286 -> ceil(270/70) = ceil(3.857) = 4
        (220_000, 3, 3),  # ratio 220/210 = 1.048 within -> statusReplicas 3
        (60_000, 3, 1),  # ratio 60/210 = 0.286 -> ceil(60/70) = 1
        (100_000, 2, 2),  # avg GPU util 100 reported as is: ceil(100/70) = 2 whatever the load -- the trap
    ],
)
def test_external_average_value(usage: int, status: int, expected: int) -> None:
    assert external_average_replicas(usage, 70_000, status, TOL) == expected


@pytest.mark.parametrize(
    ("usage", "current", "pods", "expected"),
    [
        # ratio 100/70 = 1.429; basis = Running+Ready pods = 2 (the Pending one does not count): ceil(2.857) = 3
        (100_000, 3, ready("a", "b") + pending("c"), 3),
        (75_000, 2, ready("a", "b"), 2),  # ratio 1.071 within -> current 2
        (100_000, 2, loading("a", "b"), 0),  # no Ready pods: ceil(1.429 * 0) = 0 (kubernetes#130130)
        (140_000, 0, (), 2),  # current 0: ceil(ratio) = ceil(2.0) = 2
    ],
)
def test_external_value(usage: int, current: int, pods: tuple[PodInfo, ...], expected: int) -> None:
    assert external_value_replicas(usage, 70_000, current, pods, TOL) == expected


def _two_metrics() -> HpaSpec:
    return HpaSpec(
        1,
        10,
        (
            MetricSpec("a", "External", "AverageValue", 70_000),
            MetricSpec("b", "External", "AverageValue", 70_000),
        ),
        None,
    )


@pytest.mark.parametrize(
    ("readings", "spec_replicas", "expected"),
    [
        ((ExternalReading((280_000,)), ExternalReading((140_000,))), 3, 4),  # max(4, 2) = 4
        ((ExternalReading((70_000,)), None), 3, -1),  # one invalid and the valid one says 1 < 3: skip
        ((ExternalReading((420_000,)), None), 3, 6),  # one invalid but the valid one scales up: 6
        ((None, None), 3, -1),  # all invalid
    ],
)
def test_several_metrics(
    readings: tuple[ExternalReading | None, ...], spec_replicas: int, expected: int
) -> None:
    target = ScaleTarget(spec_replicas, spec_replicas, ready(*[f"p{i}" for i in range(spec_replicas)]))
    assert compute_replicas_for_metrics(_two_metrics(), readings, target, TOL) == expected


@pytest.mark.parametrize(
    ("ratio", "tolerances", "within"),
    [
        (0.9, Tolerances(0.1, 0.1), True),  # both bounds inclusive
        (1.1, Tolerances(0.1, 0.1), True),
        (1.2, Tolerances(0.1, 0.3), True),  # per-direction scale-up tolerance
        (0.85, Tolerances(0.1, 0.3), False),
    ],
)
def test_tolerance_bounds(ratio: float, tolerances: Tolerances, within: bool) -> None:
    assert tolerances.is_within(ratio) is within
