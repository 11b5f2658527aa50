"""Fixtures of the deploy tests: an in-process agent with mock GPUs and the stand-in kubelet (the pattern of
tests/agent/conftest.py, copied so the two suites stay independent), and a Prometheus that scrapes it the way a
ServiceMonitor without honorLabels does."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from tests.fakes.prometheus import PrometheusServer, free_port, prometheus_binary

AgentFactory = Callable[..., Any]


@pytest.fixture
async def start_agent(socket_dir: Path) -> AsyncIterator[AgentFactory]:
    """Start agents on loopback port 0 with mock GPUs; all are stopped at the end of the test."""
    agents: list[Agent] = []

    async def start(patterns: str, gpus: int, **settings: Any) -> Agent:
        base = AgentSettings(
            node_name="node-a", interval=0.2, grpc_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
            kubelet_socket=socket_dir / "kubelet.sock", attribution_interval=0.1, history_seconds=30.0,
        )
        backend = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns(patterns), node="node-a"))
        agent = Agent(replace(base, **settings), backend)
        await agent.start()
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        await a.stop()


@contextmanager
def prometheus_with_target_labels(tmp: Path, target: str) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``target`` with ``honor_labels: false`` and the target labels a ServiceMonitor gives
    (``namespace``, ``pod`` of the agent's own pod): the agent's workload labels become ``exported_*``."""
    binary = prometheus_binary()
    assert binary, "prometheus is not installed"
    port = free_port()
    cfg = tmp / "prometheus-exported.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gpuscale-agent\n"
        "    honor_labels: false\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
        "        labels: {namespace: gpuscale, pod: gpuscale-agent-x7k2p, container: agent}\n"
    )
    log = (tmp / "prometheus-exported.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'prom-exported'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=log,
    )
    server = PrometheusServer(port)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
