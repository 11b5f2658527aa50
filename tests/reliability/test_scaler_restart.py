"""The scaler restarting under open KEDA streams, and two replicas answering alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from gpuscale.scaler.server import Scaler
from tests.poll import until

from .conftest import Cluster, KedaClient

MD = {"podSelector": "app=llm", "targetValue": "60", "activationValue": "30", "window": "0"}


async def _cluster(cluster: Cluster) -> None:
    await cluster.node("node-a", "constant:40", gpus=2)
    await cluster.node("node-b", "constant:70", gpus=2)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    cluster.add_pod("default", "llm-1", "node-b", [1], {"app": "llm"})


async def _answers(client: KedaClient, md: dict[str, str], value: float) -> bool:
    try:
        return await client.value(md) == value
    except grpc.aio.AioRpcError:
        return False


async def test_restart_under_open_streams(cluster: Cluster, keda: Callable[[int], KedaClient]) -> None:
    await _cluster(cluster)
    first = await cluster.scaler(kube=False)
    port = first.grpc_port
    client = keda(port)  # one channel for the whole test, as KEDA keeps its connection pool
    await until(lambda: _answers(client, MD, 110.0), what="first scaler answers")
    streams = [client.stub.StreamIsActive(client.ref(MD, name=f"so-{i}")) for i in range(20)]
    assert [(await s.read()).result for s in streams] == [True] * 20  # type: ignore[attr-defined]
    pending = [asyncio.ensure_future(s.read()) for s in streams]

    await first.stop()
    cluster.scalers.remove(first)
    ends = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 5)
    codes = {e.code() if isinstance(e, grpc.aio.AioRpcError) else e for e in ends}
    assert codes <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, codes  # ended, visibly

    second = await cluster.scaler(kube=False, grpc_address=f"127.0.0.1:{port}")  # same address
    await until(lambda: _answers(client, MD, 110.0), what="restarted scaler answers on the old channel")
    again = client.stub.StreamIsActive(client.ref(MD), timeout=5)
    assert (await again.read()).result is True  # type: ignore[attr-defined]
    again.cancel()
    assert second.state.stale_nodes == 0


CASES = [
    MD,
    {**MD, "aggregation": "max"},
    {**MD, "aggregation": "p90", "metric": "memory_used_percent", "targetValue": "50"},
    {"scope": "pool", "nodeSelector": "kubernetes.io/hostname=node-b", "targetValue": "50", "window": "0"},
    {"scope": "pool", "nodeSelector": "kubernetes.io/hostname", "aggregation": "min", "targetValue": "50"},
    {**MD, "podSelector": "app=nothing"},
    {**MD, "aggregation": "mean"},
]


async def test_two_replicas_give_the_same_answers(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await _cluster(cluster)
    replicas: list[Scaler] = [await cluster.scaler(kube=False), await cluster.scaler(kube=False)]
    clients = [keda(r.grpc_port) for r in replicas]
    for c in clients:
        await until(lambda c=c: _answers(c, MD, 110.0), what="replica answers")  # type: ignore[misc]

    async def answers(c: KedaClient, md: dict[str, str]) -> tuple[object, ...]:
        spec = await c.code_of(c.spec(md))
        value: object = await c.code_of(c.metrics(md))
        if value == (grpc.StatusCode.OK, ""):
            value = await c.value(md)
        active: object = await c.code_of(c.active(md))
        if active == (grpc.StatusCode.OK, ""):
            active = await c.active(md)
        return spec, value, active

    for md in CASES:
        a, b = [await answers(c, md) for c in clients]
        assert a == b, md
    assert await clients[0].value(MD) == 110.0  # avg(40, 70) times 2 pods
