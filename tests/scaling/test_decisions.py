"""The demand-based decisions of ``scaling.answer``, on small cases: the demand (``request_rate``), starting
pods as coming capacity, the scale-ahead forecast, the N-1 guard and the KV-cache guard."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from gpuscale.model import EngineSample, GpuSample, ModelSignals
from gpuscale.scaling import GpuSeries, TriggerMetadata, parse_metadata
from gpuscale.scaling.answer import GpuPod, answer
from gpuscale.scaling.engine import EngineSeries
from gpuscale.scaling.errors import MetadataError, MissingPods
from gpuscale.scaling.forecast import TAU_MIN, forecast, kendall_tau, sen_slope
from gpuscale.scaling.profiles import parse_profiles
from gpuscale.scaling.view import WorkloadView

NOW = 10_000.0


def engine(
    pod: str,
    arrivals: Callable[[float], float],
    *,
    seconds: int = 130,
    in_flight: Callable[[float], float] = lambda t: 20.0,
    kv: float = 50.0,
) -> EngineSeries:
    """One reading a second up to NOW of an engine whose arrivals per second are ``arrivals(t)``: its
    finished counter grows by what arrived less what it kept in flight, as a real engine's does."""
    readings = []
    finished = 0.0
    before = in_flight(NOW - seconds)
    for k in range(seconds, -1, -1):
        t = NOW - k
        now_in_flight = in_flight(t)
        finished += arrivals(t) - (now_in_flight - before)
        before = now_in_flight
        waiting = max(0.0, now_in_flight - 20.0)
        signals = ModelSignals(
            "m",
            waiting=waiting,
            running=now_in_flight - waiting,
            kv_cache_usage=kv,
            requests_finished=finished,
        )
        readings.append(EngineSample(t, "vllm", (signals,)))
    return EngineSeries(pod, readings)


def rate_md(**extra: str) -> TriggerMetadata:
    return parse_metadata({"metric": "request_rate", "targetValue": "4", **extra})


# ----- request_rate: the demand --------------------------------------------------------------------------
def test_request_rate_is_finished_plus_the_growth_of_those_in_flight() -> None:
    """Two pods, 6 and 10 requests/s arriving; pod b's queue grows by 3 a second (it serves only 7): its
    finished counter alone says 7, the arrivals 10. The answer is the sum, 16: ceil(16 / 4) = 4 replicas."""
    md = rate_md()
    a = engine("a", lambda t: 6.0)
    b = engine("b", lambda t: 10.0, in_flight=lambda t: 20.0 + 3.0 * (t - NOW + 130))
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    result = answer(md, WorkloadView(pods=pods, engines=[a, b]), now=NOW)
    assert result.value == pytest.approx(16.0)
    assert math.ceil(result.value / 4) == 4


def test_request_rate_of_a_restarted_engine_starts_over_and_is_never_negative() -> None:
    md = parse_metadata({"metric": "request_rate", "targetValue": "4", "window": "10"})
    readings = []
    for k in range(20, -1, -1):
        t = NOW - k
        finished = 5.0 * (20 - k) if k > 5 else 5.0 * (5 - k)  # the engine restarted 5 s ago
        readings.append(
            EngineSample(t, "vllm", (ModelSignals("m", waiting=0, running=10, requests_finished=finished),))
        )
    result = answer(md, WorkloadView(pods=[GpuPod("p", "n")], engines=[EngineSeries("p", readings)]), now=NOW)
    assert result.value == pytest.approx(5.0)


def test_request_rate_without_the_finished_counter_is_a_missing_pod_never_zero() -> None:
    md = rate_md()
    readings = [
        EngineSample(NOW - k, "vllm", (ModelSignals("m", waiting=0, running=10),)) for k in range(10, -1, -1)
    ]
    with pytest.raises(MissingPods):
        answer(md, WorkloadView(pods=[GpuPod("p", "n")], engines=[EngineSeries("p", readings)]), now=NOW)


# ----- starting pods: coming capacity, never idle, never missing -------------------------------------------
def test_a_loading_pod_is_coming_capacity_not_a_missing_pod() -> None:
    """2 Ready pods, 6 loading (their engines refuse connections): before, 6 of 8 missing was UNAVAILABLE
    (over maxMissingPercent 50); now the starting pods are neither missing nor idle: the answer is the Ready
    pods' demand, 40 requests/s, from which the HPA keeps ceil(40 / 4) = 10, counting the 6 coming."""
    md = rate_md()
    ready = [engine(p, lambda t: 20.0) for p in ("a", "b")]
    loading = [EngineSeries(f"new-{i}", (), "engine not read: connect_error") for i in range(6)]
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n1", ready=True)]
    pods += [GpuPod(f"new-{i}", "n2", ready=False) for i in range(6)]
    result = answer(md, WorkloadView(pods=pods, engines=[*ready, *loading], replicas=8), now=NOW)
    assert (result.value, result.loading, result.missing) == (pytest.approx(40.0), 6, 0)
    # readiness not known (an older agent, no API): the same pods are missing pods, as before
    unknown = [GpuPod(p.name, p.node) for p in pods]
    with pytest.raises(MissingPods):
        answer(md, WorkloadView(pods=unknown, engines=[*ready, *loading]), now=NOW)


def test_a_loading_pods_gpu_at_zero_does_not_make_the_workload_look_idle() -> None:
    """GPU utilization, p90: 2 Ready pods at 100 %, 2 loading at 0 %. Counted, the loading ones pull the
    aggregate to 100 x 4 pods... with avg they halve it; left out, the Ready pods' figure counts."""
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "0"}
    )
    series = [
        GpuSeries(f"GPU-{p}", [GpuSample(f"GPU-{p}", NOW - 1, gpu_utilization=u)], pod=p)
        for p, u in (("a", 100.0), ("b", 100.0), ("c", 0.0), ("d", 0.0))
    ]
    ready = {"a": True, "b": True, "c": False, "d": False}
    pods = [GpuPod(p, "n", ready=r) for p, r in ready.items()]
    result = answer(md, WorkloadView(series=series, pods=pods), now=NOW)
    assert (result.aggregate, result.value, result.loading, result.missing) == (100.0, 200.0, 2, 0)


@pytest.mark.parametrize("metric", ["gpu_utilization", "request_rate"])
def test_every_pod_loading_holds_and_is_active(metric: str) -> None:
    """Waking from zero or replacing every pod: nothing is measured and nothing is idle. The answer holds the
    count (target x replicas: the HPA's ratio is 1) and is active, never 0."""
    md = parse_metadata({"metric": metric, "targetValue": "4", "window": "0"})
    pods = [GpuPod(f"p{i}", "n", ready=False) for i in range(3)]
    series = [
        GpuSeries(f"GPU-p{i}", [GpuSample(f"GPU-p{i}", NOW - 1, gpu_utilization=0.0)], pod=f"p{i}")
        for i in range(3)
    ]
    engines = [EngineSeries(f"p{i}", (), "engine not read: connect_error") for i in range(3)]
    result = answer(md, WorkloadView(series=series, pods=pods, engines=engines, replicas=4), now=NOW)
    assert (result.value, result.active, result.loading) == (16.0, True, 3)


# ----- the forecast ---------------------------------------------------------------------------------------
def test_sen_slope_and_kendall_tau_on_known_series() -> None:
    ramp = [(float(t), 6.0 + 0.5 * t) for t in range(20)]
    assert sen_slope(ramp) == pytest.approx(0.5)
    assert kendall_tau([v for _, v in ramp]) == pytest.approx(1.0)
    step = [6.0] * 10 + [40.0] * 10  # a step at half the look-back: 100 concordant pairs of 190
    assert kendall_tau(step) == pytest.approx(100 / 190)
    assert kendall_tau(step) < TAU_MIN
    flat = [6.0] * 20
    assert kendall_tau(flat) == 0.0


def test_the_forecast_on_a_ramp_is_the_present_plus_the_slope_over_the_horizon() -> None:
    ramp = [(float(t), 6.0 + 0.1 * t) for t in range(0, 121, 5)]
    f = forecast(ramp, present=18.0, horizon=120.0)
    assert f.trend and f.value == pytest.approx(18.0 + 0.1 * 120)
    # bounded: adds at most the larger of the present value and the range seen (here 12)
    steep = [(float(t), 1.0 + 1.0 * t) for t in range(0, 121, 5)]
    assert forecast(steep, present=10.0, horizon=1000.0).value == pytest.approx(10.0 + 120.0)


@pytest.mark.parametrize(
    "values",
    [
        [6.0] * 12 + [40.0] * 13,  # a step: no warning, answered at its present value
        [6.0 + (1.0 if i % 2 else -1.0) for i in range(25)],  # noise around a level
        [40.0 - i for i in range(25)],  # a fall: capacity is never removed early
    ],
)
def test_no_trend_no_forecast(values: list[float]) -> None:
    points = [(5.0 * i, v) for i, v in enumerate(values)]
    f = forecast(points, present=values[-1], horizon=120.0)
    assert not f.trend and f.value == values[-1]


def test_scale_ahead_through_answer_on_a_ramp() -> None:
    """Arrivals rising 0.1 requests/s every second on one pod, the cold start learned at 120 s: the answer is
    the demand two minutes ahead, 12 requests/s above today's; without a cold start, or off, today's."""

    def demand(t: float) -> float:
        return 10.0 + 0.1 * (t - NOW + 130)

    series = [engine("a", demand)]
    pods = [GpuPod("a", "n", ready=True)]
    plain = answer(rate_md(), WorkloadView(pods=pods, engines=series), now=NOW)
    ahead_md = rate_md(scaleAhead="auto")
    ahead = answer(ahead_md, WorkloadView(pods=pods, engines=series, cold_start=120.0), now=NOW)
    assert plain.value == pytest.approx(demand(NOW - 4.5), rel=0.01)  # the 10 s window's mean
    assert ahead.value == pytest.approx(plain.value + 0.1 * 120, rel=0.02)
    assert ahead.decided == "ahead 120 s"
    unknown = answer(ahead_md, WorkloadView(pods=pods, engines=series), now=NOW)
    assert unknown.value == pytest.approx(plain.value)


def test_a_scale_down_does_not_read_as_a_rise() -> None:
    """Ten pods shared 40 requests/s; over the last two minutes eight were deleted, one every 15 s, so the two
    left carry more and more of it. Their own readings alone rise 8 -> 40 over the look-back (a trend the
    forecast would follow); with the departed pods' readings the workload's past is 40 throughout."""
    gone_at = {f"old-{i}": NOW - 120 + 15 * i for i in range(8)}

    def pods_at(t: float) -> int:
        return 2 + sum(1 for g in gone_at.values() if t < g)

    left = [engine(p, lambda t: 40.0 / pods_at(t)) for p in ("a", "b")]
    gone = []
    for name, at in gone_at.items():
        e = engine(name, lambda t: 40.0 / pods_at(t))
        gone.append(EngineSeries(name, [s for s in e.samples if s.timestamp < at], departed=True))
    pods = [GpuPod("a", "n", ready=True), GpuPod("b", "n", ready=True)]
    md = rate_md(scaleAhead="auto")
    fooled = answer(md, WorkloadView(pods=pods, engines=left, cold_start=120.0), now=NOW)
    assert fooled.decided.startswith("ahead") and fooled.value > 40.0
    right = answer(md, WorkloadView(pods=pods, engines=[*left, *gone], cold_start=120.0), now=NOW)
    assert right.value == pytest.approx(40.0) and right.decided == ""


# ----- the guards -------------------------------------------------------------------------------------------
def test_the_n_minus_1_guard() -> None:
    """5 replicas; demand rose from 12 to 19 requests/s within the 10 s window: its mean (about 15.5) says
    ceil(15.5 / 4) = 4, but 4 replicas at the target carry 16, not the 19 arriving now: the answer is the
    present, 19 (the HPA keeps 5). With the demand truly lower (12 now), 3 replicas are allowed."""
    md = rate_md()
    pods = [GpuPod("a", "n", ready=True)]
    rising = [engine("a", lambda t: 12.0 if t < NOW - 9 else 12.0 + (t - NOW + 9) * 7 / 9)]
    result = answer(md, WorkloadView(pods=pods, engines=rising, replicas=5), now=NOW)
    assert math.ceil(result.value / 4) == 5 and result.decided == "N-1 guard"
    assert result.present == pytest.approx(19.0, rel=0.01)
    steady = [engine("a", lambda t: 12.0)]
    result = answer(md, WorkloadView(pods=pods, engines=steady, replicas=5), now=NOW)
    assert math.ceil(result.value / 4) == 3 and result.decided == ""


def test_the_guard_never_scales_up() -> None:
    md = rate_md()
    pods = [GpuPod("a", "n", ready=True)]
    spike = [engine("a", lambda t: 4.0 if t < NOW else 40.0)]  # the newest second only
    result = answer(md, WorkloadView(pods=pods, engines=spike, replicas=2), now=NOW)
    assert math.ceil(result.value / 4) <= 2


def test_the_kv_cache_guard_is_a_floor_from_the_kv_cache() -> None:
    """6 Ready replicas, nothing waiting (a queue trigger alone asks for the minimum). With kvCacheGuard 80:
    at 90 % full the answer keeps the 6 (7 would be needed to bring it to 80 %, but the guard never scales
    up); at 50 % it lets them go to ceil(6 x 50 / 80) = 4, the count that keeps the fill at most 80 %; at
    10 %, to 1."""
    md = parse_metadata({"metric": "queue_length", "targetValue": "5", "kvCacheGuard": "80"})
    pods = [GpuPod(f"p{i}", "n", ready=True) for i in range(6)]
    for kv, replicas in ((90.0, 6), (50.0, 4), (10.0, 1)):
        engines = [engine(f"p{i}", lambda t: 10.0, kv=kv) for i in range(6)]
        result = answer(md, WorkloadView(pods=pods, engines=engines, replicas=6), now=NOW)
        assert result.value == 5.0 * replicas, kv
        assert result.decided == "KV-cache guard"


def test_missing_pods_never_lower_the_kv_cache_floor() -> None:
    """8 replicas, 6 Ready at 50 % KV fill and nothing waiting, 2 whose agent is gone: the floor counts each
    missing pod as needed, ceil(6 x 50 / 80) + 2 = 6, where the missing-pod rule alone would give 4."""
    md = parse_metadata({"metric": "queue_length", "targetValue": "5", "kvCacheGuard": "80"})
    pods = [GpuPod(f"p{i}", "n", ready=True) for i in range(6)]
    pods += [GpuPod(f"dark-{i}", "n2", connected=False, ready=True) for i in range(2)]
    engines = [engine(f"p{i}", lambda t: 10.0, kv=50.0) for i in range(6)]
    result = answer(md, WorkloadView(pods=pods, engines=engines, replicas=8), now=NOW)
    assert (result.missing, result.value, result.decided) == (2, 30.0, "KV-cache guard")


# ----- not capped by saturation ----------------------------------------------------------------------------
def _saturated(pods: dict[str, float]) -> list[GpuSeries]:
    return [
        GpuSeries(
            f"GPU-{p}", [GpuSample(f"GPU-{p}", NOW - k, gpu_utilization=u) for k in range(30, -1, -1)], pod=p
        )
        for p, u in pods.items()
    ]


def _serving(pod: str, arrivals: float, served: float) -> EngineSeries:
    """An engine that serves ``served`` requests/s of the ``arrivals`` asked: its queue grows by the rest
    (or, with fewer arriving, drains to 20 in flight at NOW)."""
    rate = arrivals - served
    return engine(
        pod,
        lambda t: arrivals,
        in_flight=lambda t: 20.0 + abs(rate) * ((t - NOW + 130) if rate > 0 else (NOW - t)),
    )


def test_a_queue_at_its_timeout_sheds_aborts_which_are_not_served() -> None:
    """The queue stopped growing: clients give up after waiting, and the engine aborts those requests, 4 a
    second of the 9 arriving (vLLM counts them under ``finished_reason="abort"``). Finished reads 9 a second,
    arrivals 9: without the aborts the demand would look served. Served is finished less aborted, 5: the
    answer is still uncapped by 9 / 5."""
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10"}
    )
    readings = []
    for k in range(30, -1, -1):
        t = NOW - k
        m = ModelSignals(
            "m",
            waiting=300.0,
            running=20.0,
            requests_finished=9.0 * (30 - k),
            requests_aborted=4.0 * (30 - k),
        )
        readings.append(EngineSample(t, "vllm", (m,)))
    pods = [GpuPod("a", "n1", ready=True)]
    result = answer(
        md,
        WorkloadView(series=_saturated({"a": 100.0}), pods=pods, engines=[EngineSeries("a", readings)]),
        now=NOW,
    )
    assert result.value == pytest.approx(180.0)
    # an engine whose counter holds no aborts (SGLang, TGI, Triton count completed requests only) is read as
    # it counts: 5 finished a second, the queue flat, so 5 arriving and 5 served: not uncapped
    completed = [
        EngineSample(
            r.timestamp,
            "sglang",
            (
                replace(
                    r.models[0], requests_finished=5.0 * (30 - (NOW - r.timestamp)), requests_aborted=None
                ),
            ),
        )
        for r in readings
    ]
    result = answer(
        md,
        WorkloadView(series=_saturated({"a": 100.0}), pods=pods, engines=[EngineSeries("a", completed)]),
        now=NOW,
    )
    assert result.value == pytest.approx(100.0)


def test_gpu_utilization_pinned_at_100_is_uncapped_by_the_engines_demand() -> None:
    """Two pods at 100 % (avg x pods: 200, ceil(200 / 70) = 3 replicas). Their engines serve 5 requests/s
    each while 9 arrive at each (the queues grow by 4 a second): the demand is 1.8x what is served, so the
    answer is the utilization that demand would take, 360: ceil(360 / 70) = 6 replicas, and it says why."""
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10"}
    )
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    engines = [_serving("a", 9.0, 5.0), _serving("b", 9.0, 5.0)]
    result = answer(
        md, WorkloadView(series=_saturated({"a": 100.0, "b": 100.0}), pods=pods, engines=engines), now=NOW
    )
    assert result.aggregate == pytest.approx(100.0)
    assert result.value == pytest.approx(360.0, rel=0.01)
    assert math.ceil(result.value / 70) == 6
    assert result.decided.startswith("uncapped by the engines' demand (x1.80")
    # the same pods without engine signals: the utilization as measured, capped
    plain = answer(md, WorkloadView(series=_saturated({"a": 100.0, "b": 100.0}), pods=pods), now=NOW)
    assert plain.value == pytest.approx(200.0) and plain.decided == ""


@pytest.mark.parametrize(
    ("arrivals", "served"),
    [
        (5.0, 5.0),  # served as it comes
        (5.4, 5.0),  # 8 % more: inside the HPA's tolerance, left as measured
        (3.0, 5.0),  # the queue drains: never lowered
    ],
)
def test_the_engines_never_lower_the_utilization_nor_move_it_within_the_tolerance(
    arrivals: float, served: float
) -> None:
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10"}
    )
    pods = [GpuPod("a", "n1", ready=True)]
    engines = [_serving("a", arrivals, served)]
    result = answer(md, WorkloadView(series=_saturated({"a": 90.0}), pods=pods, engines=engines), now=NOW)
    assert result.value == pytest.approx(90.0) and result.decided == ""


def test_uncapping_needs_every_counted_pods_engine() -> None:
    """Pod b's engine has no finished counter (or its scrape failed): what the workload is asked is not known
    for all of it, so the utilization stands as measured (never a made-up figure)."""
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10"}
    )
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    a = _serving("a", 9.0, 5.0)
    no_counter = EngineSeries(
        "b",
        [
            EngineSample(NOW - k, "vllm", (ModelSignals("m", waiting=0, running=5),))
            for k in range(10, -1, -1)
        ],
    )
    failed = EngineSeries("b", _serving("b", 9.0, 5.0).samples, missing="connect_error")
    series = _saturated({"a": 100.0, "b": 100.0})
    for b in (no_counter, failed):
        result = answer(md, WorkloadView(series=series, pods=pods, engines=[a, b]), now=NOW)
        assert result.value == pytest.approx(200.0) and result.decided == ""
    result = answer(md, WorkloadView(series=series, pods=pods, engines=[a]), now=NOW)
    assert result.value == pytest.approx(200.0)


def test_engine_demand_off_leaves_the_utilization_as_measured() -> None:
    pods = [GpuPod("a", "n1", ready=True), GpuPod("b", "n2", ready=True)]
    engines = [_serving("a", 9.0, 5.0), _serving("b", 9.0, 5.0)]
    for extra, value in (({}, 360.0), ({"engineDemand": "auto"}, 360.0), ({"engineDemand": "off"}, 200.0)):
        md = parse_metadata(
            {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10", **extra}
        )
        result = answer(
            md, WorkloadView(series=_saturated({"a": 100.0, "b": 100.0}), pods=pods, engines=engines), now=NOW
        )
        assert result.value == pytest.approx(value, rel=0.01), extra
    # batch-inference keeps its GPUs saturated on sustained load: it does not follow the engines' backlog
    batch = parse_metadata({"profile": "batch-inference"})
    assert batch.engine_demand == "off"
    result = answer(
        batch, WorkloadView(series=_saturated({"a": 100.0, "b": 100.0}), pods=pods, engines=engines), now=NOW
    )
    assert result.value == pytest.approx(200.0)


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        (
            {"metric": "queue_length", "targetValue": "5", "engineDemand": "off"},
            'parameter "engineDemand" value "off" is only allowed with metric gpu_utilization (what the engines '
            'uncap); metric is "queue_length"',
        ),
        (
            {"metric": "gpu_utilization", "targetValue": "70", "scope": "node", "engineDemand": "auto"},
            'parameter "engineDemand" value "auto" is only allowed with scope "workload" (the engines are read '
            'per pod); scope is "node"',
        ),
        (
            {"metric": "gpu_utilization", "targetValue": "70", "engineDemand": "on"},
            'parameter "engineDemand" value "on" must be one of',
        ),
    ],
)
def test_bad_engine_demand_names_the_key(metadata: dict[str, str], problem: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata(metadata)
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_a_profiles_engine_demand_does_not_carry_to_another_scope_or_metric() -> None:
    assert parse_metadata({"profile": "batch-inference", "scope": "node"}).engine_demand is None
    md = parse_metadata({"profile": "batch-inference", "metric": "power_percent", "targetValue": "75"})
    assert md.engine_demand is None


def test_aborts_at_normal_load_do_not_uncap_a_gpu_that_keeps_up() -> None:
    """A GPU at 50 % whose engine aborts a fifth of its requests (clients cancelling), nothing waiting: 10
    finished a second, 2 of them aborts. Arrivals over served read 1.25, but nothing waits, so the GPU is not
    what caps the answer: the utilization stands."""
    md = parse_metadata(
        {"metric": "gpu_utilization", "aggregation": "avg", "targetValue": "70", "window": "10"}
    )
    readings = [
        EngineSample(
            NOW - k,
            "vllm",
            (
                ModelSignals(
                    "m",
                    waiting=0.0,
                    running=20.0,
                    requests_finished=10.0 * (30 - k),
                    requests_aborted=2.0 * (30 - k),
                ),
            ),
        )
        for k in range(30, -1, -1)
    ]
    pods = [GpuPod("a", "n1", ready=True)]
    result = answer(
        md,
        WorkloadView(series=_saturated({"a": 50.0}), pods=pods, engines=[EngineSeries("a", readings)]),
        now=NOW,
    )
    assert result.value == pytest.approx(50.0) and result.decided == ""


def test_a_profile_extending_batch_inference_for_another_metric_or_scope_drops_its_engine_demand() -> None:
    data = {
        "profiles": {
            "batch-node": {"extends": "batch-inference", "scope": "node"},
            "batch-power": {"extends": "batch-inference", "metric": "power_percent", "targetValue": 75},
            "batch-kept": {"extends": "batch-inference", "window": 30},
        }
    }
    got = parse_profiles(data)
    assert got["batch-node"].engine_demand is None
    assert got["batch-power"].engine_demand is None
    assert got["batch-kept"].engine_demand == "off"


def test_a_served_rate_never_scales_down_while_requests_wait() -> None:
    """8 replicas (6 still loading) of which 2 are Ready, their queue standing at 300 waiting while clients
    give up on what waits too long: released vLLM counts none of those, so the arrivals read what the 2
    serve, 10 requests/s (ceil(10 / 5) = 2). While requests wait the demand is more than that: the answer
    holds the 8 ("backlog hold"). With the queue empty the same rate may scale down."""
    md = parse_metadata({"metric": "request_rate", "targetValue": "5", "window": "10"})
    pods = [GpuPod(p, "n", ready=True) for p in ("a", "b")]
    pods += [GpuPod(f"l{i}", "n", ready=False) for i in range(6)]

    def standing(pod: str, waiting: float) -> EngineSeries:
        readings = [
            EngineSample(
                NOW - k,
                "vllm",
                (ModelSignals("m", waiting=waiting, running=20.0, requests_finished=5.0 * (30 - k)),),
            )
            for k in range(30, -1, -1)
        ]
        return EngineSeries(pod, readings)

    held = answer(
        md, WorkloadView(pods=pods, engines=[standing("a", 150), standing("b", 150)], replicas=8), now=NOW
    )
    assert (held.value, held.decided) == (pytest.approx(40.0), "backlog hold")
    empty = answer(
        md, WorkloadView(pods=pods, engines=[standing("a", 0), standing("b", 0)], replicas=8), now=NOW
    )
    assert empty.value == pytest.approx(10.0) and math.ceil(empty.value / 5) == 2


def test_request_rate_sees_through_a_shedding_queue_by_littles_law() -> None:
    """One pod serving 8 requests/s while 30 arrive; its queue stands at 1800, shedding at the clients' 60 s
    timeout. Released vLLM counts none of the shed requests (vllm-project/vllm#31503): finished plus growth
    reads 8. The queue-time counters say the requests that started had waited 60 s: 1800 waiting / 60 s = 30
    joining a second, the demand. Without those counters (an older agent, another engine) it reads 8."""
    md = rate_md(window="10")

    def shedding(with_queue_time: bool) -> EngineSeries:
        readings = []
        for k in range(30, -1, -1):
            n = 30 - k
            m = ModelSignals(
                "m",
                waiting=1800.0,
                running=32.0,
                requests_finished=8.0 * n,
                queue_time_sum=60.0 * 8.0 * n if with_queue_time else None,
                queue_time_count=8.0 * n if with_queue_time else None,
            )
            readings.append(EngineSample(NOW - k, "vllm", (m,)))
        return EngineSeries("a", readings)

    pods = [GpuPod("a", "n", ready=True)]
    seen = answer(md, WorkloadView(pods=pods, engines=[shedding(True)], replicas=1), now=NOW)
    assert seen.value == pytest.approx(30.0)
    blind = answer(md, WorkloadView(pods=pods, engines=[shedding(False)], replicas=1), now=NOW)
    assert blind.value == pytest.approx(8.0)


def test_littles_law_is_not_used_where_the_counters_are_right() -> None:
    """A queue that waits briefly and loses nothing: Little's estimate (4 waiting / 0.5 s = 8) is within its
    noise of the counted arrivals (7.5): the counted figure stands."""
    md = rate_md(window="10")
    readings = [
        EngineSample(
            NOW - k,
            "vllm",
            (
                ModelSignals(
                    "m",
                    waiting=4.0,
                    running=20.0,
                    requests_finished=7.5 * (30 - k),
                    queue_time_sum=0.5 * 7.5 * (30 - k),
                    queue_time_count=7.5 * (30 - k),
                ),
            ),
        )
        for k in range(30, -1, -1)
    ]
    result = answer(
        md, WorkloadView(pods=[GpuPod("a", "n", ready=True)], engines=[EngineSeries("a", readings)]), now=NOW
    )
    assert result.value == pytest.approx(7.5)
