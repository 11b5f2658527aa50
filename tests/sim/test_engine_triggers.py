"""gpuscale's engine triggers in the simulator: the agents read each Ready pod's engine (its share of the
waiting and running requests, its KV-cache fill) and the scaler's code answers (``gpuscale.scaling``)."""

from __future__ import annotations

import math

import pytest

from gpuscale.sim import Result, ScenarioError, parse_scenario, run_scenario
from gpuscale.sim.scaler import LOADING_ENGINE, engine_series, gpuscale_series

from .scenario_text import GPUSCALE, external, head, policy

SCENARIO = head(
    name="engine",
    duration=400,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 1000, initialReplicas: 2, "
    "maxQueueSeconds: 60, requestSeconds: 4}",
    demand="{shape: constant, value: 40}",
) + policy(
    external('{scalerAddress: s:1, metric: METRIC, targetValue: "5"}'),
    name="g",
    target="vllm",
    pipeline=GPUSCALE,
    spec=["minReplicaCount: 1", "maxReplicaCount: MAX"],
)


def _run(metric: str, maximum: int = 2) -> Result:
    return run_scenario(parse_scenario(SCENARIO.replace("METRIC", metric).replace("MAX", str(maximum))))


def test_queue_length_is_the_sum_of_the_ready_pods_waiting_requests() -> None:
    """40 requests/s on 2 replicas of 5: after 60 s the queue holds 60 s of arrivals, 2400 requests, 1200 on
    each pod; the scaler sums the pods' means over the 10 s window."""
    (tl,) = _run("queue_length").timelines
    assert tl.waiting[200] == pytest.approx(2400)
    assert tl.metric[210] == pytest.approx(2400)  # the HPA's read at 210 (a sync): 2 pods x 1200
    assert tl.metric[15] == pytest.approx(sum(30 * (t + 1) for t in range(6, 16)) / 10)  # the window's mean


def test_requests_in_flight_and_kv_cache() -> None:
    (inflight,) = _run("requests_in_flight").timelines
    assert inflight.metric[210] == pytest.approx(2400 + 10 * 4)  # + 10 running (served) x 4 s
    (kv,) = _run("kv_cache_usage").timelines
    assert kv.metric[210] == pytest.approx(100.0 * 2)  # full on both pods: the aggregate x pods


def test_a_loading_pod_is_coming_capacity_and_a_backlog_still_cascades() -> None:
    """Scaling out while the new pods load (1000 s): the loading pods are neither idle nor missing (every
    sync reads a value), but a backlog (`queue_length`) keeps growing while they load, so each sync asks for
    more: 2 -> 4 -> 8 -> 16 -> 20, the cascade; the demand (`request_rate`: finished + growth of those in
    flight) reads 40 requests/s whatever the queue does, and asks for ceil(40 / 5) = 8 once, at the legacy
    rate limit (4 at the first sync, 8 at the next). Once the queue sheds at its timeout (released vLLM
    counts none of those requests) it reads what the 2 Ready pods serve, 10: the backlog hold keeps the 8
    (without it, 8 -> 2 at 390 s, the loading pods deleted)."""
    (queue,) = _run("queue_length", maximum=20).timelines
    ups = [
        (t, queue.desired[t])
        for t in range(1, len(queue.desired))
        if queue.desired[t] != queue.desired[t - 1]
    ]
    assert ups == [(15, 8), (30, 16), (45, 20)]
    assert all(not math.isnan(queue.metric[t]) for t in range(15, 400, 15))
    (rate,) = _run("request_rate", maximum=20).timelines
    ups = [
        (t, rate.desired[t]) for t in range(1, len(rate.desired)) if rate.desired[t] != rate.desired[t - 1]
    ]
    assert ups == [(15, 4), (30, 8)]
    assert all(rate.metric[t] == pytest.approx(40.0) for t in range(15, 60, 15))
    assert all(rate.metric[t] == pytest.approx(40.0) for t in range(90, 400, 15))  # held: 8 x the target


def test_the_series_say_why_a_loading_pods_engine_is_missing() -> None:
    from gpuscale.model import EngineSample, GpuSample, ModelSignals

    gpu = {
        "pod-0": [GpuSample("GPU-sim-pod-0", 9.0, gpu_utilization=100.0)],
        "pod-1": [GpuSample("GPU-sim-pod-1", 9.0, gpu_utilization=0.0)],
    }
    reading = EngineSample(
        9.0, "vllm", (ModelSignals("sim", waiting=3.0, running=20.0, kv_cache_usage=100.0),)
    )
    series = engine_series({"pod-0": [reading]}, gpuscale_series(gpu, 10.0), 10.0)
    assert [(e.pod, len(e.samples), e.missing) for e in series] == [
        ("sim/pod-0", 1, None),
        ("sim/pod-1", 0, LOADING_ENGINE),
    ]


def test_an_engine_metric_the_workload_model_does_not_produce_is_refused() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(SCENARIO.replace("METRIC", "ttft_p95").replace("MAX", "2"))
    assert info.value.problems == (
        'policies[0].scaledObject.spec.triggers[0].metadata: parameter "metric" value "ttft_p95": the simulator '
        "models metric gpu_utilization, queue_length, requests_in_flight, kv_cache_usage, request_rate only",
    )
