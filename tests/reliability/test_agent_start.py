"""GPU faults at agent start: the backend (NVML) cannot be opened at first (the driver is not loaded yet, as
when the GPU operator installs it after the DaemonSet starts). The agent serves anyway, alive (/healthz 200)
but not ready (/readyz 503, saying why), keeps retrying, and samples once the backend opens.

(Lost GPUs, hung reads and driver reloads of a running agent are in tests/agent/test_faults.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import grpc

from gpuscale._proto import agent_pb2, agent_pb2_grpc
from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from tests.agent.faults import FlakyBackend
from tests.poll import until


async def _get(agent: Agent, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{agent.metrics_port}{path}") as r:
            return r.status, await r.text()


async def test_backend_failing_to_open_at_start_then_recovering() -> None:
    backend = FlakyBackend(gpus=2, patterns="constant:30")
    backend.driver_gone = True  # open() raises BackendUnavailable
    settings = AgentSettings(
        node_name="node-a",
        interval=0.1,
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        kubelet_socket=Path("/nonexistent/kubelet.sock"),
    )
    agent = Agent(settings, backend)
    await asyncio.wait_for(agent.start(), 5)  # starts, does not raise
    try:
        await asyncio.sleep(0.5)  # a few retries
        assert await _get(agent, "/healthz") == (200, "ok\n")
        status, text = await _get(agent, "/readyz")
        assert status == 503
        assert text.startswith(
            "the GPU backend is not open yet: flaky backend unavailable: driver not loaded"
        )
        assert backend.opens == 0 and agent.state.devices == ()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as ch:  # Watch answers: no GPUs
            stream = agent_pb2_grpc.AgentStub(ch).Watch(agent_pb2.WatchRequest(client="test"), timeout=5)
            first = await stream.read()
            assert first.kind == agent_pb2.NodeUpdate.SNAPSHOT and len(first.gpus) == 0  # type: ignore[attr-defined]

            backend.driver_gone = False  # the driver is loaded: the next retry opens the backend

            async def ready() -> bool:
                return (await _get(agent, "/readyz"))[0] == 200

            await until(ready, timeout=5, what="ready once the backend opened")
            assert backend.opens == 1 and len(agent.state.devices) == 2
            while True:  # the stream starts over with a snapshot of the GPUs now there
                msg = await stream.read()
                if msg.kind == agent_pb2.NodeUpdate.SNAPSHOT:
                    break
            assert len(msg.gpus) == 2
            stream.cancel()
        assert await _get(agent, "/healthz") == (200, "ok\n")
    finally:
        await agent.stop()
