"""The workload model: the engines' queue on small cases, and a pod's start in phases."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from gpuscale.sim import parse_scenario, run_scenario
from gpuscale.sim.workload import EngineQueue, Pod, Workload, observe

from .scenario_text import head, policy

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _steps(
    queue: EngineQueue, arrivals: list[float], capacity: list[float]
) -> list[tuple[float, float, float]]:
    out = []
    for t, (a, c) in enumerate(zip(arrivals, capacity, strict=True)):
        s = queue.step(t, a, c)
        out.append((s.served, s.abandoned, s.waiting))
    return out


def test_the_queue_grows_at_demand_minus_what_ready_replicas_serve_and_drains_with_spare_capacity() -> None:
    q = EngineQueue(max_wait=100)
    steps = _steps(q, [8, 8, 8, 2, 2, 2, 2, 2], [5] * 8)
    assert [w for _, _, w in steps] == [3, 6, 9, 6, 3, 0, 0, 0]  # +3/s, then -3/s, never below 0
    assert [s for s, _, _ in steps] == [5, 5, 5, 5, 5, 5, 2, 2]  # full capacity while anything waits
    assert all(a == 0 for _, a, _ in steps)


def test_the_queue_is_first_in_first_out_and_counts_how_long_each_request_waited() -> None:
    q = EngineQueue(max_wait=100)
    _steps(q, [8, 0, 0], [5, 1, 5])
    # t=0: 5 of 8 start at once (0 s); t=1: 1 of the 3 left (1 s); t=2: the last 2 (2 s)
    assert q.delays == {0: 5, 1: 1, 2: 2}


def test_a_request_that_waited_max_queue_seconds_is_abandoned() -> None:
    q = EngineQueue(max_wait=3)
    steps = _steps(q, [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0])
    # nothing serves: each second's request waits through 3 more seconds, then its client gives up
    assert [a for _, a, _ in steps] == [0, 0, 0, 1, 1, 1]
    assert [w for _, _, w in steps] == [1, 2, 3, 3, 3, 3]
    assert q.delays == {3: 3}  # abandoned requests count as having waited max_wait


def test_without_a_queue_what_the_second_cannot_start_is_unserved_at_once() -> None:
    q = EngineQueue(max_wait=0)
    assert _steps(q, [8, 3, 12], [5, 5, 10]) == [(5, 3, 0), (3, 0, 0), (10, 2, 0)]


def test_requests_are_conserved_and_the_queue_never_goes_negative() -> None:
    q = EngineQueue(max_wait=7)
    arrivals = [abs(math.sin(t / 3)) * 9 for t in range(300)]
    capacity = [5.0 + 4 * math.cos(t / 11) for t in range(300)]
    steps = _steps(q, arrivals, capacity)
    assert all(w >= 0 and s >= 0 and a >= 0 for s, a, w in steps)
    assert all(s <= c + 1e-9 for (s, _, _), c in zip(steps, capacity, strict=True))
    served, abandoned = sum(s for s, _, _ in steps), sum(a for _, a, _ in steps)
    assert served + abandoned + q.waiting == pytest.approx(sum(arrivals))
    assert sum(q.delays.values()) == pytest.approx(served + abandoned)
    assert max(q.delays) <= 7


WORKLOAD = Workload(
    "w", "requests/s", 5.0, provisioning_seconds=30, load_seconds=90, gpu_memory_gib=80, model_memory_gib=72
)


def test_a_pod_starts_pending_then_loads_its_model_filling_gpu_memory_then_is_ready() -> None:
    pod = Pod(7, created=10, running_at=40, ready_at=130)
    pending = observe((pod,), 4.0, WORKLOAD, 39)
    assert pending.samples() == {} and pending.memory() == {}  # Pending: no GPU sample at all
    first = observe((pod,), 4.0, WORKLOAD, 40)
    half = observe((pod,), 4.0, WORKLOAD, 85)
    last = observe((pod,), 4.0, WORKLOAD, 129)
    for obs in (first, half, last):  # loading: Running, busy 0 %, not Ready, memory filling
        assert obs.ready == () and obs.loading == ("pod-7",) and obs.samples() == {"pod-7": 0.0}
        assert obs.served == 0 and math.isnan(obs.kv_cache)  # it serves nothing and reports no engine
    assert first.memory()["pod-7"] == 0.0
    assert half.memory()["pod-7"] == pytest.approx(45.0)  # halfway through the load: 36 of 72 GiB of 80
    assert last.memory()["pod-7"] == pytest.approx(90.0 * 89 / 90)
    ready = observe((pod,), 4.0, WORKLOAD, 130)
    assert ready.ready == ("pod-7",) and ready.memory() == {"pod-7": 90.0}
    assert ready.samples() == {"pod-7": pytest.approx(80.0)}  # 4 of the 5 requests/s it serves


def test_engine_state_follows_the_queue() -> None:
    """Two Ready replicas of 5 requests/s, requests running 4 s: the KV-cache fill rises with running and
    waiting requests per replica (capped at 100 %), TTFT is the queueing delay plus the base."""
    pods = (Pod(0, -1, 0, 0), Pod(1, -1, 0, 0))
    w = dataclasses.replace(WORKLOAD, request_seconds=4.0, base_ttft_seconds=0.2, max_queue_seconds=60)
    q = EngineQueue(60)
    light = observe(pods, 6.0, w, 0, q.step(0, 6.0, 10.0))
    assert (light.served, light.waiting, light.running) == (6, 0, 24)  # Little's law: 6/s x 4 s
    assert light.kv_cache == pytest.approx(60.0)  # 12 running per replica of 20 slots
    assert light.ttft == pytest.approx(0.2) and light.util == pytest.approx(60.0)
    busy = observe(pods, 40.0, w, 1, q.step(1, 40.0, 10.0))
    assert (busy.served, busy.waiting) == (10, 30)
    assert busy.kv_cache == 100.0 and busy.util == 100.0
    assert busy.ttft == pytest.approx(0.2 + 30 / 10)  # 30 waiting, 10/s start


def test_no_queue_keeps_the_unserved_share_of_the_model_without_one() -> None:
    """maxQueueSeconds 0 (the default): the unserved share is sum(max(0, demand - capacity)) / sum(demand),
    second by second, as before the queue existed."""
    scenario = parse_scenario((SCENARIOS / "keda-averagevalue-trap.yaml").read_text())
    assert scenario.workload.max_queue_seconds == 0
    result = run_scenario(scenario)
    for tl, s in zip(result.timelines, result.summaries, strict=True):
        lost = sum(max(0.0, d - c) for d, c in zip(tl.demand, tl.capacity, strict=True))
        assert s.share_of_demand_unserved == pytest.approx(lost / sum(tl.demand))
        assert max(tl.waiting) == 0 and s.p95_queueing_delay == 0


def test_a_queue_serves_a_shortfall_once_capacity_arrives() -> None:
    """A 60 s step above capacity: without a queue its excess is lost; with 120 s of patience it waits, and the
    replicas that arrive serve it; every request is served or unserved, none counted twice."""
    text = head(
        name="q",
        duration=400,
        workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 30, initialReplicas: 2, "
        "maxQueueSeconds: PATIENCE}",
        demand="{shape: step, before: 5, after: 15, atSeconds: 100, untilSeconds: 160}",
    ) + policy(
        '[{type: prometheus, metadata: {serverAddress: x, query: y, threshold: "5"}}]',
        target="w",
        pipeline="{prometheus: {signal: demand, exporterIntervalSeconds: 1, scrapeIntervalSeconds: 1}}",
        spec=["minReplicaCount: 1"],
    )
    lost = run_scenario(parse_scenario(text.replace("PATIENCE", "0")))
    kept = run_scenario(parse_scenario(text.replace("PATIENCE", "120")))
    (tl0,), (s0,) = lost.timelines, lost.summaries
    (tl1,), (s1,) = kept.timelines, kept.summaries
    assert s0.share_of_demand_unserved > 0.05 and s1.share_of_demand_unserved == 0
    assert math.fsum(tl1.served) == pytest.approx(math.fsum(tl1.demand))
    assert math.fsum(tl0.served) + math.fsum(tl0.unserved) == pytest.approx(math.fsum(tl0.demand))
    assert s1.peak_waiting > 0 and 0 < s1.p95_queueing_delay <= 120
    assert tl1.capacity == tl0.capacity  # the queue changes who is served, not what the HPA saw here
