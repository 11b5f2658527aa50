"""The missing-pod rule of ``scaling.answer``, on small cases: missing pods count as the HPA counts pods
without metrics (replica_calculator.go), so a workload is never scaled down because data is missing."""

from __future__ import annotations

import math

import pytest

from gpuscale.model import BucketCounts, EngineSample, GpuSample, ModelSignals
from gpuscale.scaling import GpuSeries, parse_metadata
from gpuscale.scaling.answer import HPA_TOLERANCE, GpuPod, answer
from gpuscale.scaling.errors import MissingPods
from gpuscale.scaling.view import WorkloadView

NOW = 1000.0
MD = parse_metadata({"targetValue": "60", "window": "0", "staleAfter": "30"})


def fleet(
    fresh: dict[str, float], missing: int, *, stale: bool = False
) -> tuple[list[GpuSeries], list[GpuPod]]:
    series = [
        GpuSeries(f"GPU-{p}", [GpuSample(f"GPU-{p}", NOW - 1, gpu_utilization=u)], pod=p)
        for p, u in fresh.items()
    ]
    pods = [GpuPod(p, "n-fresh") for p in fresh]
    for i in range(missing):
        name = f"gone-{i}"
        if stale:  # its GPU's samples stopped a minute ago
            series.append(
                GpuSeries(f"GPU-{name}", [GpuSample(f"GPU-{name}", NOW - 60, gpu_utilization=99.0)], pod=name)
            )
        pods.append(GpuPod(name, "n-dark", connected=not stale))
    return series, pods


def hpa(value: float, current: int) -> int:
    """The HPA's proposal from an External AverageValue value, with its default tolerance."""
    if abs(value / (60 * current) - 1) <= HPA_TOLERANCE:
        return current
    return math.ceil(value / 60)


@pytest.mark.parametrize(
    ("fresh", "missing", "value", "replicas"),
    [
        # no missing pod: aggregate x pods, as ever
        ({"a": 90, "b": 90}, 0, 180.0, 3),
        # 6 fresh at 70 ask to scale up (70/60); with 4 at 0 the ratio is 420/600: a flip, hold 60 x 10
        ({f"p{i}": 70 for i in range(6)}, 4, 600.0, 10),
        # 3 fresh at 100 ask to scale up; with 1 at 0, 300/240 = 1.25 is still up: 300 (the HPA: 5)
        ({"a": 100, "b": 100, "c": 100}, 1, 300.0, 5),
        # 3 fresh at 10 ask to scale down; the missing one counts as the target: (30 + 60) / 240 = 0.375
        ({"a": 10, "b": 10, "c": 10}, 1, 90.0, 2),
        # 3 fresh at 50 ask to scale down; with 1 at the target (150 + 60) / 240 = 0.875... outside 0.1: 210
        ({"a": 50, "b": 50, "c": 50}, 1, 210.0, 4),
        # 3 fresh at 55: (165 + 60) / 240 = 0.94, within the tolerance: hold 240
        ({"a": 55, "b": 55, "c": 55}, 1, 240.0, 4),
    ],
)
def test_missing_pods_count_as_the_hpa_counts_pods_without_metrics(
    fresh: dict[str, float], missing: int, value: float, replicas: int
) -> None:
    series, pods = fleet(fresh, missing)
    result = answer(MD, WorkloadView(series=series, pods=pods), now=NOW)
    assert result.value == pytest.approx(value)
    assert hpa(result.value, len(pods)) == replicas
    assert result.missing == missing
    if missing:
        assert result.active  # never idle while pods are missing
        assert hpa(result.value, len(pods)) >= min(len(pods), math.ceil(sum(fresh.values()) / 60 + 1e-9))


def test_stale_pods_are_missing_with_their_reason() -> None:
    series, pods = fleet({"a": 70, "b": 70, "c": 70}, 2, stale=True)
    result = answer(MD, WorkloadView(series=series, pods=pods), now=NOW)
    assert result.missing == 2 and result.missing_where == ("n-dark (agent gone: 2 pods)",)
    assert result.value == pytest.approx(300.0)  # 210 with the 2 at 0 is 0.7 of 300: a flip, hold 60 x 5


@pytest.mark.parametrize(
    ("missing", "limit", "unavailable"),
    [(5, "50", False), (6, "50", True), (2, "10", True), (2, "20", False)],
)
def test_more_missing_than_max_missing_percent_is_unavailable(
    missing: int, limit: str, unavailable: bool
) -> None:
    md = parse_metadata({"targetValue": "60", "window": "0", "maxMissingPercent": limit})
    series, pods = fleet({f"p{i}": 70 for i in range(10 - missing)}, missing)
    if unavailable:
        with pytest.raises(MissingPods) as info:
            answer(md, WorkloadView(series=series, pods=pods), now=NOW)
        assert (
            f"{missing} of 10 GPU pods have no fresh sample (more than maxMissingPercent ({limit} %))"
            in str(info.value)
        )
        assert "n-dark (no device listed:" in str(info.value)
    else:
        assert answer(md, WorkloadView(series=series, pods=pods), now=NOW).missing == missing


def test_no_fresh_pod_is_unavailable_never_zero() -> None:
    series, pods = fleet({}, 3, stale=True)
    with pytest.raises(MissingPods, match="3 of 3 GPU pods have no fresh sample \\(none is fresh\\)"):
        answer(MD, WorkloadView(series=series, pods=pods), now=NOW)


def test_pods_of_a_forgotten_node_are_missing() -> None:
    series, pods = fleet({"a": 70}, 0)
    pods.append(GpuPod("b", "n-gone", connected=False, forgotten=True))
    result = answer(MD, WorkloadView(series=series, pods=pods), now=NOW)
    assert result.missing_where == ("n-gone (node forgotten: 1 pod)",)


def _engine(waiting: float, ttft_counts: tuple[float, ...], t: float, tokens: float = 0.0) -> EngineSample:

    h = BucketCounts((0.1, 1.0, float("inf")), ttft_counts)
    return EngineSample(
        t, "vllm", (ModelSignals("m", waiting=waiting, running=1.0, ttft=h, generation_tokens=tokens),)
    )


def test_a_stuck_engine_is_missing_for_latency_never_a_zero() -> None:
    """Requests waiting and none finished in the window: the latency is not known (missing), not 0; with
    nothing waiting, nothing waited: 0."""
    from gpuscale.scaling.engine import EngineSeries

    md = parse_metadata({"profile": "llm-latency"})
    stuck = [_engine(80, (5, 9, 10), NOW - 20 + i) for i in range(20)]  # the histogram never moves
    idle = [_engine(0, (5, 9, 10), NOW - 20 + i) for i in range(20)]
    with pytest.raises(MissingPods):
        answer(
            md, WorkloadView(pods=[GpuPod("stuck", "n1")], engines=[EngineSeries("stuck", stuck)]), now=NOW
        )
    result = answer(
        md, WorkloadView(pods=[GpuPod("idle", "n1")], engines=[EngineSeries("idle", idle)]), now=NOW
    )
    assert (result.value, result.active) == (0.0, False)


@pytest.mark.parametrize("window", ["0", "1"])
def test_a_rate_over_a_window_at_or_below_the_sampling_interval_takes_the_newest_two_readings(
    window: str,
) -> None:
    from gpuscale.scaling.engine import EngineSeries

    md = parse_metadata({"metric": "generation_tokens_per_second", "targetValue": "100", "window": window})
    readings = [_engine(0, (0, 0, 0), NOW - 10.3 + i, tokens=100.0 * i) for i in range(10)]  # 100 tokens/s
    result = answer(
        md, WorkloadView(pods=[GpuPod("p", "n1")], engines=[EngineSeries("p", readings)]), now=NOW
    )
    assert result.value == pytest.approx(100.0)


def test_a_held_answer_holds_the_targets_replicas_pending_pods_too() -> None:
    """10 replicas, 8 Running (2 Pending), at 70 of a target of 60; 4 of the Running missing: the held answer
    is 60 x 10, from which the HPA (dividing by status.replicas) keeps 10, never 8."""
    series, pods = fleet({f"p{i}": 70 for i in range(4)}, 4)
    result = answer(MD, WorkloadView(series=series, pods=pods, replicas=10), now=NOW)
    assert result.value == pytest.approx(600.0) and hpa(result.value, 10) == 10
    assert answer(MD, WorkloadView(series=series, pods=pods), now=NOW).value == pytest.approx(
        480.0
    )  # replicas unknown
