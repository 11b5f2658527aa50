"""Bad scenario files: every problem at once, each naming the field, the value and what is allowed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpuscale.cli import simulate
from gpuscale.errors import UsageError
from gpuscale.sim import ScenarioError, parse_scenario

GOOD_POLICY = """
  - name: p
    pipeline: {prometheus: {signal: "avg(gpu_utilization)"}}
    scaledObject:
      apiVersion: keda.sh/v1alpha1
      kind: ScaledObject
      spec:
        scaleTargetRef: {name: x}
        triggers: [{type: prometheus, metadata: {serverAddress: x, query: y, threshold: "70"}}]
"""
HEAD = """
name: s
durationSeconds: 60
workload: {capacityPerReplica: 10}
demand: {shape: constant, value: 5}
policies:
"""


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    return info.value.problems


def test_a_good_file_parses() -> None:
    assert parse_scenario(HEAD + GOOD_POLICY).policies[0].name == "p"


@pytest.mark.parametrize(
    ("replace", "expected"),
    [
        (
            ("        triggers:", "        maxReplicaCount: -3\n        triggers:"),
            'policies[1].scaledObject.spec.maxReplicaCount: value "-3" must be an integer >= 0',
        ),
        (
            ('threshold: "70"', 'threshold: "-1"'),
            'policies[1].scaledObject.spec.triggers[0].metadata.threshold: value "-1" must be a number > 0',
        ),
        (
            ("type: prometheus,", "type: kafka,"),
            'policies[1].scaledObject.spec.triggers[0].type: value "kafka" must be one of '
            "[prometheus, external, external-push]",
        ),
        (
            ("avg(gpu_utilization)", "mean(gpu_utilization)"),
            'policies[1].pipeline.prometheus.signal: value "mean(gpu_utilization)" must be for metric "triggers[0]" '
            "demand or AGG(gpu_utilization)",
        ),
        (
            ("        triggers:", "        idleReplicaCount: 0\n        triggers:"),
            'policies[1].scaledObject.spec.idleReplicaCount: value "0" must be an integer < minReplicaCount (0)',
        ),
        (
            ("kind: ScaledObject", "kind: ScaledJob"),
            'policies[1].scaledObject.kind: value "ScaledJob" must be one of [ScaledObject]',
        ),
        (
            ("        triggers:", "        pollingIntervall: 5\n        triggers:"),
            "policies[1].scaledObject.spec.pollingIntervall: unknown field; allowed: [advanced, cooldownPeriod, "
            "fallback, idleReplicaCount, initialCooldownPeriod, maxReplicaCount, minReplicaCount, pollingInterval, "
            "scaleTargetRef, triggers]",
        ),
    ],
)
def test_one_problem_names_field_value_and_allowed(replace: tuple[str, str], expected: str) -> None:
    bad = GOOD_POLICY.replace("name: p", "name: q").replace(*replace)
    assert problems(HEAD + GOOD_POLICY + bad) == (expected,)


def test_all_problems_are_collected() -> None:
    text = (
        """
name: s
durationSeconds: 0
workload: {capacityPerReplica: -1, demandUnit: rps}
demand: {shape: step, before: 1, after: 2}
policies:
"""
        + GOOD_POLICY
        + GOOD_POLICY
    )
    assert problems(text) == (
        'durationSeconds: value "0" must be an integer >= 1 and <= 604800',
        'workload.demandUnit: value "rps" must be one of [requests/s, gpu-seconds/s]',
        'workload.capacityPerReplica: value "-1" must be a number > 0',
        "demand.atSeconds: is required",
        'policies: name "p" is used more than once; names must be unique',
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1", "not valid YAML at line 1, column 6: expected ',' or ']', but got '<stream end>'"),
        ("- 1\n- 2", "the file must be a YAML mapping with name, workload, demand, policies"),
    ],
)
def test_not_a_scenario(text: str, expected: str) -> None:
    assert problems(text) == (expected,)


def test_hpa_metric_rules() -> None:
    text = (
        HEAD
        + """
  - name: h
    pipeline: {prometheus: {signal: "avg(gpu_utilization)"}}
    hpa:
      apiVersion: autoscaling/v2
      kind: HorizontalPodAutoscaler
      spec:
        scaleTargetRef: {name: x}
        maxReplicas: 5
        metrics:
          - type: Pods
            pods: {metric: {name: gpu}, target: {type: Value, value: "70"}}
          - type: Resource
"""
    )
    assert problems(text) == (
        'policies[0].hpa.spec.metrics[0].pods.target.type: value "Value" must be one of [AverageValue]',
        'policies[0].hpa.spec.metrics[1].type: value "Resource" must be one of [Pods, External]',
    )


def test_cli_turns_problems_into_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + GOOD_POLICY.replace('"70"', '"x"'))
    parser = argparse.ArgumentParser()
    simulate.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", str(path), "--out", str(tmp_path / "out")])
    with pytest.raises(UsageError) as info:
        args.func(args)
    assert str(info.value) == (
        f"{path}: 1 problem\n"
        '  policies[0].scaledObject.spec.triggers[0].metadata.threshold: value "x" must be a number > 0'
    )
    assert not (tmp_path / "out").exists()


def test_cli_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    simulate.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", str(tmp_path / "nope.yaml"), "--out", str(tmp_path)])
    with pytest.raises(UsageError, match="cannot read it: No such file or directory"):
        args.func(args)
