"""A ScaledObjectRef no Kubernetes object can have never reaches the API; caches stay bounded under churn."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from gpuscale._proto import externalscaler_pb2 as pb
from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
from gpuscale.kube.workloads import ResolvedWorkload, WorkloadResolver
from gpuscale.scaler.service import ExternalScalerService, add_external_scaler
from gpuscale.scaler.state import ClusterState
from tests.scaler.node_updates import SNAP, gpu, msg


class Resolver:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def selector(self, namespace: str, name: str) -> str:
        self.asked.append((namespace, name))
        return "app=llm"


@pytest.fixture
async def stub() -> AsyncIterator[tuple[pb_grpc.ExternalScalerStub, Resolver]]:
    state = ClusterState()
    state.apply(msg(SNAP, "n1", [gpu("g1", 50, (("default", "llm-0"),))], {"default/llm-0": {"app": "llm"}}))
    resolver = Resolver()
    server = grpc.aio.server()
    add_external_scaler(server, ExternalScalerService(state, resolver=resolver))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield pb_grpc.ExternalScalerStub(channel), resolver
    await channel.close()
    await server.stop(None)


@pytest.mark.parametrize(
    ("name", "namespace", "part"),
    [
        ("llm/../../secrets", "default", "name 'llm/../../secrets' is not a Kubernetes object name"),
        ("llm?watch=1", "default", "name 'llm?watch=1' is not a Kubernetes object name"),
        ("LLM", "default", "name 'LLM' is not a Kubernetes object name"),
        ("llm", "kube system", "namespace 'kube system' is not a Kubernetes namespace name"),
        ("llm", "a" * 64, "is not a Kubernetes namespace name"),
    ],
)
async def test_a_ref_no_object_can_have_is_invalid_argument_and_never_asked_of_the_api(
    stub: tuple[pb_grpc.ExternalScalerStub, Resolver], name: str, namespace: str, part: str
) -> None:
    client, resolver = stub
    ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata={"targetValue": "60"})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert part in (info.value.details() or "")
    assert resolver.asked == []


async def test_a_good_ref_is_resolved(stub: tuple[pb_grpc.ExternalScalerStub, Resolver]) -> None:
    client, resolver = stub
    ref = pb.ScaledObjectRef(
        name="llm.v2", namespace="default", scalerMetadata={"targetValue": "60", "window": "0"}
    )
    value = await client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref))
    assert value.metricValues[0].metricValueFloat == 50 and resolver.asked == [("default", "llm.v2")]


async def test_the_resolved_workload_cache_is_bounded_under_churn() -> None:
    resolver = WorkloadResolver(api=None, maxsize=3)  # type: ignore[arg-type]

    async def resolve(namespace: str, name: str) -> ResolvedWorkload:
        return ResolvedWorkload(namespace, name, None, f"app={name}")  # type: ignore[arg-type]

    resolver._resolve = resolve  # type: ignore[method-assign]
    for i in range(50):
        await resolver.selector("default", f"so-{i}")
    assert len(resolver) == 3
    assert await resolver.selector("default", "so-49") == "app=so-49"
