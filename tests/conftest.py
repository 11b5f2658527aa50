"""Suite-wide settings.

All async tests and fixtures share one event loop (pyproject: asyncio_default_*_loop_scope = "session"), and
one gRPC channel stays open for the whole run. gRPC's asyncio layer initialises itself for an event loop
when its first object is created and shuts down (joining its poller thread) when the last one is gone;
cycling that for every test makes the shutdown hang now and then. Keeping it up once avoids the cycle.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import pytest_asyncio

from gpuscale.agent.service import Agent, DraDeviceSource, PodSource
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.base import Backend
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from tests.fakes.kubelet import FakeKubelet

pytest_plugins = ["tests.durations"]  # every test's duration against its timeout

# scripts/test runs the suite in two phases: the engine tier (a real vLLM under load takes every core) after
# the rest, alone. GPUSCALE_PHASE=rest leaves the engine tier out, =engine keeps only it; unset, all.
PHASE = os.environ.get("GPUSCALE_PHASE", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if PHASE not in ("rest", "engine"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        engine = item.get_closest_marker("engine") is not None
        (keep if engine == (PHASE == "engine") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest_asyncio.fixture(scope="session", autouse=True, loop_scope="session")
async def _grpc_aio_kept_alive() -> AsyncIterator[None]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never used for a call
    yield
    await channel.close()


@pytest.fixture
def socket_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for unix sockets: tmp_path, unless its path is too long for ``sun_path`` (108 bytes)."""
    if len(str(tmp_path)) < 80:
        yield tmp_path
        return
    short = Path(tempfile.mkdtemp(prefix="gpuscale-"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[FakeKubelet]:
    """A stand-in kubelet serving the PodResources API on ``socket_dir/kubelet.sock``."""
    fake = FakeKubelet(socket_dir / "kubelet.sock")
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


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
        dra: DraDeviceSource | None = None,
        **settings: Any,
    ) -> Agent:
        base = AgentSettings(
            node_name=node,
            interval=0.1,
            grpc_address="127.0.0.1:0",
            metrics_address="127.0.0.1:0",
            kubelet_socket=socket_dir / "kubelet.sock",
            attribution_interval=0.1,
            history_seconds=30.0,
        )
        if backend is None:
            backend = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns(patterns), node=node))
        agent = Agent(replace(base, **settings), backend, pods=pods, dra=dra)
        await agent.start()
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        await a.stop()
