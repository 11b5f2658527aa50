"""Which sample instants a query sees, and what signals compute from them."""

from __future__ import annotations

import pytest

from gpuscale.sim.pipeline import (
    PrometheusPipeline,
    parse_signal,
    per_pod_values,
    query_aggregate,
)
from gpuscale.sim.quantity import keda_milli, parse_quantity_milli
from gpuscale.sim.workload import Observation


@pytest.mark.parametrize(
    ("pipeline", "t", "expected"),
    [
        # exporter every 30 s at offset 11 (11, 41, 71 ...), scrapes every 15 s at offset 7 (7, 22, 37, 52 ...)
        # query at 60: last scrape 52, which holds the collection at 41
        (PrometheusPipeline(30, 15, 0, 0, 11, 7), 60, (41,)),
        (PrometheusPipeline(30, 15, 0, 0, 11, 7), 40, (11,)),  # last scrape 37 -> collection 11: 29 s stale
        (PrometheusPipeline(30, 15, 10, 0, 11, 7), 60, (11,)),  # 10 s delay: query at 50 -> scrape 37 -> 11
        (PrometheusPipeline(30, 15, 0, 30, 11, 7), 60, (11, 41)),  # range 30 s: scrapes 37, 52
        (PrometheusPipeline(30, 30, 0, 0, 0, 0), 5, (0,)),
        (PrometheusPipeline(30, 15, 0, 0, 11, 7), 5, ()),  # nothing scraped yet
    ],
)
def test_prometheus_sample_times(pipeline: PrometheusPipeline, t: int, expected: tuple[int, ...]) -> None:
    assert pipeline.sample_times(t) == expected


def test_per_pod_values_average_each_pod_where_present() -> None:
    obs = [
        Observation(10, 100.0, ("a",), ("b",)),
        Observation(10, 50.0, ("a", "b"), ()),
    ]
    assert per_pod_values(obs) == {"a": 75.0, "b": 25.0}  # b: (0 loading + 50) / 2


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("avg", 25.0),
        ("sum", 100.0),
        ("max", 40.0),
        ("min", 10.0),
        ("count", 4.0),
        ("p50", 25.0),
        ("p90", 37.0),
    ],  # p90: rank 0.9 * 3 = 2.7 between 30 and 40 -> 37
)
def test_aggregate(agg: str, expected: float) -> None:
    assert query_aggregate([10.0, 20.0, 30.0, 40.0], agg) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("demand", True),
        ("gpu_utilization", True),
        ("avg(gpu_utilization)", True),
        ("p95( gpu_utilization )", True),
        ("mean(gpu_utilization)", False),
        ("rate(x[1m])", False),
    ],
)
def test_parse_signal(text: str, ok: bool) -> None:
    assert (parse_signal(text) is not None) is ok


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        ("70", 70_000),
        ("500m", 500),
        ("1.5k", 1_500_000),
        (70, 70_000),
        ("0.0001", 1),
        ("1Ki", 1_024_000),
        ("abc", None),
        (True, None),
    ],
)
def test_quantities_round_up_to_milli(value: object, milli: int | None) -> None:
    assert parse_quantity_milli(value) == milli


@pytest.mark.parametrize(
    ("value", "milli"),
    [(70.0009, 70_001), (70.0004, 70_000), (1.001, 1_001), (0.0004, 0), (-3.0, 0), (float("nan"), 0)],
)
def test_keda_values_round_to_the_nearest_milli(value: float, milli: int) -> None:
    """KEDA 2.20 parses ``%.3f`` (2.19 truncated: 1.001 became 1000 milli, as 1.001 * 1000 < 1001)."""
    assert keda_milli(value) == milli
