"""Failures in scenarios (``faults:``, ``workload.terminationSeconds``) and KEDA as it is today (v2.19+):
fallback in the polling loop, ``idleReplicaCount: 0``, and replica proposals that saturate."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from gpuscale.sim import ScenarioError, parse_scenario, run_scenario
from gpuscale.sim.hpa import ExternalReading, MetricSpec, ScaleTarget, Tolerances, compute_replicas_for_metric
from gpuscale.sim.policy import Timeline

from .scenario_text import external, head, policy

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _changes(values: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(t, v) for t, v in enumerate(values) if t == 0 or v != values[t - 1]][1:]


def _run(text: str) -> Timeline:
    return run_scenario(parse_scenario(text)).timelines[0]


def test_keda_fallback_from_zero_reaches_fallback_replicas() -> None:
    """kedacore/keda TestFallbackFromZero, shipped as scenarios/keda-fallback-from-zero.yaml: a Deployment at
    0, the metric 0, then the source goes down at t=60. Polls at 60 (1st failure) and 65 (2nd > threshold 1):
    fallback in force, the trigger counts as active and KEDA scales 0 -> 1; the HPA's next sync (75) reads the
    fallback value (target 5 x 3 replicas) and asks for 3."""
    tl = run_scenario(parse_scenario((SCENARIOS / "keda-fallback-from-zero.yaml").read_text())).timelines[0]
    assert _changes(tl.desired) == [(65, 1), (75, 3)]
    assert tl.desired[-1] == 3  # and held there: the cooldown never takes it back to zero in fallback


FROM_ZERO = head(
    name="z",
    duration=200,
    workload="{capacityPerReplica: 5, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 0}",
    demand="{shape: constant, value: 0}",
) + policy(
    external('{scalerAddress: s, targetValue: "5"}'),
    target="app",
    keys=["faults: [{type: trigger-error, fromSeconds: 60, untilSeconds: 120}]"],
    spec=["pollingInterval: 5", "cooldownPeriod: 1", "minReplicaCount: 0", "maxReplicaCount: 5", "FALLBACK"],
)


def test_without_fallback_a_failing_trigger_keeps_the_replicas_and_the_source_coming_back_ends_it() -> None:
    tl = _run(FROM_ZERO.replace("FALLBACK", ""))
    assert set(tl.desired) == {0}  # errors never scale; there is nothing to wake it
    tl = _run(FROM_ZERO.replace("FALLBACK", "fallback: {failureThreshold: 1, replicas: 3}"))
    assert max(tl.desired) == 3
    # at 120 the source answers again (0, inactive, no pods... then the pods' GPUs idle at 0): the cooldown
    # (1 s) returns the workload to zero
    assert tl.desired[-1] == 0


SAMPLES_MISSING = head(
    name="dark",
    duration=400,
    workload="{capacityPerReplica: 10, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 10}",
    demand="{shape: constant, value: 70}",
) + policy(
    external('{scalerAddress: s, targetValue: "70", window: "5"}'),
    target="app",
    keys=["faults: [{type: samples-missing, pods: 4, fromSeconds: 100}]"],
    spec=["minReplicaCount: 1", "maxReplicaCount: 20"],
)


def test_samples_missing_is_answered_as_the_scaler_answers_it() -> None:
    """10 pods at 70 %, target 70: steady. 4 pods' agents go dark at t=100; their last samples count until
    they pass staleAfter (30 s); then they are missing pods: the 6 fresh pods sit at the target, so the answer
    keeps the current count (70 x 10) and the HPA keeps 10 replicas. Broken monitoring scales nothing."""
    tl = _run(SAMPLES_MISSING)
    assert set(tl.desired) == {10}
    assert tl.metric[120] == pytest.approx(700.0)  # within staleAfter: all 10 still count
    assert tl.metric[-1] == pytest.approx(700.0)  # past it: 6 fresh at the target, 4 missing: held


def test_more_missing_than_max_missing_percent_is_unavailable_and_keda_keeps_the_replicas() -> None:
    tl = _run(SAMPLES_MISSING.replace("pods: 4", "pods: 6"))  # 60 % missing, over the default 50
    assert set(tl.desired) == {10}
    assert math.isnan(tl.metric[-1])  # UNAVAILABLE: the HPA reads no value and keeps its replicas


@pytest.mark.timeout(120)  # the 30-minute step burst, ten policies: about 15-25 s of CPU here
def test_llm_step_burst_with_4_of_10_pods_dark_keeps_its_replicas() -> None:
    """The shipped burst scenario once it has scaled out: darken 4 of the workload's pods (their agents gone)
    and at no second does a gpuscale policy have fewer replicas than the same run without the fault. (Were
    missing pods simply left out, it would fall below from t=1279 on, for 840 seconds.)"""
    doc = yaml.safe_load((SCENARIOS / "llm-step-burst.yaml").read_text())
    plain = run_scenario(parse_scenario(yaml.safe_dump(doc)))
    start = 900  # the burst (from t=307) has been served
    gpuscale = [
        p["name"]
        for p in doc["policies"]
        if "scaledObject" in p and "prometheus" not in str(p["scaledObject"]["spec"]["triggers"])
    ]
    assert gpuscale, "llm-step-burst has a gpuscale policy"
    doc["policies"] = [p for p in doc["policies"] if p["name"] in gpuscale]
    for entry in doc["policies"]:
        entry["faults"] = [{"type": "samples-missing", "pods": 4, "fromSeconds": start}]
    dark = run_scenario(parse_scenario(yaml.safe_dump(doc)))
    for before, after in zip(
        (t for t in plain.timelines if t.policy in gpuscale), dark.timelines, strict=True
    ):
        assert before.desired[start] >= 10, (after.policy, before.desired[start])
        below = [t for t in range(start, len(before.desired)) if after.desired[t] < before.desired[t]]
        assert below == [], (after.policy, below[:5])


def test_a_terminating_pod_holds_its_gpu_and_no_controller_counts_it() -> None:
    text = head(
        name="t",
        duration=400,
        workload="{capacityPerReplica: 10, provisioningSeconds: 0, loadSeconds: 0, initialReplicas: 4, TERM}",
        demand="{shape: constant, value: 10}",
    ) + policy(
        external('{scalerAddress: s, targetValue: "80"}'),
        target="app",
        spec=[
            "minReplicaCount: 1",
            "advanced: {horizontalPodAutoscalerConfig: {behavior: {scaleDown: {stabilizationWindowSeconds: 0}}}}",
        ],
    )
    plain = _run(text.replace(", TERM", ""))
    slow = _run(text.replace("TERM", "terminationSeconds: 60"))
    assert plain.desired == slow.desired  # the decisions are the same: deleted pods count nowhere
    assert sum(slow.pods) == sum(plain.pods) + 60 * (4 - plain.pods[-1])  # but they hold their GPUs 60 s
    assert slow.ready == plain.ready


def test_idle_replica_count_zero_with_min_zero_is_valid() -> None:
    text = FROM_ZERO.replace("FALLBACK", "idleReplicaCount: 0")
    assert parse_scenario(text).policies[0].scaled_object.idle_replica_count == 0  # type: ignore[union-attr]


def test_replica_proposals_saturate_at_int32_max() -> None:
    spec = MetricSpec("m", "External", "AverageValue", 1)
    target = ScaleTarget(1, 1, ())
    reading = ExternalReading((2**62,))
    assert compute_replicas_for_metric(spec, reading, target, Tolerances(0.1, 0.1)) == 2**31 - 1


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        (
            "[{type: network-split, fromSeconds: 10}]",
            'policies[0].faults[0].type: value "network-split" must be one of [samples-missing, trigger-error]',
        ),
        (
            "[{type: trigger-error}]",
            "policies[0].faults[0].fromSeconds: is required",
        ),
        (
            "[{type: trigger-error, fromSeconds: 50, untilSeconds: 20}]",
            'policies[0].faults[0].untilSeconds: value "20" must be an integer >= 51',
        ),
        (
            "[{type: samples-missing, fromSeconds: 5}]",
            "policies[0].faults[0].pods: is required",
        ),
        (
            "[{type: samples-missing, fromSeconds: 5, pods: 0}]",
            'policies[0].faults[0].pods: value "0" must be an integer >= 1',
        ),
        (
            "[{type: trigger-error, fromSeconds: 5, pods: 2}]",
            "policies[0].faults[0].pods: unknown field; allowed: [fromSeconds, type, untilSeconds]",
        ),
        (
            "[oops]",
            'policies[0].faults[0]: value "oops" must be a mapping with type, fromSeconds and optionally '
            "untilSeconds (and pods)",
        ),
        (
            "{type: trigger-error}",
            "policies[0].faults: value \"{'type': 'trigger-error'}\" must be a non-empty list",
        ),
    ],
)
def test_a_bad_fault_is_named_by_its_path(faults: str, expected: str) -> None:
    text = SAMPLES_MISSING.replace("[{type: samples-missing, pods: 4, fromSeconds: 100}]", faults)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    assert info.value.problems == (expected,)


def test_samples_missing_needs_a_gpuscale_trigger() -> None:
    text = head() + policy(
        '[{type: prometheus, metadata: {serverAddress: x, query: y, threshold: "70"}}]',
        pipeline='{prometheus: {signal: "avg(gpu_utilization)"}}',
        keys=["faults: [{type: samples-missing, pods: 1, fromSeconds: 0}]"],
    )
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    assert info.value.problems == (
        "policies[0].faults[0].type: samples-missing applies to gpuscale triggers (external, external-push), "
        "and this policy has none; for a prometheus trigger use trigger-error",
    )


def test_pods_dark_from_the_start_are_missing_pods_not_absent_ones() -> None:
    """4 of 10 pods dark from t=0 (they never sent a sample): the scaler knows them, so they are missing
    pods (held), never simply absent (which would read 420 and scale to 6)."""
    tl = _run(SAMPLES_MISSING.replace("fromSeconds: 100", "fromSeconds: 0"))
    assert min(tl.desired) == 10
    tl = _run(SAMPLES_MISSING.replace("pods: 4, fromSeconds: 100", "pods: 10, fromSeconds: 0"))
    assert min(tl.desired) == 10  # all dark: UNAVAILABLE, KEDA and the HPA keep the replicas
