"""gpuscale.v1.Agent/Watch as the cluster scaler uses it: snapshot, updates, restarts, disconnects."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuscale._proto import agent_pb2, agent_pb2_grpc
from gpuscale.agent.service import Agent
from tests.conftest import AgentFactory
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until


async def watch(agent: Agent | int, n: int, **req: object) -> list[agent_pb2.NodeUpdate]:
    port = agent if isinstance(agent, int) else agent.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stream = agent_pb2_grpc.AgentStub(ch).Watch(agent_pb2.WatchRequest(client="test", **req))  # type: ignore[arg-type]
        out = []
        async for msg in stream:
            out.append(msg)
            if len(out) >= n:
                stream.cancel()
                break
        return out


async def test_snapshot_then_updates(start_agent: AgentFactory) -> None:
    agent = await start_agent("constant:25,constant:75", gpus=2)
    await asyncio.sleep(0.35)  # a few rounds of history
    msgs = await watch(agent, 4)
    snap, *updates = msgs
    assert snap.kind == agent_pb2.NodeUpdate.SNAPSHOT and snap.sequence == 1
    assert snap.node_name == "node-a" and snap.agent_id == agent.agent_id
    assert [g.device.uuid for g in snap.gpus] == [d.uuid for d in agent.state.devices]
    assert all(len(g.samples) >= 2 for g in snap.gpus)  # recent history, oldest first
    assert [g.samples[-1].gpu_utilization for g in snap.gpus] == [25, 75]
    assert snap.gpus[0].device.name == "NVIDIA H100 80GB HBM3" and snap.gpus[0].device.HasField(
        "memory_total_bytes"
    )
    last = {g.device.uuid: g.samples[-1].timestamp for g in snap.gpus}
    for i, u in enumerate(updates, start=2):
        assert u.kind == agent_pb2.NodeUpdate.UPDATE and u.sequence == i
        for g in u.gpus:
            assert all(s.timestamp > last[g.device.uuid] for s in g.samples)  # only what is new
            if g.samples:
                last[g.device.uuid] = g.samples[-1].timestamp
    assert sum(len(g.samples) for u in updates for g in u.gpus) >= 2


async def test_snapshot_history_is_bounded_by_request(start_agent: AgentFactory) -> None:
    agent = await start_agent(gpus=1)
    await asyncio.sleep(0.6)
    (snap,) = await watch(agent, 1, history_seconds=1)
    (full,) = await watch(agent, 1)
    assert 1 <= len(snap.gpus[0].samples) <= len(full.gpus[0].samples)
    newest = snap.gpus[0].samples[-1].timestamp
    assert all(newest - s.timestamp <= 1.0 + 1e-6 for s in snap.gpus[0].samples)


async def test_attribution_travels_in_the_stream(start_agent: AgentFactory, kubelet: FakeKubelet) -> None:
    agent = await start_agent("constant:60", gpus=2)
    u0 = agent.state.devices[0].uuid
    kubelet.pods = [pod_resources("ai", "llm-0", {"server": [("nvidia.com/gpu", [u0])]})]
    await until(lambda: agent.state.assignments, what="llm-0 attributed")
    (snap,) = await watch(agent, 1)
    attrs = {
        g.device.uuid: [(a.namespace, a.pod, a.container, a.resource_name) for a in g.attributions]
        for g in snap.gpus
    }
    assert attrs[u0] == [("ai", "llm-0", "server", "nvidia.com/gpu")]
    assert attrs[agent.state.devices[1].uuid] == []


async def test_client_follows_an_agent_restart(start_agent: AgentFactory) -> None:
    first = await start_agent("constant:40", gpus=2, node="node-r")
    (snap1,) = await watch(first, 1)
    port = first.grpc_port
    await first.stop()
    # A client that keeps reconnecting sees the restarted agent: a new agent_id, the same GPUs.
    second = await start_agent("constant:40", gpus=2, node="node-r", grpc_address=f"127.0.0.1:{port}")
    (snap2,) = await watch(port, 1)
    assert snap2.kind == agent_pb2.NodeUpdate.SNAPSHOT and snap2.sequence == 1
    assert snap2.agent_id == second.agent_id != snap1.agent_id
    assert [g.device.uuid for g in snap2.gpus] == [g.device.uuid for g in snap1.gpus]


async def test_disconnecting_client_leaves_agent_serving(start_agent: AgentFactory) -> None:
    agent = await start_agent(gpus=1)
    for _ in range(5):
        await watch(agent, 2)
    await asyncio.sleep(0.1)
    assert agent.metrics.watch_streams._value.get() == 0  # every stream closed on the agent's side too
    msgs = await watch(agent, 3)
    assert len(msgs) == 3


async def test_health_and_reflection(start_agent: AgentFactory) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    agent = await start_agent(gpus=1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="gpuscale.v1.Agent")
        )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        async for r in call:
            names = {s.name for s in r.list_services_response.service}
            break
    assert "gpuscale.v1.Agent" in names and "grpc.health.v1.Health" in names


async def test_watch_during_gpu_failure_carries_the_error(start_agent: AgentFactory) -> None:
    from tests.agent.faults import FlakyBackend

    backend = FlakyBackend(gpus=2, patterns="constant:10")
    agent = await start_agent(backend=backend)
    await asyncio.sleep(0.25)
    backend.fail(0, "lost")
    await asyncio.sleep(0.25)
    (snap,) = await watch(agent, 1)
    g0, g1 = snap.gpus
    assert (g0.error_kind, g1.error_kind) == ("lost", "")
    assert g0.samples  # the last good samples are still there, with their own (old) timestamps
    assert g0.samples[-1].timestamp < g1.samples[-1].timestamp
