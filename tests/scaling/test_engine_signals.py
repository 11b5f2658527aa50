"""Engine signals over a window (gpuscale.scaling.engine): rates from counter deltas, quantiles from bucket
deltas, restarts that start over, and too little data that is missing, never 0."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model import BucketCounts, EngineSample, ModelSignals
from gpuscale.scaling.engine import (
    counter_rate,
    gauge,
    histogram_delta,
    histogram_quantile,
    in_window,
    merge,
    quantile,
)

INF = math.inf
B = (0.1, 0.5, 1.0, INF)


def es(t: float, *models: ModelSignals) -> EngineSample:
    return EngineSample(t, "vllm", tuple(models))


def h(*counts: float, bounds: tuple[float, ...] = B) -> BucketCounts:
    return BucketCounts(bounds, tuple(counts))


def test_the_window_is_half_open() -> None:
    samples = [es(t) for t in (10.0, 11.0, 12.0, 13.0)]
    assert [s.timestamp for s in in_window(samples, now=13.0, window=2.0)] == [12.0, 13.0]
    assert in_window(samples, now=9.0, window=5.0) == []


def test_gauges_per_pod_and_per_model() -> None:
    s = es(
        1.0,
        ModelSignals("a", waiting=3.0, running=5.0, kv_cache_usage=40.0),
        ModelSignals("b", waiting=1.0, running=2.0, kv_cache_usage=75.0),
    )
    assert gauge(s, "waiting") == 4.0
    assert gauge(s, "running") == 7.0
    assert gauge(s, "kv_cache_usage") == 75.0  # the fullest, not a sum
    assert gauge(s, "waiting", model="b") == 1.0
    assert gauge(s, "waiting", model="c") is None
    partly = es(1.0, ModelSignals("a", waiting=3.0), ModelSignals("b", waiting=None))
    assert gauge(partly, "waiting") is None  # a missing part is not 0
    assert gauge(es(1.0), "waiting") is None


def tokens(t: float, *values: float | None) -> EngineSample:
    names = "abcdef"
    return es(t, *(ModelSignals(names[i], generation_tokens=v) for i, v in enumerate(values)))


def test_rate_from_counter_deltas() -> None:
    samples = [tokens(t, 100.0 + 50 * t) for t in range(0, 11)]
    assert counter_rate(samples, now=10.0, window=5.0, field="generation_tokens") == pytest.approx(50.0)
    assert counter_rate(samples, now=10.0, window=1.0, field="generation_tokens") is None  # one sample
    assert counter_rate(samples, now=30.0, window=5.0, field="generation_tokens") is None  # none
    assert counter_rate(samples, now=10.0, window=5.0, field="prompt_tokens") is None  # not exposed


def test_a_counter_that_goes_backwards_starts_over() -> None:
    samples = [tokens(0, 100.0), tokens(1, 200.0), tokens(2, 30.0), tokens(3, 60.0), tokens(4, 90.0)]
    assert counter_rate(samples, now=4.0, window=10.0, field="generation_tokens") == pytest.approx(30.0)
    just_restarted = [*samples[:2], tokens(2, 30.0)]
    assert counter_rate(just_restarted, now=2.0, window=10.0, field="generation_tokens") is None


@given(st.lists(st.floats(0, 1e9, allow_nan=False), min_size=2, max_size=30))
def test_a_rate_is_never_negative(values: list[float]) -> None:
    samples = [tokens(float(t), v) for t, v in enumerate(values)]
    rate = counter_rate(samples, now=float(len(values)), window=1e9, field="generation_tokens")
    assert rate is None or rate >= 0


def test_rates_add_up_over_models_and_a_missing_model_is_missing() -> None:
    samples = [tokens(t, 10.0 * t, 5.0 * t) for t in range(5)]
    assert counter_rate(samples, 4.0, 10.0, "generation_tokens") == pytest.approx(15.0)
    assert counter_rate(samples, 4.0, 10.0, "generation_tokens", model="b") == pytest.approx(5.0)
    gap = [tokens(t, 10.0 * t, None) for t in range(5)]
    assert counter_rate(gap, 4.0, 10.0, "generation_tokens") is None


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.0, 0.0),
        (0.25, 0.1),  # rank 10: the first bucket's top
        (0.5, 0.3),  # rank 20 in (0.1, 0.5]: 0.1 + 0.4 * 10/20
        (0.95, 0.9),  # rank 38 in (0.5, 1]: 0.5 + 0.5 * 8/10
        (1.0, 1.0),
    ],
)
def test_quantile_interpolates_as_histogram_quantile(q: float, expected: float) -> None:
    assert quantile(q, h(10, 30, 40, 40)) == pytest.approx(expected)


def test_quantile_edges() -> None:
    assert quantile(0.99, h(10, 30, 40, 50)) == 1.0  # in +Inf: the highest finite bound
    assert quantile(0.5, h(0, 0, 0, 0)) is None  # nothing observed: no latency, not 0
    assert quantile(0.5, BucketCounts((INF,), (5.0,))) is None  # one bucket cannot be interpolated
    assert quantile(0.5, BucketCounts((0.1, 1.0), (1.0, 2.0))) is None  # no +Inf bucket
    assert quantile(0.5, h(10, 8, 40, 40)) == pytest.approx(0.5 + 0.5 * 10 / 30)  # made monotonic
    with pytest.raises(ValueError, match=r"^quantile 1.5 must be between 0 and 1$"):
        quantile(1.5, h(1, 1, 1, 1))


def ttft(t: float, hist: BucketCounts | None, model: str = "a") -> EngineSample:
    return es(t, ModelSignals(model, ttft=hist))


def test_quantile_of_the_window_uses_bucket_deltas() -> None:
    # 100 observations before t=0, 50 slow ones by t=5, then 10 fast and 20 medium ones by t=10
    samples = [
        ttft(0, h(100, 100, 100, 100)),
        ttft(5, h(100, 100, 150, 150)),
        ttft(10, h(110, 130, 180, 180)),
    ]
    assert histogram_delta(samples, 10.0, 10.0, "ttft") == h(10, 30, 30, 30)  # t=5 to t=10 (t=0 is outside)
    assert histogram_delta(samples, 10.0, 11.0, "ttft") == h(10, 30, 80, 80)  # the first 100 never count
    assert histogram_quantile(samples, 10.0, 11.0, "ttft", 0.5) == pytest.approx(0.5 + 0.5 * 10 / 50)
    assert histogram_quantile(samples, 10.0, 11.0, "ttft", 0.1) == pytest.approx(0.1 * 8 / 10)
    assert histogram_quantile(samples, 10.0, 10.0, "ttft", 0.5) == pytest.approx(0.1 + 0.4 * 5 / 20)
    assert histogram_quantile(samples, 10.0, 10.0, "itl", 0.5) is None  # not exposed


def test_a_histogram_restart_starts_over() -> None:
    samples = [ttft(0, h(50, 60, 70, 70)), ttft(1, h(1, 2, 3, 3)), ttft(2, h(2, 4, 6, 6))]
    assert histogram_delta(samples, 2.0, 10.0, "ttft") == h(1, 2, 3, 3)
    rebucketed = [
        ttft(0, h(1, 2, 3, 3)),
        ttft(1, h(1, 2, 3, bounds=(0.2, 1.0, INF))),
        ttft(2, h(2, 4, 6, bounds=(0.2, 1.0, INF))),
    ]
    assert histogram_delta(rebucketed, 2.0, 10.0, "ttft") == h(1, 2, 3, bounds=(0.2, 1.0, INF))
    assert histogram_delta(samples[:2], 1.0, 10.0, "ttft") is None  # only the restart sample left


def test_merge() -> None:
    assert merge([h(1, 2, 3, 4), h(1, 1, 1, 1)]) == h(2, 3, 4, 5)
    assert merge([h(1, 2, 3, 4), h(1, 1, 1, bounds=(0.2, 1.0, INF))]) is None
    assert merge([]) is None
    two_models = [
        es(0, ModelSignals("a", ttft=h(0, 0, 0, 0)), ModelSignals("b", ttft=h(0, 0, 0, 0))),
        es(1, ModelSignals("a", ttft=h(1, 1, 1, 1)), ModelSignals("b", ttft=h(0, 2, 2, 2))),
    ]
    assert histogram_delta(two_models, 1.0, 5.0, "ttft") == h(1, 3, 3, 3)
    assert histogram_delta(two_models, 1.0, 5.0, "ttft", model="b") == h(0, 2, 2, 2)
