"""Smoothing, aggregation, percentiles and the value semantics, with injected time."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model import GpuSample, ProcessSample
from gpuscale.scaling import (
    GpuSeries,
    NoDataError,
    aggregate,
    evaluate,
    extractor,
    parse_metadata,
    percentile,
    smooth,
)

NOW = 1000.0


def util(*points: tuple[float, float | None], uuid: str = "GPU-0") -> list[GpuSample]:
    """Samples of gpu_utilization at the given ages (seconds before NOW)."""
    return [GpuSample(uuid, NOW - age, gpu_utilization=value) for age, value in points]


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 95, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 90, 3.7),
        ([10.0, 20.0], 95, 19.5),
        ([0.0, 100.0], 99, 99.0),
        ([1.0, 2.0, 3.0], 0, 1.0),
        ([1.0, 2.0, 3.0], 100, 3.0),
    ],
)
def test_percentile_is_linear_between_ranks(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.integers(0, 100))
def test_percentile_bounds_and_order(values: list[float], q: int) -> None:
    p = percentile(values, q)
    assert min(values) <= p <= max(values)
    assert percentile(values, min(q + 1, 100)) >= p


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("max", 90.0),
        ("min", 10.0),
        ("avg", 50.0),
        ("sum", 200.0),
        ("p50", 50.0),
        ("p90", 81.0),
        ("p99", 89.1),
    ],
)
def test_aggregate(how: Any, expected: float) -> None:
    assert aggregate([10.0, 40.0, 60.0, 90.0], how) == pytest.approx(expected)


def test_empty_inputs_are_programming_errors() -> None:
    with pytest.raises(ValueError):
        aggregate([], "avg")
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@pytest.mark.parametrize(
    ("points", "window", "stale_after", "expected"),
    [
        ([(0, 10.0), (4, 20.0), (8, 30.0), (12, 40.0)], 10, 30, (20.0, 3, 0.0)),  # mean within the window
        ([(0, 10.0), (4, 20.0), (10, 30.0)], 10, 30, (20.0, 3, 0.0)),  # the edge counts
        ([(0, 10.0), (4, 20.0)], 0, 30, (10.0, 1, 0.0)),  # window 0: the newest sample
        ([(15, 10.0), (20, 20.0)], 10, 30, (10.0, 1, 15.0)),  # none in the window: the newest fresh one
        ([(5, 10.0), (25, 20.0), (40, 99.0)], 60, 30, (15.0, 2, 5.0)),  # stale samples never count
        ([(0, None), (2, 50.0)], 10, 30, (50.0, 1, 2.0)),  # unreported values never count
        ([(-3, 70.0), (1, 30.0)], 10, 30, (50.0, 2, 0.0)),  # from the future: age 0
        ([(31, 10.0)], 60, 30, None),
        ([(0, None)], 10, 30, None),
        ([], 10, 30, None),
    ],
)
def test_smooth(
    points: list[tuple[float, float | None]], window: float, stale_after: float, expected: Any
) -> None:
    oldest_first = sorted(util(*points), key=lambda s: s.timestamp)  # as agents send and the state keeps them
    result = smooth(
        oldest_first, extractor("gpu_utilization"), now=NOW, window=window, stale_after=stale_after
    )
    if expected is None:
        assert result is None
    else:
        assert result is not None
        assert (result.value, result.samples, result.newest_age) == pytest.approx(expected)


FULL = GpuSample(
    "GPU-0",
    NOW,
    gpu_utilization=90.0,
    memory_utilization=40.0,
    memory_used_bytes=60 * 2**30,
    memory_total_bytes=80 * 2**30,
    temperature_celsius=65.0,
    power_watts=350.0,
    power_limit_watts=700.0,
    processes=(
        ProcessSample(1, used_memory_bytes=10 * 2**30, sm_utilization=30.0),
        ProcessSample(2, used_memory_bytes=30 * 2**30, sm_utilization=50.0),
        ProcessSample(3, used_memory_bytes=None, sm_utilization=None),
    ),
)


@pytest.mark.parametrize(
    ("metric", "share", "pids", "expected"),
    [
        ("gpu_utilization", "gpu", None, 90.0),
        ("memory_utilization", "gpu", None, 40.0),
        ("memory_used", "gpu", None, 60.0 * 2**30),
        ("memory_used_percent", "gpu", None, 75.0),
        ("temperature", "gpu", None, 65.0),
        ("power", "gpu", None, 350.0),
        ("power_percent", "gpu", None, 50.0),
        ("gpu_utilization", "container", None, 80.0),
        ("gpu_utilization", "container", frozenset({2}), 50.0),
        ("gpu_utilization", "container", frozenset({3}), None),  # its process reports nothing
        ("gpu_utilization", "container", frozenset({9}), 0.0),  # no process of its own: idle
        ("memory_used", "container", frozenset({1, 3}), 10.0 * 2**30),
        ("memory_used_percent", "container", frozenset({2}), 37.5),
    ],
)
def test_extractor(metric: Any, share: Any, pids: frozenset[int] | None, expected: float | None) -> None:
    assert extractor(metric, share, pids)(FULL) == expected


def test_extractor_absent_fields_and_caps() -> None:
    bare = GpuSample("GPU-0", NOW)
    for metric in ("gpu_utilization", "memory_used_percent", "power_percent", "temperature"):
        assert extractor(metric)(bare) is None
    busy = GpuSample(
        "GPU-0", NOW, processes=(ProcessSample(1, sm_utilization=70.0), ProcessSample(2, None, 60.0))
    )
    assert extractor("gpu_utilization", "container")(busy) == 100.0
    assert (
        extractor("memory_used_percent", "container")(
            GpuSample("GPU-0", NOW, processes=(ProcessSample(1, 5),))
        )
        is None
    )
    with pytest.raises(ValueError):
        extractor("power", "container")


def series(uuid: str, value: float | None, pod: str | None = None, age: float = 0.0) -> GpuSeries:
    return GpuSeries(uuid, util((age, value), uuid=uuid), pod=pod)


def test_workload_value_is_aggregate_times_pods() -> None:
    meta = parse_metadata({"targetValue": "60", "window": "0"})
    result = evaluate(
        meta,
        [
            series("GPU-0", 90.0, "ml/a"),
            series("GPU-1", 70.0, "ml/a"),  # a pod with two GPUs counts once
            series("GPU-2", 50.0, "ml/b"),
            series("GPU-3", None, "ml/c"),  # reports nothing: neither GPU nor pod counts
            series("GPU-4", 10.0, "ml/d", age=60),  # stale
        ],
        now=NOW,
    )
    assert (result.aggregate, result.pods, result.gpus, result.skipped) == (70.0, 2, 3, 2)
    assert result.value == 140.0  # KEDA AverageValue: ceil(140 / 60) = 3 replicas
    assert result.active and result.newest_sample_age == 0.0


def test_shared_gpu_counts_once_but_every_pod_counts() -> None:
    meta = parse_metadata({"targetValue": "60", "window": "0"})
    shared = util((0, 80.0))
    result = evaluate(meta, [GpuSeries("GPU-0", shared, "ml/a"), GpuSeries("GPU-0", shared, "ml/b")], now=NOW)
    assert (result.gpus, result.pods, result.value) == (1, 2, 160.0)


def test_container_share_counts_each_pod_on_a_shared_gpu() -> None:
    meta = parse_metadata({"targetValue": "60", "window": "0", "share": "container"})
    sample = GpuSample(
        "GPU-0",
        NOW,
        gpu_utilization=100.0,
        processes=(ProcessSample(1, None, 20.0), ProcessSample(2, None, 60.0)),
    )
    result = evaluate(
        meta,
        [
            GpuSeries("GPU-0", [sample], "ml/a", frozenset({1})),
            GpuSeries("GPU-0", [sample], "ml/b", frozenset({2})),
        ],
        now=NOW,
    )
    assert (result.gpus, result.pods, result.aggregate, result.value) == (2, 2, 40.0, 80.0)


@pytest.mark.parametrize(
    ("metadata", "expected_value"),
    [
        ({"targetValue": "60", "scope": "node", "aggregation": "max"}, 90.0),
        ({"targetValue": "60", "scope": "pool", "nodeSelector": "a=b", "aggregation": "sum"}, 150.0),
    ],
)
def test_node_and_pool_report_the_aggregate(metadata: dict[str, str], expected_value: float) -> None:
    result = evaluate(parse_metadata(metadata), [series("GPU-0", 90.0), series("GPU-1", 60.0)], now=NOW)
    assert result.value == expected_value and result.pods == 0


@pytest.mark.parametrize(("value", "active"), [(5.0, False), (5.5, True)])
def test_activation_is_strictly_greater(value: float, active: bool) -> None:
    meta = parse_metadata({"targetValue": "60", "activationValue": "5"})
    assert (
        evaluate(meta, [series("GPU-0", value, "ml/a"), series("GPU-1", value, "ml/b")], now=NOW).active
        is active
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([], 'no data for metric "gpu_utilization": no GPU in scope'),
        (
            [series("GPU-0", 50.0, "ml/a", age=31), series("GPU-1", None, "ml/a")],
            'no data for metric "gpu_utilization": 2 GPUs in scope: 1 without a sample newer than 30 s, '
            "1 not reporting the metric (NVML reports no utilization for MIG instances, nor for a GPU in MIG "
            "mode: on MIG, scale on gr_engine_active or sm_active (Hopper and newer), or memory_used_percent)",
        ),
    ],
)
def test_no_data_is_an_error_never_zero(given: list[GpuSeries], message: str) -> None:
    with pytest.raises(NoDataError) as info:
        evaluate(parse_metadata({"targetValue": "60"}), given, now=NOW)
    assert str(info.value) == message


def test_workload_scope_needs_pods() -> None:
    with pytest.raises(ValueError, match="GPU-0"):
        evaluate(parse_metadata({"targetValue": "60"}), [series("GPU-0", 50.0)], now=NOW)


@given(st.lists(st.floats(0, 100), min_size=1, max_size=20))
def test_avg_of_equal_pods_matches_classic_hpa(values: list[float]) -> None:
    meta = parse_metadata({"targetValue": "50"})
    result = evaluate(meta, [series(f"GPU-{i}", v, f"ml/p{i}") for i, v in enumerate(values)], now=NOW)
    assert math.isclose(result.value, math.fsum(values), rel_tol=1e-9, abs_tol=1e-9)
