"""The request path through the simulator (the scaler's own code deciding, fed the gateway's counters as the
scaler reads them, a second late): a workload at zero is woken within seconds of the first request and the
first HPA sync asks for the demand's replicas; without the request path nothing at zero can wake it; a
replica that serves less than its target assumes is asked for by what it serves."""

from __future__ import annotations

import pytest

from gpuscale.sim import parse_scenario, run_scenario

from .scenario_text import GPUSCALE, external, head, policy

SCENARIO = head(
    name="request-path",
    duration=900,
    workload="{capacityPerReplica: 8, provisioningSeconds: 45, loadSeconds: 75, initialReplicas: 0, "
    "maxQueueSeconds: 60, requestSeconds: 4}",
    demand="{shape: spike, base: 0, value: 30, atSeconds: 203, durationSeconds: 600}",
)
SCALE_UP = """
advanced:
  horizontalPodAutoscalerConfig:
    behavior:
      scaleUp:
        stabilizationWindowSeconds: 0
        selectPolicy: Max
        policies: [{type: Percent, value: 900, periodSeconds: 15}, {type: Pods, value: 8, periodSeconds: 15}]
"""
GATEWAY = ", requestPath: gateway:9090, requestPathFormat: envoy"


def _text(extra: str, pipeline: str = GPUSCALE) -> str:
    """qwen on an external-push trigger on the demand, ``extra`` added to its metadata."""
    return SCENARIO + policy(
        external(
            f'{{scalerAddress: "s:1", metric: request_rate, targetValue: "6.4"{extra}}}', "external-push"
        ),
        target="qwen",
        pipeline=pipeline,
        keys=["hpaSyncOffsetSeconds: 4"],
        spec=["pollingInterval: 15", "minReplicaCount: 0", "maxReplicaCount: 8", SCALE_UP],
    )


def _desired(extra: str) -> list[int]:
    (tl,) = run_scenario(parse_scenario(_text(extra))).timelines
    return list(tl.desired)


def _changes(desired: list[int]) -> list[tuple[int, int]]:
    return [(t, n) for t, n in enumerate(desired) if t == 0 or n != desired[t - 1]]


@pytest.mark.timeout(60)
def test_the_request_path_wakes_from_zero_at_the_demands_replicas_in_one_sync() -> None:
    changes = _changes(_desired(GATEWAY))
    (t0, n0), (t1, n1), (t2, n2) = changes[:3]
    assert (t0, n0) == (0, 0)
    assert n1 == 1 and 203 <= t1 <= 205  # pushed within about a second of the first request (seen 1 s late)
    # the first HPA sync after the wake (4 + 15k s): 30 arriving + what the gateway holds, over 6.4 per replica
    assert t2 == 214 and n2 >= 5, changes


@pytest.mark.timeout(60)
def test_without_the_request_path_nothing_at_zero_wakes_it() -> None:
    assert set(_desired("")) == {0}


@pytest.mark.timeout(60)
def test_a_source_seen_later_wakes_later_never_sooner() -> None:
    """The gateway's counters reach the scaler ``requestPathDelaySeconds`` late: 5 s late, the wake is 4 s
    later than at 1 s."""
    late = _text(GATEWAY, pipeline="{gpuscale: {samplingIntervalSeconds: 1, requestPathDelaySeconds: 5}}")
    (tl,) = run_scenario(parse_scenario(late)).timelines
    woken = next(t for t, n in enumerate(tl.desired) if n > 0)
    assert 207 <= woken <= 209
