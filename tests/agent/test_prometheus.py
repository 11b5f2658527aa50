"""A real Prometheus scrapes a real agent: the PromQL users write returns what the mock GPUs were told."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.fakes.prometheus import prometheus_binary, run_prometheus
from tests.poll import until

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binary() is None, reason="Debian's prometheus package is not installed"),
]


async def test_promql_over_the_agent(start_agent: AgentFactory, kubelet: FakeKubelet, tmp_path: Path) -> None:
    agent = await start_agent("constant:30,constant:50,constant:70,constant:90", gpus=4, interval=0.2)
    u = [d.uuid for d in agent.state.devices]
    kubelet.pods = [
        pod_resources("ai", "llm-7d9f-a", {"server": [("nvidia.com/gpu", [u[0]])]}),
        pod_resources("ai", "llm-7d9f-b", {"server": [("nvidia.com/gpu", [u[1]])]}),
        pod_resources("ai", "embed-0", {"main": [("nvidia.com/gpu", [u[2]])]}),
    ]
    await until(lambda: agent.state.assignments, what="the pods attributed")

    def check() -> None:
        with run_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"]) as prom:
            avg = prom.wait_for('avg(DCGM_FI_DEV_GPU_UTIL{namespace="ai", pod=~"llm-.*"})')
            assert float(avg[0]["value"][1]) == pytest.approx(40.0)  # GPUs 0 and 1: (30 + 50) / 2
            per_pod = prom.query('max by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ai"})')
            assert {r["metric"]["pod"]: float(r["value"][1]) for r in per_pod} == {
                "llm-7d9f-a": 30.0,
                "llm-7d9f-b": 50.0,
                "embed-0": 70.0,
            }
            unattributed = prom.query('DCGM_FI_DEV_GPU_UTIL{pod=""}')
            assert [float(r["value"][1]) for r in unattributed] == [90.0]
            total = prom.query(
                "sum(DCGM_FI_DEV_FB_USED) + sum(DCGM_FI_DEV_FB_FREE) + sum(DCGM_FI_DEV_FB_RESERVED)"
            )
            assert float(total[0]["value"][1]) == pytest.approx(4 * 81559, abs=4)

    # Prometheus runs in a thread so the agent's event loop keeps serving scrapes.
    await asyncio.to_thread(check)
