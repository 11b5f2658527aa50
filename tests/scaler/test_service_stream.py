"""StreamIsActive: the current state at once, then every change, driven by agent updates (no polling)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc

from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from gpuscale.scaler.local import add_node_scope
from gpuscale.scaler.server import Scaler
from gpuscale.scaler.source import Query
from gpuscale.scaling.selector import parse_selector
from tests.poll import until

from .conftest import Cluster, KedaClient

FLIP = {
    "podSelector": "app=llm",
    "targetValue": "60",
    "activationValue": "50",
    "window": "0",
    "staleAfter": "2",
}


async def test_stream_sees_activity_flip_both_ways(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    node = await cluster.node("node-a", "square:0:80:1.2", gpus=1)  # 0 % for 0.6 s, 80 % for 0.6 s, …
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    uuid = node.uuids[0]
    await until(lambda: len(scaler.state.select(_query()).series) == 1, what="the pod's GPU is known")
    seen: list[bool] = []
    rounds: list[int] = []  # for each message, how many of the newest samples read its state
    stream = client.stub.StreamIsActive(client.ref(FLIP), timeout=8)
    async for msg in stream:
        seen.append(msg.result)
        assert _latest_util(scaler, uuid) == (80 if msg.result else 0)
        rounds.append(_newest_alike(scaler))
        if len(seen) == 4:
            stream.cancel()
            break
    assert seen in ([True, False, True, False], [False, True, False, True])
    # each flip is pushed on the update that flipped it: by the time it is read, the agent has sampled at most
    # once more (a flip the scaler found by polling would be read several rounds late)
    assert max(rounds[1:]) <= 2, rounds
    await until(lambda: scaler.metrics.streams._value.get(), 3, "every stream closed", ok=lambda n: n == 0)


async def test_stream_waits_for_data_then_answers(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    client = keda(scaler.grpc_port)
    md = {**FLIP, "activationValue": "10"}
    stream = client.stub.StreamIsActive(client.ref(md), timeout=8)
    first = asyncio.ensure_future(stream.read())
    await asyncio.sleep(0.3)
    assert not first.done()  # no data: nothing sent, stream open
    await cluster.node("node-a", "constant:40", gpus=1)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    scaler.pool.reconcile([n.address for n in cluster.nodes.values()])
    msg = await asyncio.wait_for(first, 5)
    # Before the pod is known the workload has no pods (inactive); once it is, 40 > 10 (active).
    results = [msg.result]  # type: ignore[attr-defined]
    while results[-1] is not True:
        results.append((await asyncio.wait_for(stream.read(), 5)).result)  # type: ignore[attr-defined]
    stream.cancel()
    assert results in ([True], [False, True])


async def test_stream_with_invalid_metadata_ends_with_invalid_argument(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    client = keda(scaler.grpc_port)
    stream = client.stub.StreamIsActive(client.ref({"targetValue": "0"}), timeout=5)
    try:
        await stream.read()
        raise AssertionError("the stream should fail")
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_agent_serves_node_scope() -> None:
    """The wiring of `gpuscale agent --serve-external-scaler`: the agent answers scope node from memory."""
    settings = AgentSettings(
        node_name="node-a",
        interval=0.1,
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        kubelet_socket=Path("/nonexistent/kubelet.sock"),
        serve_external_scaler=True,
    )
    agent = Agent(
        settings, MockBackend(MockConfig(gpus=2, patterns=parse_patterns("constant:30,constant:70")))
    )
    agent.extra_services.append(lambda server: add_node_scope(server, agent.state, registry=agent.registry))  # type: ignore[arg-type]
    await agent.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as ch:
            client = KedaClient(ch)
            md = {"scope": "node", "aggregation": "max", "targetValue": "60"}
            spec = (await client.spec(md)).metricSpecs[0]
            assert spec.metricName == "gpuscale-gpu-utilization-max-node"
            await until(
                lambda: client.code_of(client.metrics(md)),
                5,
                "the node scope answering GetMetrics",
                ok=lambda got: got[0] == grpc.StatusCode.OK,
            )
            assert await client.value(md) == 70
            assert await client.value({**md, "aggregation": "avg"}) == 50
            assert await client.active(md)
            stream = client.stub.StreamIsActive(client.ref(md), timeout=5)
            assert (await stream.read()).result is True  # type: ignore[attr-defined]
            stream.cancel()
            code, message = await client.code_of(client.metrics({"targetValue": "60"}))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert 'answers only scope "node"' in message
    finally:
        await agent.stop()


def _query() -> Query:
    return Query("workload", "default", parse_selector("app=llm"))


def _latest_util(scaler: Scaler, uuid: str) -> float | None:
    (series,) = scaler.state.select(_query()).series
    assert series.uuid == uuid
    return series.samples[-1].gpu_utilization


def _newest_alike(scaler: Scaler) -> int:
    """How many of the newest samples of the workload's GPU read what the newest one reads."""
    (series,) = scaler.state.select(_query()).series
    values = [s.gpu_utilization for s in reversed(series.samples)]
    return next((i for i, v in enumerate(values) if v != values[0]), len(values))
