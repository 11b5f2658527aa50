"""The oracle policy: it asks for exactly the replicas the present demand needs. Through the HPA (the
default) only the cold start and the HPA's own limits stand between demand and capacity; written every
second itself (``controller: direct``), only its bounds and the pods' start phases."""

from __future__ import annotations

import pytest

from gpuscale.sim import Result, ScenarioError, parse_scenario, run_scenario
from gpuscale.sim.policy import Oracle, oracle_replicas
from gpuscale.sim.workload import Workload

STEP = """
name: oracle-step
durationSeconds: 600
workload: {capacityPerReplica: 5, provisioningSeconds: 30, loadSeconds: 90, initialReplicas: 2, maxQueueSeconds: QUEUE}
demand: {shape: step, before: 6, after: 40, atSeconds: 100, untilSeconds: 400}
policies:
  - name: oracle
    oracle: {minReplicas: 1, maxReplicas: 12, drainQueue: DRAIN, controller: CONTROLLER}
"""


def _run(queue: int = 0, drain: bool = True, controller: str = "direct", offset: int | None = None) -> Result:
    text = (
        STEP.replace("QUEUE", str(queue))
        .replace("DRAIN", "true" if drain else "false")
        .replace("CONTROLLER", controller)
    )
    if offset is not None:
        text = text.replace("  - name: oracle\n", f"  - name: oracle\n    hpaSyncOffsetSeconds: {offset}\n")
    return run_scenario(parse_scenario(text))


def test_the_direct_oracle_asks_for_the_replicas_the_step_needs_in_the_second_it_comes() -> None:
    result = _run()
    (tl,) = result.timelines
    assert set(tl.desired[:100]) == {2}  # ceil(6 / 5)
    assert set(tl.desired[100:400]) == {8}  # ceil(40 / 5), at once: no sync period, no rate limit
    assert set(tl.desired[400:]) == {2}  # and back at once: no stabilization window
    # the new pods are Pending 30 s and load 90 s: Ready capacity arrives 120 s after the step
    assert set(tl.ready[100:220]) == {2} and set(tl.ready[220:400]) == {8}
    assert tl.pods[100] == 8 and tl.pods[400] == 2
    # with no queue, the cold start is all that is lost: 120 s x (40 - 10) requests
    (summary,) = result.summaries
    assert summary.seconds_over_capacity == 120
    lost = 120 * 30
    assert summary.share_of_demand_unserved == pytest.approx(lost / (6 * 300 + 40 * 300))


def test_with_a_queue_the_oracle_also_drains_the_waiting_requests() -> None:
    """During the cold start 30 requests/s wait; with 60 s of patience 60 x 40 = 2400 wait when capacity
    arrives. ceil(40 / 5) alone leaves that backlog waiting forever at exactly the demand's capacity; the
    oracle also asks for waiting / 60 s more (capped at 12 replicas), which drains it."""
    (drained,) = _run(60).timelines
    (plain,) = _run(60, drain=False).timelines
    assert max(plain.desired) == 8 and max(drained.desired) == 12
    assert plain.waiting[399] == pytest.approx(2400)  # still 60 s of backlog when the step ends
    assert drained.waiting[399] < 150  # the backlog drains at waiting / 60 s more than the demand
    assert sum(drained.unserved) < sum(plain.unserved)


def test_through_the_hpa_the_oracle_asks_at_each_sync_within_the_hpas_limits() -> None:
    """The HPA syncs at 4 + 15k s; the step comes at 100 s. The oracle's exact ask (8) is the HPA's proposal
    at the first sync after it (109 s), where the legacy limit max(2c, 4) lets 2 grow to 4; then 4 to 8 at
    124 s. After the step (it ends at 400 s) the HPA's 300 s stabilization window holds 8 to the run's end
    (600 s): the last sync asking 8, at 394 s, is not 300 s old until 709 s."""
    result = _run(offset=4, controller="hpa")
    (tl,) = result.timelines
    assert set(tl.desired[:109]) == {2}
    assert set(tl.desired[109:124]) == {4}  # max(2 x 2, 4)
    assert set(tl.desired[124:600]) == {8}  # exactly what 40 requests/s need, held down by the window
    # the new pods are Pending 30 s and load 90 s from the sync that asked for them
    assert tl.ready[108 + 120] == 2 and tl.ready[109 + 120] == 4 and tl.ready[124 + 120] == 8
    direct_result = _run(controller="direct")
    (direct,), (direct_summary,) = direct_result.timelines, direct_result.summaries
    (summary,) = result.summaries
    # the sync and the rate limit cost capacity the direct oracle had: never more Ready, more unserved
    assert all(a <= b for a, b in zip(tl.ready[:400], direct.ready[:400], strict=True))
    assert summary.share_of_demand_unserved > direct_summary.share_of_demand_unserved


def test_through_the_hpa_the_oracle_is_exact_where_the_metrics_tolerance_would_hold() -> None:
    """From 10 replicas a demand of 55 requests/s needs 11: a metric at 1.1x its target is inside the HPA's
    10 % tolerance and would not scale; the oracle's ask is exact, so the HPA scales to 11."""
    text = STEP.replace("QUEUE", "0").replace("DRAIN", "true").replace("CONTROLLER", "hpa")
    text = text.replace("initialReplicas: 2", "initialReplicas: 10")
    text = text.replace("before: 6, after: 40", "before: 50, after: 55")
    (tl,) = run_scenario(parse_scenario(text)).timelines
    assert set(tl.desired[:100]) == {10} and set(tl.desired[105:400]) == {11}


def test_an_oracle_through_the_hpa_wakes_from_zero_at_its_first_sync() -> None:
    """minReplicas 0 and no demand: the oracle asks 0; demand arrives at 100 s and the sync at 105 s asks
    for it within max(2 x 0, 4): 4 replicas for 40 requests/s, then 8."""
    text = STEP.replace("QUEUE", "0").replace("DRAIN", "true").replace("CONTROLLER", "hpa")
    text = text.replace("initialReplicas: 2", "initialReplicas: 0").replace(
        "minReplicas: 1", "minReplicas: 0"
    )
    text = text.replace("before: 6, after: 40", "before: 0, after: 40")
    (tl,) = run_scenario(parse_scenario(text)).timelines
    assert set(tl.desired[:105]) == {0}
    assert set(tl.desired[105:120]) == {4} and tl.desired[120] == 8


@pytest.mark.parametrize(
    ("oracle", "demand", "waiting", "replicas"),
    [
        (Oracle(1, 12), 40.0, 0.0, 8),
        (Oracle(1, 12), 40.1, 0.0, 9),
        (Oracle(1, 12), 0.0, 0.0, 1),
        (Oracle(0, 12), 0.0, 0.0, 0),
        (Oracle(0, 12), 0.2, 0.0, 1),
        (Oracle(1, 12), 200.0, 0.0, 12),
        (Oracle(1, 12), 10.0, 600.0, 4),  # 10/s + 600 waiting / 60 s = 20/s
        (Oracle(1, 12, drain_queue=False), 10.0, 600.0, 2),
    ],
)
def test_oracle_replicas(oracle: Oracle, demand: float, waiting: float, replicas: int) -> None:
    w = Workload("w", "requests/s", 5.0, max_queue_seconds=60)
    assert oracle_replicas(oracle, demand, waiting, w) == replicas


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            "  - name: o\n    oracle: {maxReplicas: 0}\n",
            ('policies[0].oracle.maxReplicas: value "0" must be an integer >= 1',),
        ),
        (
            "  - name: o\n    oracle: {minReplicas: 5, maxReplicas: 3}\n",
            ('policies[0].oracle.maxReplicas: value "3" must be an integer >= minReplicas (5)',),
        ),
        (
            "  - name: o\n    oracle: {maxReplica: 3}\n",
            (
                "policies[0].oracle.maxReplica: unknown field; allowed: [controller, drainQueue, maxReplicas, "
                "minReplicas]",
            ),
        ),
        (
            "  - name: o\n    oracle: {}\n    pipeline: {prometheus: {signal: demand}}\n",
            ("policies[0].pipeline: does not apply to an oracle policy, which reads no metric",),
        ),
        (
            "  - name: o\n    oracle: {controller: keda}\n",
            ('policies[0].oracle.controller: value "keda" must be one of [hpa, direct]',),
        ),
        (
            "  - name: o\n    hpaSyncOffsetSeconds: 4\n    oracle: {controller: direct}\n",
            (
                "policies[0].hpaSyncOffsetSeconds: does not apply to an oracle with controller: direct (no HPA)",
            ),
        ),
        (
            "  - name: o\n    oracle: {}\n    hpa: {}\n",
            ("policies[0]: needs exactly one of scaledObject, hpa, oracle",),
        ),
        (
            "  - name: o\n    oracle: [1]\n",
            ('policies[0].oracle: value "[1]" must be a mapping',),
        ),
    ],
)
def test_bad_oracle_input_names_the_field(policy: str, expected: tuple[str, ...]) -> None:
    head = STEP.split("policies:")[0].replace("QUEUE", "0") + "policies:\n"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(head + policy)
    assert info.value.problems == expected


def test_an_oracle_through_the_hpa_at_zero_replicas_with_a_minimum_still_scales() -> None:
    """initialReplicas 0 and minReplicas 1: the HPA alone is disabled at zero replicas (ScalingDisabled), but
    the oracle's ask is not: the first sync brings it to its minimum, and the next ones to the demand."""
    text = STEP.replace("QUEUE", "0").replace("DRAIN", "true").replace("CONTROLLER", "hpa")
    text = text.replace("initialReplicas: 2", "initialReplicas: 0")
    (tl,) = run_scenario(parse_scenario(text)).timelines
    assert tl.desired[0] == 1
    assert max(tl.desired[100:400]) == 8
