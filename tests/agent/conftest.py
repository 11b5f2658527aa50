from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuscale.agent.service import Agent, PodSource
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.base import Backend
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns

AgentFactory = Callable[..., Any]


@pytest.fixture
async def start_agent(socket_dir: Path) -> AsyncIterator[AgentFactory]:
    """Start agents on loopback port 0 with mock GPUs; all are stopped at the end of the test."""
    agents: list[Agent] = []

    async def start(
        patterns: str = "constant:0",
        gpus: int = 2,
        *,
        node: str = "node-a",
        backend: Backend | None = None,
        pods: PodSource | None = None,
        **settings: Any,
    ) -> Agent:
        base = AgentSettings(
            node_name=node, interval=0.1, grpc_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
            kubelet_socket=socket_dir / "kubelet.sock", attribution_interval=0.1, history_seconds=30.0,
        )
        if backend is None:
            backend = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns(patterns), node=node))
        agent = Agent(replace(base, **settings), backend, pods=pods)
        await agent.start()
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        await a.stop()
