"""``gpuscale render scaledobject``: the HPA behavior it writes (a scale-up that reaches the asked count in one
sync for demand triggers, the HPA's default otherwise; the scale-down window) and the request-path flags. Each
manifest validates against KEDA's CRD, the HPA KEDA makes of it against Kubernetes' schema, and the simulator's
own HPA (``gpuscale.sim.controller``, a port of ``horizontal.go``) checks what the behavior does."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
import yaml

from gpuscale.cli import main
from gpuscale.render import ScaledObjectOptions, render_scaledobject
from gpuscale.render.behavior import default_climb
from gpuscale.scaling.metadata import parse_metadata
from gpuscale.scaling.requestpath import RequestPathRef
from gpuscale.sim._check import Checker
from gpuscale.sim.controller import scale_up_limit
from gpuscale.sim.hpa import HpaState, default_behavior_rules
from gpuscale.sim.manifests import parse_behavior

from .helpers import validate_all

BASE = ("render", "scaledobject", "--target", "deployment/llm", "--namespace", "ai")


def render(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """The ScaledObject ``gpuscale render scaledobject … ARGV`` prints, and its comment as one line."""
    assert main([*BASE, *argv]) == 0
    text = capsys.readouterr().out
    (so,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ScaledObject"]
    comment = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    return so, comment


def behavior_of(so: dict[str, Any]) -> dict[str, Any]:
    behavior: dict[str, Any] = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    return behavior


def keda_hpa(so: dict[str, Any]) -> dict[str, Any]:
    """The HPA KEDA makes of ``so`` (``controllers/keda/hpa.go``: behavior copied verbatim, min at least 1)."""
    spec = so["spec"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"keda-hpa-{so['metadata']['name']}", "namespace": so["metadata"]["namespace"]},
        "spec": {
            "scaleTargetRef": spec["scaleTargetRef"],
            "minReplicas": max(1, spec["minReplicaCount"]),
            "maxReplicas": spec["maxReplicaCount"],
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": "s0-gpuscale",
                            "selector": {
                                "matchLabels": {"scaledobject.keda.sh/name": so["metadata"]["name"]}
                            },
                        },
                        "target": {"type": "AverageValue", "averageValue": "5"},
                    },
                }
            ],
            "behavior": behavior_of(so),
        },
    }


FAST_8 = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Percent", "value": 900, "periodSeconds": 15},
            {"type": "Pods", "value": 8, "periodSeconds": 15},
        ],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
    },
}


def test_llm_serving_scales_up_to_the_asked_count_in_one_sync(capsys: pytest.CaptureFixture[str]) -> None:
    so, comment = render("--min-replicas", "0", "--max-replicas", "8", capsys=capsys)
    validate_all([so, keda_hpa(so)])
    assert behavior_of(so) == FAST_8
    assert (
        "behavior.scaleUp: to the count the trigger asks for in one HPA sync (15s): no stabilization, the "
        "larger of +900% and +8 pods per 15s (1→8 at once; from zero, one sync after KEDA's activation). A "
        "demand signal asks for its count once; the HPA's default, the larger of +100% and +4 pods per 15s, "
        "a sync per step (1→5→8), would climb to it (--scale-up default for that)."
    ) in comment
    assert (
        "behavior.scaleDown: the HPA keeps the largest count asked for in the last 300s, then removes 1 pod "
        "per 60s: a replica that loads a model takes minutes to start"
    ) in comment


def test_a_gpu_profile_keeps_the_hpas_default_scale_up(capsys: pytest.CaptureFixture[str]) -> None:
    so, comment = render("--profile", "online-inference", "--max-replicas", "20", capsys=capsys)
    validate_all([so, keda_hpa(so)])
    assert behavior_of(so) == {
        "scaleDown": {
            "stabilizationWindowSeconds": 300,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        }
    }
    assert (
        "behavior.scaleUp: the HPA's default, the larger of +100% and +4 pods per 15s, a sync per step "
        "(1→5→10→20); --scale-up fast for the asked count in one sync. behavior.scaleDown: the HPA keeps "
        "the largest count asked for in the last 300s, then removes 1 pod per 60s (--scale-down-stabilization)."
    ) in comment


REQUEST_PATH = ("--request-path", "gateway:9090", "--request-path-format", "envoy")


@pytest.mark.parametrize(
    ("argv", "fast", "window"),
    [
        (("--profile", "llm-latency"), True, 300),
        (("--metric", "request_rate", "--target-value", "4"), True, 300),
        (("--mode", "prometheus"), True, 300),  # vLLM's own queue through KEDA's prometheus trigger
        (("--mode", "external-push", "--metric", "queue_length", "--target-value", "3"), True, 300),
        (("--profile", "online-inference", "--queue-target", "4"), True, 300),  # a demand trigger beside
        (("--profile", "online-inference", *REQUEST_PATH), True, 300),
        (("--profile", "batch-inference"), False, 300),
        (("--mode", "prometheus", "--profile", "online-inference"), False, 300),
        (("--scale-up", "default"), False, 300),  # the window is the workload's: its replicas load models
        (("--scale-up", "fast", "--profile", "batch-inference"), True, 300),
        (("--scale-down-stabilization", "120"), True, 120),
        (("--profile", "training-throughput", "--scale-down-stabilization", "900"), False, 900),
    ],
)
def test_the_behavior_by_trigger_and_flags(
    argv: tuple[str, ...], fast: bool, window: int, capsys: pytest.CaptureFixture[str]
) -> None:
    so, comment = render("--max-replicas", "12", *argv, capsys=capsys)
    validate_all([so, keda_hpa(so)])
    behavior = behavior_of(so)
    assert ("scaleUp" in behavior) is fast
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == window
    if fast:
        assert behavior["scaleUp"]["policies"][1] == {"type": "Pods", "value": 12, "periodSeconds": 15}
    assert ("1→12 at once" in comment) is fast
    assert f"in the last {window}s" in comment


@pytest.mark.parametrize("max_replicas", [1, 2, 8, 64, 1000])
def test_fast_reaches_any_count_in_one_sync_in_the_hpas_own_arithmetic(
    max_replicas: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """``calculateScaleUpLimitWithScalingRules`` over the rendered policies: from every count the limit is at
    least maxReplicaCount, so one sync reaches whatever the trigger asks for (the limit never adds replicas:
    policies are limits, not targets)."""
    so, _ = render("--max-replicas", str(max_replicas), capsys=capsys)
    checker = Checker()
    behavior = parse_behavior(checker, {"behavior": behavior_of(so)}, "spec")
    assert checker.problems == [] and behavior is not None
    for current in range(1, max_replicas + 1):
        assert scale_up_limit(current, HpaState(), behavior.scale_up, now=1000) >= max_replicas


@pytest.mark.parametrize(
    ("max_replicas", "climb"),
    [(1, [1]), (5, [1, 5]), (8, [1, 5, 8]), (10, [1, 5, 10]), (50, [1, 5, 10, 20, 40, 50])],
)
def test_the_default_climb_the_comment_names_is_the_hpas(max_replicas: int, climb: list[int]) -> None:
    """What the comment says the HPA's default does, against the defaulted rules in the HPA's arithmetic
    (render always writes a behavior, so the HPA takes the behavior path: max(c + 4, 2c) per sync)."""
    assert default_climb(max_replicas) == climb
    rules = default_behavior_rules("up")
    for c, after in pairwise(climb):
        assert min(max_replicas, scale_up_limit(c, HpaState(), rules, now=1000)) == after


def test_the_request_path_flags_are_trigger_metadata_the_scaler_parses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    so, comment = render(
        "--min-replicas", "0", "--max-replicas", "8", *REQUEST_PATH,
        "--request-path-match", "default/llm", "--replica-rate", "2.5",
        capsys=capsys,
    )  # fmt: skip
    validate_all([so])
    (trigger,) = so["spec"]["triggers"]
    assert trigger["metadata"] == {
        "scalerAddress": "gpuscale-scaler.gpuscale.svc:6001",
        "profile": "llm-serving",
        "requestPath": "gateway:9090",
        "requestPathFormat": "envoy",
        "requestPathMatch": "default/llm",
        "replicaRate": "2.5",
    }
    md = parse_metadata(trigger["metadata"])
    assert md.request_path == RequestPathRef("gateway", 9090, "/metrics")
    assert (md.request_path_format, md.request_path_match, md.replica_rate) == ("envoy", "default/llm", 2.5)
    assert "never wakes it" not in comment
    assert (
        "minReplicaCount 0: the request path (Service gateway:9090/metrics, envoy) counts the requests that "
        "arrive with no pod to take them, so it wakes the workload and asks for ceil(demand / 2.5) replicas "
        "(replicaRate)."
    ) in comment
    assert "requestPath gateway:9090/metrics (envoy, match default/llm), replicaRate 2.5)." in comment


@pytest.mark.parametrize("mode", ["external", "external-push"])
def test_a_named_port_and_path_in_either_external_mode(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    so, comment = render(
        "--mode", mode, "--min-replicas", "0", "--request-path", "epp:metrics/stats",
        "--request-path-format", "epp", "--metric", "request_rate", "--target-value", "3",
        capsys=capsys,
    )  # fmt: skip
    validate_all([so])
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == mode
    md = parse_metadata(trigger["metadata"])
    assert md.request_path == RequestPathRef("epp", "metrics", "/stats")
    assert "asks for ceil(demand / 3) replicas (targetValue of request_rate)" in comment


def test_without_a_request_path_a_trigger_at_zero_still_says_it_never_wakes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, comment = render("--min-replicas", "0", capsys=capsys)
    assert "so this trigger alone never wakes it" in comment
    _, comment = render("--min-replicas", "1", *REQUEST_PATH, capsys=capsys)
    assert "minReplicaCount 0" not in comment


PROMETHEUS = "the gpuscale scaler reads the request path; KEDA's prometheus trigger reads only its query"
ADAPTER = (
    "the gpuscale scaler reads the request path; an HPA's Pods metric from Prometheus Adapter is per pod"
)
FORMATS = "[envoy, epp, ingress-nginx, keda-http, vllm-router]"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scale-up", "slow"], '--scale-up "slow" must be one of [default, fast]'),
        (["--scale-up", ""], '--scale-up "" must be one of [default, fast]'),
        (["--scale-down-stabilization", "3601"], '--scale-down-stabilization "3601" must be from 0 to 3600'),
        (["--scale-down-stabilization", "-1"], '--scale-down-stabilization "-1" must be from 0 to 3600'),
        (
            ["--request-path", "gateway:9090"],
            'invalid trigger metadata: parameter "requestPathFormat" is required with "requestPath"; give one '
            f"of {FORMATS}",
        ),
        (
            [*REQUEST_PATH[:2], "--request-path-format", "nginx"],
            f'invalid trigger metadata: parameter "requestPathFormat" value "nginx" must be one of {FORMATS}',
        ),
        (
            ["--request-path", "http://gateway:9090/metrics", "--request-path-format", "envoy"],
            'invalid trigger metadata: parameter "requestPath" value "http://gateway:9090/metrics" must be a '
            'Service of the ScaledObject\'s namespace as "name:port[/path]" (port: a number from 1 to 65535 or '
            'the port\'s name; path: default "/metrics"), or "namespace/name:port[/path]" for a namespace '
            "the scaler's --request-path-namespaces allows; never a URL or an address",
        ),
        (
            [*REQUEST_PATH, "--replica-rate", "0"],
            'invalid trigger metadata: parameter "replicaRate" value "0" must be greater than 0',
        ),
        (
            ["--replica-rate", "2"],
            'invalid trigger metadata: parameter "replicaRate" value "2" is only allowed with "requestPath"',
        ),
        (
            [*REQUEST_PATH, "--scope", "node", "--profile", "batch-inference"],
            'invalid trigger metadata: parameter "requestPath" value "gateway:9090" is only allowed with scope '
            '"workload" (scope is "node")',
        ),
        (
            ["--mode", "prometheus", *REQUEST_PATH],
            f'--request-path "gateway:9090" is for --mode external or external-push: {PROMETHEUS}',
        ),
        (
            ["--mode", "prometheus", "--replica-rate", "2"],
            f'--replica-rate "2" is for --mode external or external-push: {PROMETHEUS}',
        ),
    ],
)
def test_bad_values_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *argv]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"gpuscale: error: {message}\n")


@pytest.mark.parametrize("flag", ["--request-path", "--request-path-format", "--request-path-match"])
def test_the_adapter_path_refuses_a_request_path(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["render", "hpa", "--target", "deployment/llm", "--namespace", "ai", flag, "x"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    message = f'{flag} "x" is for render scaledobject --mode external or external-push: {ADAPTER}'
    assert (out, err) == ("", f"gpuscale: error: {message}\n")


def test_render_hpa_keeps_its_scale_down(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "hpa", "--target", "deployment/llm", "--namespace", "ai"]) == 0
    (hpa,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert main(["render", "hpa", "--target", "deployment/llm", "--namespace", "ai",
                 "--scale-down-stabilization", "60"]) == 0  # fmt: skip
    (hpa,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60


def test_options_default_as_the_flags_do() -> None:
    """The library's defaults are the command's: a ScaledObjectOptions without them writes the same."""
    text = render_scaledobject(ScaledObjectOptions("deployment/llm", "ai", max_replicas=8))
    (so,) = [d for d in yaml.safe_load_all(text) if d]
    assert behavior_of(so)["scaleUp"] == FAST_8["scaleUp"]
    assert behavior_of(so)["scaleDown"] == FAST_8["scaleDown"]
