"""The chart's PrometheusRule: valid rules for Prometheus's own checker (``promtool check rules``), each alert
firing on the series that mean trouble and not before its ``for`` (``promtool test rules``), each with its
runbook in docs/troubleshooting.md; and, loaded into a real Prometheus that scrapes a real agent and scaler
through the operator's relabelling, the agent-down and agents-not-followed alerts go pending on a dead agent,
and the UNAVAILABLE one on calls that answer UNAVAILABLE, while a healthy cluster raises nothing else."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from gpuscale._proto import externalscaler_pb2 as pb
from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
from gpuscale.scaler.server import Scaler, ScalerSettings
from gpuscale.scaler.subscriber import SubscriberSettings
from tests.conftest import AgentFactory
from tests.fakes.prometheus import prometheus_binary, run_prometheus
from tests.poll import until_sync

from .helpers import NAMESPACE, ROOT, find, objects, render_chart
from .operator import Target, scrape_config

PROMTOOL = shutil.which("promtool")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(
        PROMTOOL is None or prometheus_binary() is None,
        reason="Debian's prometheus package (prometheus, promtool) is not installed",
    ),
]
RUNBOOK = "https://github.com/gpuscale/gpuscale/blob/main/docs/troubleshooting.md"
ALERTS = {
    "GpuscaleAgentDown",
    "GpuscaleGpuNotRead",
    "GpuscaleGpuReadErrors",
    "GpuscaleScalerDown",
    "GpuscaleAgentsNotFollowed",
    "GpuscaleStaleNodes",
    "GpuscaleUnavailableRising",
    "GpuscaleMissingPods",
}


def _rules(values: dict[str, Any] | None = None) -> dict[str, Any]:
    objs = objects(
        render_chart(
            {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True, **(values or {})}}
        )
    )
    rule = find(objs, "PrometheusRule")
    return {"groups": rule["spec"]["groups"]}


def _write_rules(tmp: Path, values: dict[str, Any] | None = None) -> Path:
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump(_rules(values), sort_keys=False))
    return path


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    assert PROMTOOL
    run = subprocess.run(
        [PROMTOOL, "check", "rules", str(_write_rules(tmp_path))], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in run.stdout
    names = {r["alert"] for g in _rules()["groups"] for r in g["rules"]}
    assert names == ALERTS


def test_every_alert_has_its_runbook() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    headings = {h.strip() for h in re.findall(r"^### (\w+)\s*$", text, re.M)}
    assert ALERTS <= headings, ALERTS - headings
    for g in _rules()["groups"]:
        for r in g["rules"]:
            assert r["annotations"]["runbook_url"] == f"{RUNBOOK}#{r['alert'].lower()}"


AGENT = 'job="gpuscale-agent", instance="10.0.0.5:9400", Hostname="gpu-node-1"'
GPU = f'{AGENT}, gpu="0", UUID="GPU-1234"'
SCALER = 'job="gpuscale-scaler", instance="10.1.0.7:9401", pod="gpuscale-scaler-6b9c7-x2x4z"'

# (alert, input series, a time it must not fire (inside its `for`, or below its threshold), a time it fires,
# the labels it fires with, its summary and description)
CASES: list[tuple[str, list[tuple[str, str]], str, str, dict[str, str], str, str]] = [
    (
        "GpuscaleAgentDown",
        [(f"up{{{AGENT}}}", "1 0x10")],
        "4m",
        "7m",
        {"job": "gpuscale-agent", "instance": "10.0.0.5:9400", "Hostname": "gpu-node-1"},
        "gpuscale agent on gpu-node-1 is not scraped",
        "Prometheus cannot scrape the agent at 10.0.0.5:9400 (node gpu-node-1) for 5 minutes: its GPUs have no "
        "fresh samples, and the scaler answers UNAVAILABLE for workloads on that node.",
    ),
    (
        "GpuscaleGpuNotRead",
        [(f"gpuscale_agent_gpu_up{{{GPU}}}", "1 0x10")],
        "4m",
        "7m",
        {
            "job": "gpuscale-agent",
            "instance": "10.0.0.5:9400",
            "Hostname": "gpu-node-1",
            "gpu": "0",
            "UUID": "GPU-1234",
        },
        "GPU 0 on gpu-node-1 cannot be read",
        "Every read of GPU 0 (GPU-1234) on node gpu-node-1 has failed for 5 minutes; its workloads get "
        "UNAVAILABLE.",
    ),
    (
        "GpuscaleGpuReadErrors",
        [(f'gpuscale_agent_read_errors_total{{{GPU}, kind="timeout"}}', "0+1x40")],
        "5m",
        "30m",
        {
            "job": "gpuscale-agent",
            "Hostname": "gpu-node-1",
            "gpu": "0",
            "UUID": "GPU-1234",
            "kind": "timeout",
        },
        "GPU 0 on gpu-node-1 fails reads now and then",
        "30 reads of GPU 0 (GPU-1234) failed in 30 minutes (timeout): its samples have gaps.",
    ),
    (
        "GpuscaleScalerDown",
        [(f"up{{{SCALER}}}", "1 0x10")],
        "4m",
        "7m",
        {"job": "gpuscale-scaler", "instance": "10.1.0.7:9401", "pod": "gpuscale-scaler-6b9c7-x2x4z"},
        "gpuscale scaler gpuscale-scaler-6b9c7-x2x4z is not scraped",
        "Prometheus cannot scrape the scaler replica gpuscale-scaler-6b9c7-x2x4z for 5 minutes; KEDA's calls "
        "that reach it fail, and KEDA's fallback (where set) takes over.",
    ),
    (
        "GpuscaleAgentsNotFollowed",
        [
            (f"gpuscale_scaler_agents{{{SCALER}}}", "3x10"),
            (f"gpuscale_scaler_agents_connected{{{SCALER}}}", "3 2x10"),
        ],
        "4m",
        "7m",
        {"job": "gpuscale-scaler", "instance": "10.1.0.7:9401", "pod": "gpuscale-scaler-6b9c7-x2x4z"},
        "scaler gpuscale-scaler-6b9c7-x2x4z cannot follow 1 of its agents",
        "The scaler replica gpuscale-scaler-6b9c7-x2x4z has not been able to follow 1 of the agents it "
        "discovered for 5 minutes; its logs and /readyz name them and say why.",
    ),
    (
        "GpuscaleStaleNodes",
        [(f"gpuscale_scaler_stale_nodes{{{SCALER}}}", "0 2x20")],
        "9m",
        "12m",
        {"job": "gpuscale-scaler"},
        "2 GPU nodes have stale data in the scaler",
        "The scaler has lost the stream of 2 nodes for 10 minutes: workloads on them answer UNAVAILABLE and keep "
        "their replicas.",
    ),
    (
        "GpuscaleUnavailableRising",
        [
            (f'gpuscale_scaler_requests_total{{{SCALER}, method="GetMetrics", code="OK"}}', "0+60x30"),
            (
                f'gpuscale_scaler_requests_total{{{SCALER}, method="GetMetrics", code="UNAVAILABLE"}}',
                "0+20x30",
            ),
            # many GetMetricSpec calls, all OK: not what the ratio is about
            (f'gpuscale_scaler_requests_total{{{SCALER}, method="GetMetricSpec", code="OK"}}', "0+600x30"),
        ],
        "8m",
        "22m",
        {"job": "gpuscale-scaler"},
        "25% of KEDA's calls to gpuscale answer UNAVAILABLE",
        "For 10 minutes more than 0.1 of GetMetrics and IsActive calls answered UNAVAILABLE: those workloads do "
        "not scale (the HPA keeps their replicas, KEDA's fallback applies).",
    ),
    (
        "GpuscaleMissingPods",
        [  # two scaler replicas: one alert per ScaledObject, the larger count
            (f'gpuscale_scaler_missing_pods{{{SCALER}, namespace="ai", scaledobject="llm"}}', "0 2x20"),
            (
                'gpuscale_scaler_missing_pods{job="gpuscale-scaler", instance="10.1.0.8:9401", '
                'pod="gpuscale-scaler-6b9c7-q8w7n", namespace="ai", scaledobject="llm"}',
                "0 1x20",
            ),
        ],
        "9m",
        "12m",
        {"job": "gpuscale-scaler", "namespace": "ai", "scaledobject": "llm"},
        "2 GPU pods of ai/llm have no fresh sample",
        "For 10 minutes 2 running GPU pods of ai/llm have had no fresh GPU sample; the scaler treats them as the "
        "HPA treats pods without metrics.",
    ),
]


@pytest.mark.parametrize(
    ("alert", "series", "before", "at", "labels", "summary", "description"), CASES, ids=[c[0] for c in CASES]
)
def test_each_alert_fires_on_trouble_and_not_before(
    tmp_path: Path,
    alert: str,
    series: list[tuple[str, str]],
    before: str,
    at: str,
    labels: dict[str, str],
    summary: str,
    description: str,
) -> None:
    assert PROMTOOL
    test = {
        "rule_files": [str(_write_rules(tmp_path))],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [
                    {"eval_time": before, "alertname": alert, "exp_alerts": []},
                    {
                        "eval_time": at,
                        "alertname": alert,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", **labels},
                                "exp_annotations": {
                                    "summary": summary,
                                    "description": description,
                                    "runbook_url": f"{RUNBOOK}#{alert.lower()}",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    run = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_alert_labels_and_thresholds_are_values(tmp_path: Path) -> None:
    rules = _rules({"severity": "critical", "alertLabels": {"team": "ml-platform"}, "unavailableRatio": 0.5})
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert by_name["GpuscaleAgentDown"]["labels"] == {"severity": "critical", "team": "ml-platform"}
    assert by_name["GpuscaleUnavailableRising"]["expr"].endswith("> 0.5")


async def test_live_alerts_on_a_dead_agent_and_unavailable_calls(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    """The rules as loaded by a real Prometheus that scrapes, through the operator's relabelling of the chart's
    ServiceMonitors, a live agent, a dead one and a scaler following both; then KEDA-like calls that answer
    UNAVAILABLE."""
    agent = await start_agent("constant:40", gpus=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens: neither its gRPC nor its metrics
    scaler = Scaler(
        ScalerSettings(
            agents=(f"127.0.0.1:{agent.grpc_port}", f"127.0.0.1:{dead}"),
            grpc_address="127.0.0.1:0",
            metrics_address="127.0.0.1:0",
            subscriber=SubscriberSettings(backoff_max_s=0.5),
        )
    )
    await scaler.start()
    try:
        objs = objects(render_chart({"serviceMonitor": {"enabled": True}}))

        def targets(component: str, ports: list[tuple[int, str, str]]) -> list[Target]:
            service = find(objs, "Service", f"gpuscale-{component}")
            return [
                Target(
                    f"127.0.0.1:{port}",
                    NAMESPACE,
                    service["metadata"]["name"],
                    service["metadata"]["labels"],
                    pod=pod,
                    container=component,
                    node=node,
                )
                for port, pod, node in ports
            ]

        configs = [
            scrape_config(
                find(objs, "ServiceMonitor", "gpuscale-agent"),
                targets(
                    "agent",
                    [
                        (agent.metrics_port, "gpuscale-agent-aaaaa", "gpu-node-1"),
                        (dead, "gpuscale-agent-bbbbb", "gpu-node-2"),
                    ],
                ),
            ),
            scrape_config(
                find(objs, "ServiceMonitor", "gpuscale-scaler"),
                targets("scaler", [(scaler.metrics_port, "gpuscale-scaler-6b9c7-x2x4z", "cpu-1")]),
            ),
        ]
        rules = _write_rules(tmp_path)

        def active(prom: Any, want: set[str], timeout: float = 40.0) -> list[dict[str, Any]]:
            return until_sync(
                prom.alerts,
                timeout,
                f"alerts {sorted(want)} active",
                interval=0.5,
                ok=lambda alerts: {a["labels"]["alertname"] for a in alerts} >= want,
            )

        def check() -> None:
            with run_prometheus(tmp_path, [], scrape_configs=configs, rule_files=[rules]) as prom:
                alerts = active(prom, {"GpuscaleAgentDown", "GpuscaleAgentsNotFollowed"})
                by_name = {a["labels"]["alertname"]: a for a in alerts}
                assert set(by_name) == {"GpuscaleAgentDown", "GpuscaleAgentsNotFollowed"}, alerts
                down = by_name["GpuscaleAgentDown"]
                assert down["state"] == "pending"  # true now, firing after its 5 minutes
                assert (down["labels"]["Hostname"], down["labels"]["instance"]) == (
                    "gpu-node-2",
                    f"127.0.0.1:{dead}",
                )
                assert down["annotations"]["summary"] == "gpuscale agent on gpu-node-2 is not scraped"
                assert by_name["GpuscaleAgentsNotFollowed"]["labels"]["pod"] == "gpuscale-scaler-6b9c7-x2x4z"

                with grpc.insecure_channel(f"127.0.0.1:{scaler.grpc_port}") as channel:
                    stub = pb_grpc.ExternalScalerStub(channel)
                    ref = pb.ScaledObjectRef(
                        name="so",
                        namespace="ai",
                        scalerMetadata={"scope": "pool", "nodeSelector": "pool=none", "targetValue": "50"},
                    )

                    def active_names() -> set[str]:
                        """The active alerts; while the one awaited is not among them, one more UNAVAILABLE
                        answer for it to count."""
                        names = {a["labels"]["alertname"] for a in prom.alerts()}
                        if "GpuscaleUnavailableRising" not in names:
                            with pytest.raises(grpc.RpcError) as e:
                                stub.GetMetrics(
                                    pb.GetMetricsRequest(scaledObjectRef=ref, metricName="x"), timeout=5
                                )
                            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                        return names

                    until_sync(
                        active_names,
                        40,
                        "GpuscaleUnavailableRising active",
                        interval=0.2,
                        ok=lambda names: "GpuscaleUnavailableRising" in names,
                    )
                names = {a["labels"]["alertname"] for a in prom.alerts()}
                assert names == {
                    "GpuscaleAgentDown",
                    "GpuscaleAgentsNotFollowed",
                    "GpuscaleUnavailableRising",
                }

        await asyncio.to_thread(check)
    finally:
        await scaler.stop()
