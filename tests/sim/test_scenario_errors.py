"""Bad scenario files: every problem at once, each naming the field, the value and what is allowed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpuscale.cli import simulate
from gpuscale.errors import UsageError
from gpuscale.scaling.profiles import ProfileSet
from gpuscale.sim import ScenarioError, parse_scenario

from .scenario_text import GPUSCALE, external, head, policy

GOOD_POLICY = policy(
    '[{type: prometheus, metadata: {serverAddress: x, query: y, threshold: "70"}}]',
    pipeline='{prometheus: {signal: "avg(gpu_utilization)"}}',
)
HEAD = head()


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
            "demand or AGG(FIELD), FIELD in gpu_utilization, gpu_memory, queue, running, in_flight, kv_cache, ttft "
            "and AGG in avg, count, max, min, p50, p90, p95, p99, sum",
        ),
        (
            ("        triggers:", "        idleReplicaCount: 1\n        triggers:"),
            'policies[1].scaledObject.spec.idleReplicaCount: value "1" must be an integer < '
            "max(1, minReplicaCount) (1)",
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


def test_read_engines_needs_a_gpu_utilization_trigger_in_workload_scope() -> None:
    """The simulated agents read the engines for a GPU trigger that can use them; on a prometheus trigger the
    flag would be silently ignored, so it is an error."""
    bad = GOOD_POLICY.replace("{prometheus: {signal:", "{gpuscale: {readEngines: true}, prometheus: {signal:")
    assert problems(HEAD + bad) == (
        "policies[0].pipeline.gpuscale.readEngines: applies to a gpuscale gpu_utilization trigger in scope "
        "workload without engineDemand: off (engine metrics always read the engines), and this policy has none",
    )
    wrong = GOOD_POLICY.replace("{prometheus: {signal:", "{gpuscale: {readEngines: 1}, prometheus: {signal:")
    assert problems(HEAD + wrong) == (
        'policies[0].pipeline.gpuscale.readEngines: value "1" must be true or false',
    )


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


# -- gpuscale triggers as the scaler reads them: profiles, the scaler's defaults, keys the simulator ignores --
EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def _profiles() -> ProfileSet:
    return ProfileSet.builtin()


def _gpuscale_policy(metadata: str) -> str:
    return policy(external(metadata), name="g", pipeline=GPUSCALE)


def test_a_profile_sets_what_the_scaler_would_and_given_keys_win() -> None:
    scenario = parse_scenario(
        HEAD + _gpuscale_policy('{scalerAddress: a, profile: batch-inference, activationValue: "7"}'),
        profiles=_profiles(),
    )
    (trigger,) = scenario.policies[0].scaled_object.triggers  # type: ignore[union-attr]
    # batch-inference: gpu_utilization, avg, targetValue 90, activationValue 0 (7 given), window 60
    assert trigger.metadata is not None
    assert (trigger.target, trigger.activation, trigger.metadata.window) == (90.0, 7.0, 60)
    assert trigger.signal == "avg(gpu_utilization)"


def test_a_profiles_thresholds_do_not_carry_to_another_metric() -> None:
    # memory-bound scales on memory_utilization (target 60, activation 5): on gpu_utilization, as in the
    # scaler, the trigger must give its own target, and the activation is the default 0
    text = HEAD + _gpuscale_policy("{scalerAddress: a, profile: memory-bound, metric: gpu_utilization}")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, profiles=_profiles())
    assert info.value.problems == (
        'policies[0].scaledObject.spec.triggers[0].metadata: parameter "targetValue" is required (profile '
        '"memory-bound" sets none for metric "gpu_utilization"); give a number greater than 0',
    )
    scenario = parse_scenario(
        HEAD
        + _gpuscale_policy(
            '{scalerAddress: a, profile: memory-bound, metric: gpu_utilization, targetValue: "70"}'
        ),
        profiles=_profiles(),
    )
    (trigger,) = scenario.policies[0].scaled_object.triggers  # type: ignore[union-attr]
    assert trigger.metadata is not None
    assert (trigger.target, trigger.activation, trigger.metadata.window) == (
        70.0,
        0.0,
        20,
    )  # window: the profile's


def test_the_trigger_is_the_scalers_parse_of_the_metadata() -> None:
    """The simulator keeps what gpuscale.scaling.parse_metadata makes of the metadata: the same defaults
    (window 10, staleAfter 30), YAML numbers read as the strings KEDA passes."""
    from gpuscale.scaling import parse_metadata

    scenario = parse_scenario(HEAD + _gpuscale_policy('{scalerAddress: a, targetValue: 70, window: "2.5"}'))
    (trigger,) = scenario.policies[0].scaled_object.triggers  # type: ignore[union-attr]
    assert trigger.metadata == parse_metadata({"targetValue": "70", "window": "2.5"})
    assert (trigger.metadata.window, trigger.metadata.stale_after) == (2.5, 30.0)


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (
            "{scalerAddress: a, profile: memory-bound}",
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "metric" value "memory_utilization" '
            '(from profile "memory-bound"): the simulator models metric gpu_utilization, queue_length, '
            "requests_in_flight, kv_cache_usage, request_rate only",
        ),
        (
            "{scalerAddress: a, profile: llm-latency}",
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "metric" value "ttft_p95" '
            '(from profile "llm-latency"): the simulator models metric gpu_utilization, queue_length, '
            "requests_in_flight, kv_cache_usage, request_rate only",
        ),
        (
            "{scalerAddress: a, profile: llm}",
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "profile" value "llm" must be one of '
            "[batch-inference, llm-latency, llm-serving, memory-bound, memory-capacity, online-inference, power-capped, "
            "training-throughput]\npolicies[0].scaledObject.spec.triggers[0].metadata: parameter "
            '"targetValue" is required (no profile is given); give a number greater than 0',
        ),
        (
            '{scalerAddress: a, targetValue: "70", share: container}',
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "share" value "container": the '
            "simulator models share gpu only",
        ),
        (
            '{scalerAddress: a, targetValue: "70", aggregation: mean, windw: "5"}',
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "windw" is not known (did you mean '
            '"window"?); known parameters are [activationValue, aggregation, engineDemand, kvCacheGuard, maxMissingPercent, metric, model, namespace, nodeSelector, '
            "podSelector, profile, replicaRate, requestPath, requestPathDrainSeconds, requestPathFormat, "
            "requestPathMatch, scaleAhead, scope, share, staleAfter, targetValue, window]\n"
            'policies[0].scaledObject.spec.triggers[0].metadata: parameter "aggregation" value "mean" must be '
            "one of [avg, max, min, p50, p90, p95, p99, sum]",
        ),
    ],
)
def test_profile_problems(metadata: str, expected: str) -> None:
    text = HEAD + _gpuscale_policy(metadata)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, profiles=_profiles())
    assert info.value.problems == tuple(expected.split("\n"))


@pytest.mark.parametrize("example", ["external.yaml", "external-push.yaml", "external-tls.yaml"])
def test_the_shipped_scaledobjects_simulate_as_they_are(example: str, tmp_path: Path) -> None:
    """What `gpuscale render` writes (deploy/examples) runs in the simulator unchanged, through the CLI."""
    import yaml

    docs = [
        d for d in yaml.safe_load_all((EXAMPLES / example).read_text()) if d and d["kind"] == "ScaledObject"
    ]
    policy = {
        "name": "shipped",
        "pipeline": {"gpuscale": {"samplingIntervalSeconds": 1}},
        "scaledObject": docs[0],
    }
    scenario = yaml.safe_load(HEAD + "  []\n") | {"policies": [policy]}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    parser = argparse.ArgumentParser()
    simulate.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", str(path), "--out", str(tmp_path / "out")])
    assert args.func(args) == 0
    assert (tmp_path / "out" / "summary.json").exists()
