"""The chart's ServiceMonitors, as the Prometheus Operator turns them into scrape configs, run by a real
Prometheus over a real agent and two real scaler replicas: a GPU no pod holds carries no pod (not the agent's),
per-pod panels show only the workload's pods, ``up`` names the agent's node, and the dashboard's agent
counts do not add up the replicas; both serve ``gpuscale_build_info`` and the process collector's series."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.scaler.server import Scaler, ScalerSettings
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet
from tests.fakes.prometheus import PrometheusServer, prometheus_binary, run_prometheus
from tests.poll import until

from .agents import POD_A, POD_B, attributed_agent
from .helpers import NAMESPACE, ROOT, find, objects, render_chart
from .operator import Target, scrape_config

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binary() is None, reason="Debian's prometheus package is not installed"),
]

DASHBOARD = ROOT / "deploy" / "grafana" / "gpuscale.json"
AGENT_POD = "gpuscale-agent-x7k2p"


def _panel_exprs(title: str) -> list[str]:
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title]
    return [
        t["expr"]
        .replace("$namespace", ".*")
        .replace("$hostname_label", "Hostname")
        .replace("$node", ".*")
        .replace("$job", "gpuscale-agent")
        for t in panel["targets"]
    ]


def _configs(values: dict[str, Any], agent_port: int, scaler_ports: list[int]) -> list[dict[str, Any]]:
    objs = objects(render_chart({"serviceMonitor": {"enabled": True}, **values}))
    configs = []
    for component, ports, container in (("agent", [agent_port], "agent"), ("scaler", scaler_ports, "scaler")):
        monitor = find(objs, "ServiceMonitor", f"gpuscale-{component}")
        service = find(objs, "Service", f"gpuscale-{component}")
        targets = [
            Target(
                f"127.0.0.1:{port}",
                NAMESPACE,
                service["metadata"]["name"],
                service["metadata"]["labels"],
                pod=AGENT_POD if component == "agent" else f"gpuscale-scaler-6b9c7-{i}",
                container=container,
                node="node-a" if component == "agent" else f"cpu-{i}",
            )
            for i, port in enumerate(ports)
        ]
        configs.append(scrape_config(monitor, targets))
    return configs


async def _two_scalers(agent_grpc: int) -> list[Scaler]:
    scalers = []
    for _ in range(2):
        s = Scaler(
            ScalerSettings(
                agents=(f"127.0.0.1:{agent_grpc}",), grpc_address="127.0.0.1:0", metrics_address="127.0.0.1:0"
            )
        )
        await s.start()
        scalers.append(s)
    await until(lambda: all(s.pool.connected >= 1 for s in scalers), what="both scalers following the agent")
    return scalers


def _one(prom: PrometheusServer, promql: str) -> float:
    (r,) = prom.wait_for(promql)
    return float(r["value"][1])


async def test_servicemonitors_through_the_operators_relabelling(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    agent = await attributed_agent(start_agent, kubelet)  # GPU 4 is held by no pod
    free = agent.state.devices[4].uuid
    scalers = await _two_scalers(agent.grpc_port)
    try:

        def check() -> None:
            configs = _configs({}, agent.metrics_port, [s.metrics_port for s in scalers])
            with run_prometheus(tmp_path, [], scrape_configs=configs) as prom:
                prom.wait_for('DCGM_FI_DEV_GPU_UTIL{job="gpuscale-agent"}', min_series=5)
                (unheld,) = prom.query(f'DCGM_FI_DEV_GPU_UTIL{{UUID="{free}"}}')
                labels = unheld["metric"]
                assert "pod" not in labels and "namespace" not in labels and "container" not in labels, labels
                assert labels["Hostname"] == "node-a" and labels["service"] == "gpuscale-agent"
                # the per-pod panels: the workload's pods, never the agent's
                (per_pod,) = _panel_exprs("GPU utilization per pod (avg over its GPUs)")
                pods = {r["metric"]["pod"] for r in prom.wait_for(per_pod, min_series=3)}
                assert pods == {POD_A, POD_B, "llm-embed-0"}
                # `up` of the agent names its node (the agent-down alert reads it)
                (up,) = prom.wait_for('up{job="gpuscale-agent"}')
                assert up["metric"]["Hostname"] == "node-a" and "pod" not in up["metric"]
                # two replicas, one agent: the dashboard says 1 connected, 1 known, not 2
                prom.wait_for('gpuscale_scaler_agents_connected{job="gpuscale-scaler"}', min_series=2)
                connected, known, stale = _panel_exprs("Agents connected / known, stale nodes")
                assert (_one(prom, connected), _one(prom, known), _one(prom, stale)) == (1.0, 1.0, 0.0)
                # which build runs where, and the process collector's series, on both
                from gpuscale import __version__

                builds = prom.wait_for("gpuscale_build_info", min_series=3)
                assert sorted(
                    (b["metric"]["job"], b["metric"]["component"], b["metric"]["version"], b["value"][1])
                    for b in builds
                ) == [
                    ("gpuscale-agent", "agent", __version__, "1"),
                    ("gpuscale-scaler", "scaler", __version__, "1"),
                    ("gpuscale-scaler", "scaler", __version__, "1"),
                ]
                for job in ("gpuscale-agent", "gpuscale-scaler"):
                    assert _one(prom, f'max(process_resident_memory_bytes{{job="{job}"}})') > 0
                    assert prom.wait_for(f'process_cpu_seconds_total{{job="{job}"}}')

        await asyncio.to_thread(check)
    finally:
        for s in scalers:
            await s.stop()


async def test_without_the_charts_relabelling_the_agent_would_show_as_the_gpus_pod(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """The defect the relabelling prevents, through the same emulation of the operator: the same endpoint
    without its ``relabelings`` fills the unheld GPU's empty pod with the agent's own."""
    agent = await attributed_agent(start_agent, kubelet)
    free = agent.state.devices[4].uuid

    def check() -> None:
        (config, _) = _configs({}, agent.metrics_port, [])
        config["relabel_configs"] = [r for r in config["relabel_configs"] if r.get("action") != "labeldrop"]
        with run_prometheus(tmp_path, [], scrape_configs=[config]) as prom:
            (unheld,) = prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{UUID="{free}"}}')
            assert (unheld["metric"]["namespace"], unheld["metric"]["pod"]) == (NAMESPACE, AGENT_POD)

    await asyncio.to_thread(check)


async def test_with_honor_labels_off_the_workload_labels_are_exported(
    start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """``serviceMonitor.honorLabels: false``: the target's labels win, the workload's arrive as
    ``exported_*`` (what ``gpuscale render --exported-labels`` queries)."""
    agent = await attributed_agent(start_agent, kubelet)
    held = agent.state.devices[0].uuid

    def check() -> None:
        (config, _) = _configs(
            {"serviceMonitor": {"enabled": True, "honorLabels": False}}, agent.metrics_port, []
        )
        with run_prometheus(tmp_path, [], scrape_configs=[config]) as prom:
            (series,) = prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{UUID="{held}"}}')
            assert (series["metric"]["exported_pod"], series["metric"]["pod"]) == (POD_A, AGENT_POD)

    await asyncio.to_thread(check)
