"""Trigger metadata: defaults, profiles, overrides, KEDA's keys, and the exact text of every problem."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.scaling import (
    MetadataError,
    Profile,
    ProfileSet,
    TriggerMetadata,
    metric_name,
    parse_metadata,
    parse_selector,
    target,
)

KEYS = (
    "[activationValue, aggregation, engineDemand, kvCacheGuard, maxMissingPercent, metric, model, namespace, nodeSelector, podSelector, profile, replicaRate, requestPath, requestPathDrainSeconds, requestPathFormat, requestPathMatch, scaleAhead, scope, share, "
    "staleAfter, targetValue, window]"
)
AGGREGATIONS = "[avg, max, min, p50, p90, p95, p99, sum]"
PROFILES = (
    "[batch-inference, llm-latency, llm-serving, memory-bound, memory-capacity, online-inference, power-capped, "
    "training-throughput]"
)


def md(**fields: Any) -> TriggerMetadata:
    base: dict[str, Any] = {
        "metric": "gpu_utilization",
        "aggregation": "avg",
        "target_value": 70.0,
        "activation_value": 0.0,
        "window": 10.0,
        "stale_after": 30.0,
        "scope": "workload",
        "share": "gpu",
    }
    return TriggerMetadata(**{**base, **fields})


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"targetValue": "70"}, md()),
        (
            {"targetValue": "70", "scalerAddress": "gpuscale:9090", "enableTLS": "false", "unsafeSsl": "x"},
            md(),
        ),
        ({"targetValueFromEnv": "70", "caCertFromEnv": "pem"}, md()),
        ({"targetValue": " 7e1 "}, md()),
        (
            {"targetValue": "70", "aggregation": "p95", "window": "0", "staleAfter": "5"},
            md(aggregation="p95", window=0.0, stale_after=5.0),
        ),
        (
            {"profile": "llm-serving"},
            md(
                metric="queue_length",
                target_value=5.0,
                window=10.0,
                stale_after=20.0,
                profile="llm-serving",
                kv_cache_guard=80.0,
                scale_ahead="auto",
            ),
        ),
        (
            {"profile": "llm-serving", "targetValue": "8", "window": "5"},
            md(
                metric="queue_length",
                target_value=8.0,
                window=5.0,
                stale_after=20.0,
                profile="llm-serving",
                kv_cache_guard=80.0,
                scale_ahead="auto",
            ),
        ),
        (  # same metric as the profile: its thresholds still apply
            {"profile": "online-inference", "metric": "gpu_utilization"},
            md(
                aggregation="p90",
                target_value=60.0,
                activation_value=1.0,
                stale_after=15.0,
                profile="online-inference",
            ),
        ),
        (  # another metric: the profile's thresholds (in its unit), guard and scale-ahead do not
            {"profile": "llm-serving", "metric": "power", "targetValue": "500"},
            md(metric="power", target_value=500.0, window=10.0, stale_after=20.0, profile="llm-serving"),
        ),
        (
            {"metric": "memory_used", "targetValue": "40Gi", "activationValue": "1G"},
            md(metric="memory_used", target_value=40 * 2.0**30, activation_value=1e9),
        ),
        (
            {"targetValue": "50", "scope": "pool", "nodeSelector": "pool=h200", "aggregation": "sum"},
            md(target_value=50.0, scope="pool", aggregation="sum", node_selector=parse_selector("pool=h200")),
        ),
        (
            {"targetValue": "70", "podSelector": "app=llm", "namespace": "ml", "share": "container"},
            md(pod_selector=parse_selector("app=llm"), namespace="ml", share="container"),
        ),
        ({"targetValue": "150", "metric": "power"}, md(metric="power", target_value=150.0)),
        ({"targetValue": "70", "activationValue": "99.5"}, md(activation_value=99.5)),
    ],
)
def test_valid(metadata: dict[str, str], expected: TriggerMetadata) -> None:
    assert parse_metadata(metadata) == expected


@pytest.mark.parametrize(
    ("metadata", "problems"),
    [
        ({}, ('parameter "targetValue" is required (no profile is given); give a number greater than 0',)),
        (
            {"targetValue": "70", "aggregation": "mean"},
            (f'parameter "aggregation" value "mean" must be one of {AGGREGATIONS}',),
        ),
        (
            {"targetValue": "70", "metric": "gpu_util"},
            (
                'parameter "metric" value "gpu_util" must be one of [dram_active, generation_tokens_per_second, '
                "gpu_utilization, gr_engine_active, itl_p95, kv_cache_usage, memory_used, memory_used_percent, "
                "memory_utilization, power, power_percent, queue_length, request_rate, requests_in_flight, sm_active, "
                "sm_occupancy, temperature, tensor_active, ttft_p50, ttft_p95]",
            ),
        ),
        (
            {"targetValue": "70", "profile": "llm"},
            (f'parameter "profile" value "llm" must be one of {PROFILES}',),
        ),
        (
            {"targetvalue": "70"},
            (
                f'parameter "targetvalue" is not known (did you mean "targetValue"?); known parameters are {KEYS}',
                'parameter "targetValue" is required (no profile is given); give a number greater than 0',
            ),
        ),
        (
            {"targetValue": "70", "colour": "red"},
            (f'parameter "colour" is not known; known parameters are {KEYS}',),
        ),
        (
            {"targetValue": "70", "targetValueFromEnv": "80"},
            ('parameters "targetValue" and "targetValueFromEnv" are both set; give only one',),
        ),
        ({"targetValue": "abc"}, ('parameter "targetValue" value "abc" must be a finite number',)),
        ({"targetValue": "nan"}, ('parameter "targetValue" value "nan" must be a finite number',)),
        ({"targetValue": "1e999"}, ('parameter "targetValue" value "1e999" must be a finite number',)),
        ({"targetValue": "40Gi"}, ('parameter "targetValue" value "40Gi" must be a finite number',)),
        ({"targetValue": ""}, ('parameter "targetValue" value "" must be a finite number',)),
        ({"targetValue": "0"}, ('parameter "targetValue" value "0" must be greater than 0',)),
        (
            {"targetValue": "70", "activationValue": "-1", "window": "-5", "staleAfter": "0"},
            (
                'parameter "activationValue" value "-1" must be at least 0',
                'parameter "window" value "-5" must be at least 0',
                'parameter "staleAfter" value "0" must be greater than 0',
            ),
        ),
        (
            {"metric": "memory_used", "targetValue": "40GB"},
            ('parameter "targetValue" value "40GB" must be a finite number or a byte quantity such as 40Gi',),
        ),
        (
            {"targetValue": "120"},
            (
                'parameter "targetValue" value "120" must be at most 100 for metric "gpu_utilization" (a percentage)',
            ),
        ),
        (
            {"targetValue": "70", "activationValue": "100"},
            (
                'parameter "activationValue" value "100" must be less than 100 for metric "gpu_utilization" '
                "(a percentage), or the trigger is never active",
            ),
        ),
        (
            {"targetValue": "70", "aggregation": "sum"},
            (
                'parameter "aggregation" value "sum" is not allowed with scope "workload" (the value is already '
                "multiplied by the pod count); use avg, max, min or a percentile, or scope node or pool",
            ),
        ),
        (
            {"targetValue": "70", "window": "60"},
            ('parameter "window" value "60" must be at most staleAfter (30): older samples never count',),
        ),
        (
            {"profile": "training-throughput", "staleAfter": "60"},
            (
                'parameter "window" value "120" (from profile "training-throughput") must be at most '
                "staleAfter (60): older samples never count",
            ),
        ),
        (
            {"profile": "llm-serving", "metric": "power"},
            (
                'parameter "targetValue" is required (profile "llm-serving" sets none for metric "power"); '
                "give a number greater than 0",
            ),
        ),
        (
            {"targetValue": "70", "scope": "pool"},
            (
                'parameter "nodeSelector" is required with scope "pool"; give a label selector such as '
                '"nvidia.com/gpu.product=NVIDIA-H200"',
            ),
        ),
        (
            {"targetValue": "70", "nodeSelector": "a=b"},
            ('parameter "nodeSelector" value "a=b" is only allowed with scope "pool" (scope is "workload")',),
        ),
        (
            {"targetValue": "70", "scope": "node", "podSelector": "a=b", "namespace": "ml"},
            (
                'parameter "podSelector" value "a=b" is only allowed with scope "workload" (scope is "node")',
                'parameter "namespace" value "ml" is only allowed with scope "workload" (scope is "node")',
            ),
        ),
        (
            {"targetValue": "70", "podSelector": " "},
            ('parameter "podSelector" value "" must be a non-empty label selector such as "app=llm"',),
        ),
        (
            {"targetValue": "70", "podSelector": "app=llm,tier in ()"},
            (
                'parameter "podSelector" value "app=llm,tier in ()": requirement "tier in ()": "in" needs at least '
                "one value",
            ),
        ),
        (
            {"targetValue": "70", "namespace": "ML"},
            (
                'parameter "namespace" value "ML" must be a Kubernetes namespace name (1 to 63 lowercase letters, '
                "digits and '-', starting and ending with a letter or digit)",
            ),
        ),
        (
            {"targetValue": "70", "scope": "pool", "nodeSelector": "a=b", "share": "container"},
            ('parameter "share" value "container" is only allowed with scope "workload" (scope is "pool")',),
        ),
        (
            {"targetValue": "70", "metric": "temperature", "share": "container"},
            (
                'parameter "share" value "container" is only allowed with metric gpu_utilization, memory_used, '
                'memory_used_percent (metric is "temperature")',
            ),
        ),
        (
            {"targetValue": "x" * 300},
            (f'parameter "targetValue" value "{"x" * 99}…" must be a finite number',),
        ),
    ],
)
def test_invalid(metadata: dict[str, str], problems: tuple[str, ...]) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata(metadata)
    assert info.value.problems == problems
    assert str(info.value) == "invalid trigger metadata: " + "; ".join(problems)


def test_every_problem_at_once() -> None:
    metadata = {"aggregation": "mean", "targetValue": "-1", "scope": "galaxy", "wat": "1", "profile": "nope"}
    with pytest.raises(MetadataError) as info:
        parse_metadata(metadata)
    assert len(info.value.problems) == 5
    assert [p.split('"')[1] for p in info.value.problems] == [
        "wat",
        "profile",
        "aggregation",
        "scope",
        "targetValue",
    ]


def test_custom_profiles() -> None:
    profiles = ProfileSet.builtin().with_profiles(
        [Profile("hot", metric="temperature", aggregation="max", target_value=80.0, window=5.0)]
    )
    parsed = parse_metadata({"profile": "hot"}, profiles)
    assert parsed == md(metric="temperature", aggregation="max", target_value=80.0, window=5.0, profile="hot")
    with pytest.raises(MetadataError):
        parse_metadata({"profile": "hot"})  # not in the built-ins


@pytest.mark.parametrize(
    ("metadata", "name"),
    [
        ({"targetValue": "70"}, "gpuscale-gpu-utilization-avg"),
        (
            {"targetValue": "70", "metric": "memory_used_percent", "aggregation": "p95"},
            "gpuscale-memory-used-percent-p95",
        ),
        ({"targetValue": "70", "scope": "pool", "nodeSelector": "a=b"}, "gpuscale-gpu-utilization-avg-pool"),
        (
            {"targetValue": "70", "scope": "node", "metric": "power_percent"},
            "gpuscale-power-percent-avg-node",
        ),
        ({"targetValue": "70", "share": "container"}, "gpuscale-gpu-utilization-avg-container"),
    ],
)
def test_metric_name_and_target(metadata: dict[str, str], name: str) -> None:
    parsed = parse_metadata(metadata)
    assert metric_name(parsed) == parsed.metric_name == name
    assert target(parsed) == 70.0
