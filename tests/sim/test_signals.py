"""The engine's signals for Prometheus policies (``sum(queue)`` is ``sum(vllm:num_requests_waiting)``), and
bad scenario input about them and the workload's queue and memory."""

from __future__ import annotations

import pytest

from gpuscale.sim import ScenarioError, parse_scenario, run_scenario
from gpuscale.sim.pipeline import Signal, evaluate_scalar, parse_signal, per_pod_values
from gpuscale.sim.workload import EngineQueue, Observation, Pod, Workload, observe

from .scenario_text import head, policy

W = Workload(
    "w", "requests/s", 5.0, load_seconds=100, request_seconds=4.0, base_ttft_seconds=0.1, max_queue_seconds=60
)
# two Ready replicas and one loading (running since 0, Ready at 100), 40 requests/s against 10 of capacity
PODS = (Pod(0, -1, 0, 0), Pod(1, -1, 0, 0), Pod(2, -1, 0, 100))


def _sig(text: str) -> Signal:
    signal = parse_signal(text)
    assert signal is not None
    return signal


def _observations() -> list[Observation]:
    q = EngineQueue(60)
    return [observe(PODS, 40.0, W, t, q.step(t, 40.0, 10.0)) for t in range(50, 52)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sum(queue)", "sum(queue)"),
        ("sum( in_flight )", "sum(in_flight)"),
        ("max(kv_cache)", "max(kv_cache)"),
        ("p95(ttft)", "p95(ttft)"),
        ("avg(gpu_memory)", "avg(gpu_memory)"),
        ("queue", "queue"),
        ("sum(queues)", None),
        ("sum(vllm:num_requests_waiting)", None),
    ],
)
def test_parse_engine_signals(text: str, expected: str | None) -> None:
    signal = parse_signal(text)
    assert (None if signal is None else str(signal)) == expected


def test_the_waiting_requests_are_summed_over_ready_pods_only() -> None:
    obs = _observations()
    # t=50: 30 waiting; t=51: 60 waiting (30 more each second); the query reads the mean of its samples
    assert evaluate_scalar(_sig("sum(queue)"), obs[-1:]) == pytest.approx(60)
    assert evaluate_scalar(_sig("avg(queue)"), obs[-1:]) == pytest.approx(30)
    assert evaluate_scalar(_sig("count(queue)"), obs) == 2  # the loading pod has no engine
    assert evaluate_scalar(_sig("sum(queue)"), obs) == pytest.approx(45)
    # 10 requests/s start, each runs 4 s: 40 running, plus the 60 waiting
    assert evaluate_scalar(_sig("sum(in_flight)"), obs[-1:]) == pytest.approx(100)
    assert evaluate_scalar(_sig("max(kv_cache)"), obs) == 100.0
    assert evaluate_scalar(_sig("avg(ttft)"), obs[-1:]) == pytest.approx(0.1 + 60 / 10)


def test_gpu_fields_come_from_every_running_pod_the_engine_ones_from_ready_pods() -> None:
    (o,) = _observations()[:1]
    assert per_pod_values([o], "gpu_utilization") == {"pod-0": 100.0, "pod-1": 100.0, "pod-2": 0.0}
    assert per_pod_values([o], "gpu_memory") == pytest.approx({"pod-0": 90.0, "pod-1": 90.0, "pod-2": 45.0})
    assert set(per_pod_values([o], "queue")) == {"pod-0", "pod-1"}


def test_with_no_ready_pod_an_engine_query_is_empty() -> None:
    q = EngineQueue(60)
    loading = observe(PODS[2:], 40.0, W, 10, q.step(10, 40.0, 0.0))
    assert loading.waiting == 40  # the queue is held in front of the engines, and no engine reports it
    assert evaluate_scalar(_sig("sum(queue)"), [loading]) is None
    assert evaluate_scalar(_sig("avg(gpu_utilization)"), [loading]) == 0.0


QUEUE_POLICY = head(
    name="queue",
    duration=200,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 300, initialReplicas: 2, maxQueueSeconds: 60}",
    demand="{shape: step, before: 6, after: 40, atSeconds: 10}",
) + policy(
    '[{type: prometheus, metadata: {serverAddress: http://p, query: "sum(vllm:num_requests_waiting)", threshold: "5"}}]',
    name="prometheus-vllm-queue",
    target="vllm",
    pipeline="{prometheus: {exporterIntervalSeconds: 1, scrapeIntervalSeconds: 30, scrapeOffsetSeconds: 0, "
    "signal: sum(queue)}}",
    spec=["minReplicaCount: 1", "maxReplicaCount: 50"],
)


def test_a_prometheus_trigger_on_the_waiting_requests_reads_the_queue_at_the_last_scrape() -> None:
    """Two Ready replicas serve 10 of 40 requests/s from t=10: the queue grows 30 per second. The HPA syncs
    every 15 s and reads the last scrape (every 30 s): at t=30 and t=45 the scrape of t=30, 21 s into the
    burst: 630 waiting, so ceil(630 / 5) = 126 replicas wanted; the legacy scale-up limit max(2 x 2, 4)
    allows 4, and the new pods load for 300 s, so the queue keeps growing until requests time out."""
    tl = run_scenario(parse_scenario(QUEUE_POLICY)).timelines[0]
    assert tl.waiting[30] == pytest.approx(630)
    assert tl.metric[30] == pytest.approx(630) and tl.metric[45] == pytest.approx(630)
    assert tl.metric[15] == 0  # the scrape at t=0 saw nothing waiting
    assert tl.desired[29] == 2 and tl.desired[30] == 4 and tl.desired[45] == 8
    # 60 s of patience, first in first out: each second's 40 requests wait 60 s; then 10 of the oldest start
    # and the other 30 are abandoned
    assert max(tl.waiting) == pytest.approx(40 * 60)
    assert tl.unserved[100] == pytest.approx(30) and tl.served[100] == pytest.approx(10)


@pytest.mark.parametrize(
    ("replace", "expected"),
    [
        (
            ("sum(queue)", "sum(queues)"),
            'policies[0].pipeline.prometheus.signal: value "sum(queues)" must be for metric "triggers[0]" demand or '
            "AGG(FIELD), FIELD in gpu_utilization, gpu_memory, queue, running, in_flight, kv_cache, ttft and AGG in "
            "avg, count, max, min, p50, p90, p95, p99, sum",
        ),
        (
            ("sum(queue)", "queue"),
            'policies[0].pipeline.prometheus.signal: value "queue" must be for metric "triggers[0]" demand or '
            "AGG(FIELD), FIELD in gpu_utilization, gpu_memory, queue, running, in_flight, kv_cache, ttft and AGG in "
            "avg, count, max, min, p50, p90, p95, p99, sum",
        ),
        (
            ("maxQueueSeconds: 60", "maxQueueSeconds: -5"),
            'workload.maxQueueSeconds: value "-5" must be an integer >= 0 and <= 86400',
        ),
        (
            ("maxQueueSeconds: 60", "maxQueueSeconds: 60, requestSeconds: 0"),
            'workload.requestSeconds: value "0" must be a number > 0',
        ),
        (
            ("maxQueueSeconds: 60", "maxQueueSeconds: 60, gpuMemoryGiB: 24, modelMemoryGiB: 40"),
            'workload.modelMemoryGiB: value "40" must be a number <= gpuMemoryGiB (24)',
        ),
        (
            ("maxQueueSeconds: 60", "maxQueueSeconds: 60, baseTtftSeconds: fast"),
            'workload.baseTtftSeconds: value "fast" must be a number >= 0',
        ),
    ],
)
def test_bad_engine_input_names_the_field(replace: tuple[str, str], expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(QUEUE_POLICY.replace(*replace))
    assert info.value.problems == (expected,)


def test_an_hpa_pods_metric_reads_one_engine_value_per_pod() -> None:
    text = """
name: pods
durationSeconds: 40
workload: {capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 300, initialReplicas: 2, maxQueueSeconds: 60}
demand: {shape: constant, value: 12}
policies:
  - name: per-pod-queue
    pipeline: {prometheus: {exporterIntervalSeconds: 1, scrapeIntervalSeconds: 15, signal: queue}}
    hpa:
      apiVersion: autoscaling/v2
      kind: HorizontalPodAutoscaler
      spec:
        scaleTargetRef: {name: x}
        maxReplicas: 10
        minReplicas: 2
        metrics:
          - type: Pods
            pods: {metric: {name: vllm_num_requests_waiting}, target: {type: AverageValue, averageValue: "10"}}
"""
    tl = run_scenario(parse_scenario(text)).timelines[0]
    # 2 more waiting each second (12 - 10): 32 at the scrape of t=15, 16 per pod -> ceil(2 x 16 / 10) = 4
    assert tl.metric[15] == pytest.approx(16.0)
    assert tl.desired[14] == 2 and tl.desired[15] == 4
