"""``gpuscale render``: every manifest it writes validates (KEDA's CRDs, Kubernetes' schemas) and says the right
thing; the examples in deploy/examples validate too; bad options are one-line usage errors."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.cli import render as render_cli
from gpuscale.errors import UsageError
from gpuscale.render import HpaOptions, ScaledObjectOptions, render_hpa, render_scaledobject

from .helpers import EXAMPLES, validate_all


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def cli(*argv: str, tmp_path: Path) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    render_cli.register(parser.add_subparsers())
    out = tmp_path / "out.yaml"
    args = parser.parse_args(["render", *argv, "-o", str(out)])
    assert args.func(args) == 0
    return docs(out.read_text())


@pytest.mark.parametrize("mode", ["external", "external-push", "prometheus"])
def test_minimal_command_writes_a_working_manifest(mode: str, tmp_path: Path) -> None:
    (so,) = cli(
        "scaledobject", "--target", "deployment/llm", "--namespace", "ai", "--mode", mode, tmp_path=tmp_path
    )
    validate_all([so])
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}
    assert so["metadata"] == {
        "name": "llm",
        "namespace": "ai",
        "labels": {"app.kubernetes.io/managed-by": "gpuscale-render"},
    }
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == mode
    assert trigger["name"] == "engine"  # the default profile, llm-serving, scales on the engine's queue
    if mode == "prometheus":  # vLLM's own waiting requests, summed over the workload's pods
        assert trigger["metricType"] == "AverageValue"
        assert trigger["metadata"] == {
            "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
            "query": 'sum({__name__=~"vllm[:_]num_requests_waiting",namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"})',
            "threshold": "5",
            "activationThreshold": "0",
            "ignoreNullValues": "false",
        }
    else:
        assert trigger["metricType"] == "AverageValue"
        assert trigger["metadata"] == {
            "scalerAddress": "gpuscale-scaler.gpuscale.svc:6001",
            "profile": "llm-serving",
        }


def test_comments_explain_metric_type() -> None:
    gpu: dict[str, Any] = {"profile": None, "metric": "gpu_utilization", "target_value": "85"}
    text = render_scaledobject(ScaledObjectOptions("deployment/llm", "ai", mode="prometheus", **gpu))
    assert "# metricType Value, not KEDA's default AverageValue" in text
    assert "AverageValue would compute\n# ceil(avg / 85)" in text or "ceil(avg / 85)" in text
    ext = render_scaledobject(ScaledObjectOptions("deployment/llm", "ai", **gpu))
    assert "times the pods with GPU samples" in ext
    engine = " ".join(render_scaledobject(ScaledObjectOptions("deployment/llm", "ai")).split())
    assert (
        "# metricType AverageValue: the scaler reports queue_length, summed over the workload's pods"
        in engine
    )
    assert "ceil(total / 5), 5 per replica" in engine
    assert "gpuscale.io/metrics-port" in engine


CASES: list[tuple[dict[str, Any], str, dict[str, str]]] = [
    # (options, metricType, expected metadata subset)
    (
        {"mode": "external", "scope": "node", "profile": "batch-inference"},
        "Value",
        {"scalerAddress": "gpuscale-agent.gpuscale.svc:6000", "scope": "node"},
    ),
    (
        {
            "mode": "external",
            "scope": "pool",
            "node_selector": "pool=a100",
            "metric": "power",
            "target_value": "300",
            "aggregation": "sum",
        },
        "Value",
        {"scope": "pool", "nodeSelector": "pool=a100", "aggregation": "sum"},
    ),
    (
        {
            "mode": "external-push",
            "profile": "online-inference",
            "scaler_address": "s.x.svc:6001",
            "tls": True,
        },
        "AverageValue",
        {"scalerAddress": "s.x.svc:6001", "enableTLS": "true", "profile": "online-inference"},
    ),
    (
        {"mode": "prometheus", "aggregation": "sum", "metric": "memory_used", "target_value": "40Gi"},
        "AverageValue",
        {
            "query": 'sum(avg_over_time(DCGM_FI_DEV_FB_USED{job="gpuscale-agent",namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"}[30s]) * 1048576)',
            "threshold": "42949672960",
        },
    ),  # 40Gi, every digit
    (
        {
            "mode": "prometheus",
            "profile": "online-inference",
            "exported_labels": True,
            "target": "statefulset/llm",
        },
        # the profile's 10 s window, at the chart's 15 s scrape: a 30 s range, so it always holds a sample
        "Value",
        {
            "query": 'quantile(0.9, avg_over_time(DCGM_FI_DEV_GPU_UTIL{job="gpuscale-agent",exported_namespace="ai",exported_pod=~"llm-[0-9]+"}[30s]))'
        },
    ),
    (
        {"mode": "prometheus", "profile": "online-inference", "scrape_interval": 5.0},
        "Value",
        {
            "query": 'quantile(0.9, avg_over_time(DCGM_FI_DEV_GPU_UTIL{job="gpuscale-agent",namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"}[10s]))'
        },
    ),
    (
        {
            "mode": "prometheus",
            "profile": None,
            "metric": "gpu_utilization",
            "window": "20",
            "scrape_interval": 60.0,
            "target_value": "70.25",
        },
        "Value",
        {
            "query": 'avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL{job="gpuscale-agent",namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"}[120s]))',
            "threshold": "70.25",
        },
    ),
    (
        {
            "mode": "prometheus",
            "profile": None,
            "metric": "gpu_utilization",
            "target_value": "85",
            "release": "gs",
            "window": "0",
        },  # the job of release gs's agents
        "Value",
        {
            "query": 'avg(DCGM_FI_DEV_GPU_UTIL{job="gs-agent",namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"})'
        },
    ),
    (
        {
            "mode": "prometheus",
            "profile": None,
            "metric": "gpu_utilization",
            "target_value": "85",
            "agent_job": "",
            "window": "0",
        },
        "Value",
        {"query": 'avg(DCGM_FI_DEV_GPU_UTIL{namespace="ai",pod=~"llm-[a-z0-9]+-[a-z0-9]{5}"})'},
    ),
    (
        {
            "mode": "prometheus",
            "profile": None,
            "metric": "gpu_utilization",
            "target_value": "85",
            "vendor": "amd",
            "window": "0",
            "pod_regex": "llm-.*",
        },
        "Value",
        {"query": 'avg(gpu_gfx_activity{job="gpuscale-agent",namespace="ai",pod=~"llm-.*"})'},
    ),
]


@pytest.mark.parametrize(("options", "metric_type", "expect"), CASES)
def test_modes_and_scopes(options: dict[str, Any], metric_type: str, expect: dict[str, str]) -> None:
    options = {"target": "deployment/llm", "namespace": "ai", **options}
    objs = docs(render_scaledobject(ScaledObjectOptions(**options)))
    validate_all(objs)
    (trigger,) = objs[-1]["spec"]["triggers"]
    assert trigger["metricType"] == metric_type
    assert expect.items() <= trigger["metadata"].items()


def test_tls_trigger_authentication() -> None:
    auth, so = docs(
        render_scaledobject(
            ScaledObjectOptions("deployment/llm", "ai", tls_secret="gpuscale-ca", tls_client_cert=True)
        )
    )
    validate_all([auth, so])
    assert auth["kind"] == "TriggerAuthentication" and auth["metadata"]["namespace"] == "ai"
    assert [p["parameter"] for p in auth["spec"]["secretTargetRef"]] == [
        "caCert",
        "tlsClientCert",
        "tlsClientKey",
    ]
    assert so["spec"]["triggers"][0]["authenticationRef"] == {"name": auth["metadata"]["name"]}
    assert so["spec"]["triggers"][0]["metadata"]["enableTLS"] == "true"


RULE = {
    "seriesQuery": 'DCGM_FI_DEV_GPU_UTIL{job="gpuscale-agent",namespace!="",pod!=""}',
    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
    "name": {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": "gpuscale_gpu_utilization_avg"},
    "metricsQuery": 'avg by (<<.GroupBy>>) (avg_over_time(<<.Series>>{<<.LabelMatchers>>,job="gpuscale-agent"}[30s]))',
}


def test_hpa_and_adapter_rules_as_chart_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--adapter`` writes the rule as prometheus-adapter chart values in a file of its own, and says so:
    nothing in the manifests replaces the adapter's config."""
    values_file = tmp_path / "adapter-values.yaml"
    (hpa,) = cli(
        "hpa",
        "--adapter",
        "--adapter-values",
        str(values_file),
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        "--profile",
        "",
        "--metric",
        "gpu_utilization",
        "--target-value",
        "85",
        tmp_path=tmp_path,
    )
    validate_all([hpa])
    (metric,) = hpa["spec"]["metrics"]
    assert metric == {
        "type": "Pods",
        "pods": {
            "metric": {"name": "gpuscale_gpu_utilization_avg"},
            "target": {"type": "AverageValue", "averageValue": "85"},
        },
    }
    text = values_file.read_text()
    assert yaml.safe_load(text) == {"rules": {"custom": [RULE]}}  # the chart's rules.custom list
    assert (
        f"#   helm upgrade prometheus-adapter prometheus-community/prometheus-adapter -n monitoring "
        f"--reuse-values -f {values_file}\n"
    ) in text
    assert capsys.readouterr().err == (
        f"gpuscale render: the Prometheus Adapter rule is in {values_file}, as values of the "
        "prometheus-community/prometheus-adapter chart (rules.custom): merge them into the adapter's release "
        "(see the file's comment); --adapter-configmap NAME writes the whole ConfigMap instead\n"
    )
    (only_hpa,) = docs(
        render_hpa(
            HpaOptions(
                "deployment/llm",
                "ai",
                profile=None,
                metric="gpu_utilization",
                target_value="85",
                exported_labels=True,
            )
        )
    )
    validate_all([only_hpa])


def test_the_whole_adapter_configmap_only_when_asked_for_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    hpa, cm = cli(
        "hpa",
        "--adapter-configmap",
        "my-adapter",
        "--adapter-namespace",
        "metrics",
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        "--profile",
        "",
        "--metric",
        "gpu_utilization",
        "--target-value",
        "85",
        tmp_path=tmp_path,
    )
    validate_all([hpa, cm])
    assert cm["metadata"] == {"name": "my-adapter", "namespace": "metrics"}
    assert yaml.safe_load(cm["data"]["config.yaml"]) == {"rules": [RULE]}
    assert "REPLACES every rule the adapter has" in (tmp_path / "out.yaml").read_text()
    assert not (tmp_path / "prometheus-adapter-values.yaml").exists()
    # --adapter with it: still the ConfigMap, no values file
    cli(
        "hpa",
        "--adapter",
        "--adapter-configmap",
        "my-adapter",
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        tmp_path=tmp_path,
    )
    assert not (tmp_path / "prometheus-adapter-values.yaml").exists()


def test_an_adapter_values_file_that_cannot_be_written_is_a_usage_error(tmp_path: Path) -> None:
    from gpuscale.errors import UsageError

    with pytest.raises(UsageError) as e:
        cli(
            "hpa",
            "--adapter",
            "--adapter-values",
            str(tmp_path / "no" / "such" / "dir.yaml"),
            "--target",
            "deployment/llm",
            "--namespace",
            "ai",
            tmp_path=tmp_path,
        )
    assert (
        str(e.value)
        == f'--adapter-values "{tmp_path}/no/such/dir.yaml": cannot write it: No such file or directory'
    )


BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"target": "job/x"},
        '--target "job/x" must be KIND/NAME with KIND one of [deployment, statefulset], e.g. deployment/llm',
    ),
    ({"mode": "push"}, '--mode "push" must be one of [external, external-push, prometheus]'),
    ({"namespace": "AI"}, '--namespace "AI" must be a Kubernetes namespace name (a DNS label)'),
    ({"max_replicas": 0}, '--max-replicas "0" must be at least 1 and at least --min-replicas (1)'),
    (
        {"aggregation": "mean"},
        'invalid trigger metadata: parameter "aggregation" value "mean" must be one of [avg, max, min, p50, p90, p95, p99, sum]',
    ),
    (
        {"mode": "prometheus", "metric": "power_percent", "target_value": "80"},
        'metric "power_percent" has no Prometheus series for nvidia GPUs (the exporters publish no power limit); use --mode external, or one of [dram_active, gpu_utilization, gr_engine_active, memory_used, memory_used_percent, memory_utilization, power, sm_active, sm_occupancy, temperature, tensor_active]',
    ),
    (
        {"mode": "prometheus", "metric": "sm_active", "target_value": "80", "vendor": "amd"},
        'metric "sm_active" has no Prometheus series for amd GPUs (not in its exporter); use --mode external, or one of [gpu_utilization, memory_used, memory_used_percent, memory_utilization, power, temperature]',
    ),
    (
        {
            "mode": "prometheus",
            "scope": "node",
            "profile": None,
            "metric": "gpu_utilization",
            "target_value": "85",
        },
        '--scope "node" needs --mode external: Prometheus has no node labels to select a pool and no single node to read',
    ),
    (
        {"mode": "prometheus", "tls": True},
        "--tls, --tls-secret and --tls-client-cert are for --mode external or external-push",
    ),
    (
        {"mode": "prometheus", "pod_regex": "llm-(.*"},
        '--pod-regex "llm-(.*" is not a valid regular expression: missing ), unterminated subpattern at position 4',
    ),
    (
        {"mode": "prometheus", "exported_labels": True},
        "--exported-labels is for the agent's GPU series; metric \"queue_length\" is read from the engine pods' "
        "own series, whose namespace and pod are the scrape target's labels",
    ),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    options = {"target": "deployment/llm", "namespace": "ai", **options}
    with pytest.raises(UsageError) as e:
        render_scaledobject(ScaledObjectOptions(**options))
    assert str(e.value) == message
    assert "\n" not in str(e.value)


VALUES_EXAMPLES = {"prometheus-adapter-values.yaml"}  # chart values, not Kubernetes objects


@pytest.mark.parametrize(
    "path", sorted(p for p in EXAMPLES.glob("*.yaml") if p.name not in VALUES_EXAMPLES), ids=lambda p: p.name
)
def test_examples_validate(path: Path) -> None:
    objs = docs(path.read_text())
    assert objs
    validate_all(objs)


def test_the_adapter_values_example_is_the_rule_of_the_hpa_example() -> None:
    (hpa,) = docs((EXAMPLES / "prometheus-adapter-hpa.yaml").read_text())
    values = yaml.safe_load((EXAMPLES / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    assert rule["name"]["as"] == hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]


def _example_commands() -> list[tuple[list[str], str]]:
    text = (EXAMPLES / "README.md").read_text()
    found = re.findall(r"^gpuscale (render .*) > (\S+\.yaml)$", text, re.M)
    return [(shlex.split(args), name) for args, name in found]


def _side_files(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--adapter-values"]


def test_every_example_has_its_command() -> None:
    written = [name for argv, name in _example_commands()] + [
        f for argv, _ in _example_commands() for f in _side_files(argv)
    ]
    assert sorted(written) == sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize(("argv", "name"), _example_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_examples_are_what_their_command_renders(
    argv: list[str],
    name: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuscale.cli import main

    monkeypatch.chdir(tmp_path)  # where a command writes its other files
    assert main(argv) == 0
    assert capsys.readouterr().out == (EXAMPLES / name).read_text()
    for side in _side_files(argv):
        assert (tmp_path / side).read_text() == (EXAMPLES / side).read_text(), side


def test_fallback() -> None:
    (so,) = docs(
        render_scaledobject(
            ScaledObjectOptions(
                "deployment/llm",
                "ai",
                max_replicas=8,
                fallback_replicas=4,
                fallback_failure_threshold=5,
                fallback_behavior="currentReplicasIfHigher",
            )
        )
    )
    validate_all([so])
    assert so["spec"]["fallback"] == {
        "failureThreshold": 5,
        "replicas": 4,
        "behavior": "currentReplicasIfHigher",
    }
    (plain,) = docs(render_scaledobject(ScaledObjectOptions("deployment/llm", "ai")))
    assert "fallback" not in plain["spec"]


@pytest.mark.parametrize(
    ("behavior", "says"),
    [
        (None, "the larger of the replicas running now and 2: it never scales the workload down"),
        ("currentReplicasIfHigher", "the larger of the replicas running now and 2: it never scales"),
        ("currentReplicas", "the replicas running now (2 is not used): it never scales the workload down"),
        ("static", "exactly 2: a workload running more is SCALED DOWN to 2 while monitoring is broken"),
        ("currentReplicasIfLower", "a workload running more is SCALED DOWN to 2 while monitoring is broken"),
    ],
)
def test_the_fallback_keeps_a_running_workload_by_default_and_says_what_each_behaviour_does(
    behavior: str | None, says: str
) -> None:
    """Broken monitoring never scales a workload down: the fallback rendered by default keeps the replicas
    running when they are more than --fallback-replicas (KEDA's currentReplicasIfHigher; static would take a
    workload at 6 down to 2), and the comment says plainly what the chosen behaviour does."""
    options = ScaledObjectOptions("deployment/llm", "ai", max_replicas=8, fallback_replicas=2)
    if behavior is not None:
        options = ScaledObjectOptions(
            "deployment/llm", "ai", max_replicas=8, fallback_replicas=2, fallback_behavior=behavior
        )
    text = render_scaledobject(options)
    (so,) = docs(text)
    assert so["spec"]["fallback"]["behavior"] == (behavior or "currentReplicasIfHigher")
    comment = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert says in comment


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"fallback_replicas": 20},
            '--fallback-replicas "20" must be between --min-replicas (1) and --max-replicas (10)',
        ),
        (
            {"fallback_replicas": 2, "fallback_failure_threshold": 0},
            '--fallback-failure-threshold "0" must be from 1 to 2147483647',
        ),
        (
            {"fallback_replicas": 2, "fallback_behavior": "latest"},
            '--fallback-behavior "latest" must be one of [static, currentReplicas, currentReplicasIfHigher, currentReplicasIfLower]',
        ),
    ],
)
def test_bad_fallback_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as e:
        render_scaledobject(ScaledObjectOptions("deployment/llm", "ai", **options))
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("metric", "metric_type", "query"),
    [
        (
            "queue_length",
            "AverageValue",
            'sum({__name__=~"vllm[:_]num_requests_waiting",namespace="ai",pod=~"llm-',
        ),
        ("requests_in_flight", "AverageValue", ') + sum({__name__=~"vllm[:_]num_requests_running",'),
        (
            "generation_tokens_per_second",
            "AverageValue",
            'sum(rate({__name__=~"vllm[:_]generation_tokens_total",',
        ),
        ("kv_cache_usage", "Value", '100 * avg({__name__=~"vllm[:_]kv_cache_usage_perc",'),
        ("request_rate", "AverageValue", 'sum(rate({__name__=~"vllm[:_]request_success_total",'),
        (
            "ttft_p95",
            "Value",
            'histogram_quantile(0.95, sum by (le) (rate({__name__=~"vllm[:_]time_to_first_token_seconds_bucket",',
        ),
        (
            "itl_p95",
            "Value",
            'histogram_quantile(0.95, sum by (le) (rate({__name__=~"vllm[:_]inter_token_latency_seconds_bucket",',
        ),
    ],
)
def test_engine_metrics_render_for_gpuscale_and_as_the_prometheus_trigger_users_write_today(
    metric: str, metric_type: str, query: str, tmp_path: Path
) -> None:
    target = "80" if metric == "kv_cache_usage" else "5"
    (ours,) = cli(
        "scaledobject",
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        "--metric",
        metric,
        "--target-value",
        target,
        tmp_path=tmp_path,
    )
    validate_all([ours])
    (trigger,) = ours["spec"]["triggers"]
    assert (
        trigger["metadata"]["metric"] == metric
        and trigger.get("metricType", "AverageValue") == "AverageValue"
    )
    (theirs,) = cli(
        "scaledobject",
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        "--metric",
        metric,
        "--target-value",
        target,
        "--mode",
        "prometheus",
        tmp_path=tmp_path,
    )
    validate_all([theirs])
    (trigger,) = theirs["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == metric_type
    assert query in trigger["metadata"]["query"]


def test_a_gpu_trigger_paired_with_an_engine_queue_trigger(tmp_path: Path) -> None:
    gpu_metric = ["--profile", "", "--metric", "gpu_utilization", "--target-value", "85"]
    (so,) = cli(
        "scaledobject",
        "--target",
        "deployment/llm",
        "--namespace",
        "ai",
        "--queue-target",
        "4",
        *gpu_metric,
        tmp_path=tmp_path,
    )
    validate_all([so])
    gpu, queue = so["spec"]["triggers"]
    assert gpu["name"] == "gpu" and queue["name"] == "queue" and queue["metricType"] == "AverageValue"
    assert queue["metadata"]["metric"] == "queue_length" and queue["metadata"]["targetValue"] == "4"
    for argv, message in (
        (
            ["--mode", "prometheus", *gpu_metric],
            "--queue-target needs --mode external or external-push and scope workload",
        ),
        (
            ["--metric", "queue_length", "--target-value", "4"],
            '--queue-target goes with a GPU metric; --metric is "queue_length" already',
        ),
        (
            [],  # the default profile, llm-serving, is the queue already
            '--queue-target goes with a GPU metric; profile "llm-serving" sets metric "queue_length" already '
            "(pick a GPU metric with --metric or --profile)",
        ),
    ):
        with pytest.raises(UsageError, match=re.escape(message)):
            cli(
                "scaledobject",
                "--target",
                "deployment/llm",
                "--namespace",
                "ai",
                "--queue-target",
                "4",
                *argv,
                tmp_path=tmp_path,
            )
    with pytest.raises(UsageError, match='--queue-target value "-1" must be greater than 0'):
        cli(
            "scaledobject",
            "--target",
            "deployment/llm",
            "--namespace",
            "ai",
            "--queue-target",
            "-1",
            *gpu_metric,
            tmp_path=tmp_path,
        )
