"""The demo's KEDA + HPA stand-in: the HPA behavior it runs (the scale-up ``gpuscale render`` writes), and the
lines it prints of a wake from zero."""

from __future__ import annotations

import math

import pytest

from gpuscale.demo.controller import (
    ControllerSettings,
    ControllerStatus,
    DemoController,
    ReplicaChange,
    hpa_behavior,
)
from gpuscale.sim._check import Checker
from gpuscale.sim.controller import reconcile
from gpuscale.sim.hpa import ExternalReading, HpaState, PodInfo, ScaleTarget
from gpuscale.sim.keda import KedaState, hpa_for, request_scale
from gpuscale.sim.manifests import parse_behavior
from gpuscale.sim.quantity import keda_milli


def controller(*, demand: bool, min_replicas: int = 0) -> DemoController:
    settings = ControllerSettings(
        scaler_address="127.0.0.1:9",
        api_url="http://127.0.0.1:9",
        token="t",
        namespace="demo",
        scaled_object="llm",
        workload="llm",
        metadata={},
        min_replicas=min_replicas,
        max_replicas=6,
        behavior=hpa_behavior(6, 10, demand=demand),
    )
    return DemoController(settings, clock=lambda: 0.0, demand=lambda: 0.0)


@pytest.mark.parametrize(
    ("demand", "after_one_sync"),
    [
        (True, 6),  # render's scaleUp for a demand trigger: +900 % or +6 pods per 15 s, Max: the asked count
        (False, 5),  # no scaleUp written: the HPA's default, the larger of +4 pods and +100 %
    ],
)
def test_one_hpa_sync_after_the_activation_reaches_what_the_behavior_allows(
    demand: bool, after_one_sync: int
) -> None:
    c = controller(demand=demand)
    so = c._scaled_object(5.0)
    assert so.min_replica_count == 0
    # KEDA's activation from zero: 0 -> 1, whatever the scaler asks
    activation = request_scale(so, KedaState(0, 0), 0, True, False, 10)
    assert activation.replicas == 1
    # the HPA's next sync: the scaler asks for 10 replicas' worth (50 at a target of 5), one pod loading
    target = ScaleTarget(1, 1, (PodInfo("llm-1", "Running", False),))
    result = reconcile(hpa_for(so), c.config, HpaState(), target, (ExternalReading((keda_milli(50.0),)),), 12)
    assert (result.metric_replicas, result.desired) == (10, after_one_sync)


def test_at_zero_the_hpa_reads_nothing_and_keda_leaves_it_while_inactive() -> None:
    c = controller(demand=True)
    so = c._scaled_object(5.0)
    assert hpa_for(so).min_replicas == 1  # the HPA KEDA makes of minReplicaCount 0: ScalingDisabled at 0
    assert request_scale(so, KedaState(0, 0), 0, False, False, 30).replicas is None


def test_the_lines_of_a_wake_say_the_request_paths_demand_and_the_replicas_asked() -> None:
    status = ControllerStatus(path_held=42.0, replica_rate=10.0)
    status.record(
        ReplicaChange(
            6.8, 0, 1, "KEDA", "StreamIsActive true", "request path 11.2 req/s", 11.2, decision="request path"
        )
    )
    status.record(
        ReplicaChange(
            11.0,
            1,
            5,
            "HPA",
            "metric above target",
            "request path 42.8 req/s",
            42.8,
            asked=5,
            decision="request path",
        )
    )
    status.record(
        ReplicaChange(16.0, 5, 6, "HPA", "metric above target", "ahead 4 s", 42.9, asked=8, decision="ahead")
    )
    status.record(ReplicaChange(40.0, 6, 5, "HPA", "all metrics below target", "", math.nan, asked=5))
    assert status.events == [
        "t= 6.8s replicas 0 → 1: KEDA: StreamIsActive true; request path 11.2 req/s, 42 held at the gateway",
        "t=11.0s replicas 1 → 5: HPA: metric above target; the scaler asked for 5 (request path 42.8 req/s "
        "÷ replicaRate 10 req/s)",
        "t=16.0s replicas 5 → 6: HPA: metric above target",
        "t=40.0s replicas 6 → 5: HPA: all metrics below target",
    ]


@pytest.mark.parametrize("demand", [True, False])
def test_the_behavior_is_read_as_the_simulator_reads_a_scaled_objects(demand: bool) -> None:
    """The controller's reading of its ScaledObject's behavior is the simulator's (the API's defaulting)."""
    checker = Checker()
    expected = parse_behavior(checker, {"behavior": hpa_behavior(6, 10, demand=demand)}, "advanced")
    assert not checker.problems
    assert controller(demand=demand).behavior == expected
