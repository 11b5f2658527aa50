"""Bad input through the real gRPC service: fuzzed metadata, huge and malformed requests, a flood of new
ScaledObjects. Nothing answers ``INTERNAL``, nothing crashes, and a healthy workload keeps its value."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale._proto import externalscaler_pb2 as pb
from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
from gpuscale.scaler.server import Scaler
from gpuscale.scaling.metadata import KEYS
from tests.poll import until

from .conftest import Cluster, KedaClient

HEALTHY = {"podSelector": "app=llm", "targetValue": "60", "window": "0"}
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.FAILED_PRECONDITION,
}
GET_METRICS = "/externalscaler.ExternalScaler/GetMetrics"


async def _healthy(cluster: Cluster, keda: Callable[[int], KedaClient]) -> tuple[Scaler, KedaClient]:
    await cluster.node("node-a", "constant:40", gpus=2)
    cluster.add_pod("default", "llm-0", "node-a", [0, 1], {"app": "llm"})
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)

    async def answers() -> bool:
        try:
            return await client.value(HEALTHY) == 40.0  # 0 until the pod's labels arrive
        except grpc.aio.AioRpcError:
            return False

    await until(answers, what="the healthy workload answers")
    return scaler, client


VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "70",
            "0",
            "-1",
            "1e999",
            "nan",
            "40Gi",
            "p95",
            "pool",
            "node",
            "container",
            "app=llm",
            "a in ()",
            "!x",
            "kubernetes.io/hostname",
            "llm-serving",
            "memory_used",
            "1",
            "120",
        ]
    ),
)
KEY = st.one_of(st.sampled_from([*KEYS, "scalerAddress", "targetValueFromEnv"]), st.text(max_size=12))
REFS = st.fixed_dictionaries(
    {
        "name": st.text(max_size=20),
        "namespace": st.one_of(st.just("default"), st.text(max_size=20)),
        "metadata": st.dictionaries(KEY, VALUES, max_size=8),
        "metric": st.text(max_size=20),
    }
)


async def test_fuzzed_metadata_through_grpc(
    cluster: Cluster, keda: Callable[[int], KedaClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, client = await _healthy(cluster, keda)
    loop = asyncio.get_running_loop()
    seen: dict[grpc.StatusCode, int] = {}
    healthy_values: set[float] = set()

    async def one(ref: dict[str, object]) -> list[tuple[grpc.StatusCode, str]]:
        md = ref["metadata"]
        assert isinstance(md, dict)
        so = pb.ScaledObjectRef(name=str(ref["name"]), namespace=str(ref["namespace"]), scalerMetadata=md)
        request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=str(ref["metric"]))
        results = [
            await client.code_of(client.stub.GetMetricSpec(so, timeout=5)),
            await client.code_of(client.stub.GetMetrics(request, timeout=5)),
            await client.code_of(client.stub.IsActive(so, timeout=5)),
        ]
        healthy_values.add(await client.value(HEALTHY))
        return results

    @settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(REFS)
    def fuzz(ref: dict[str, object]) -> None:
        for code, message in asyncio.run_coroutine_threadsafe(one(ref), loop).result(10):
            seen[code] = seen.get(code, 0) + 1
            assert code in ALLOWED, (code, message, ref)

    await asyncio.to_thread(fuzz)  # hypothesis drives the client from a thread; the loop keeps serving
    assert healthy_values == {40.0}  # never disturbed: one value between every fuzz call
    assert seen.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > 0
    assert "failed unexpectedly" not in caplog.text


async def test_huge_metadata_map_is_refused_with_a_bounded_message(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    _, client = await _healthy(cluster, keda)
    huge = {**HEALTHY, **{f"junk{i}": "x" * 100 for i in range(20_000)}}  # ~2.5 MB, under gRPC's 4 MiB
    for call in (client.spec(huge), client.metrics(huge), client.active(huge)):
        code, message = await client.code_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert message.startswith('invalid trigger metadata: parameter "junk0" is not known')
        assert message.endswith("more characters)") and len(message.encode()) <= 2000  # fits a trailer
    assert await client.value(HEALTHY) == 40.0


async def test_oversized_message_is_refused_by_grpc_itself(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    _, client = await _healthy(cluster, keda)
    big = {**HEALTHY, "junk": "x" * (5 * 1024 * 1024)}
    for call in (client.spec(big), client.metrics(big)):
        code, message = await client.code_of(call)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, message
    assert await client.value(HEALTHY) == 40.0


async def test_garbage_bytes_on_the_method_path(
    cluster: Cluster, keda: Callable[[int], KedaClient], caplog: pytest.LogCaptureFixture
) -> None:
    scaler, client = await _healthy(cluster, keda)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.grpc_port}") as ch:
        raw = ch.unary_unary(GET_METRICS, request_serializer=None, response_deserializer=None)  # type: ignore[var-annotated]
        codes: set[grpc.StatusCode] = set()
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256)) * 40, b"\x12"):
            try:
                await raw(garbage, timeout=5)
                codes.add(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as e:
                codes.add(e.code())
        # gRPC's own deserializer refuses them (UNKNOWN: "Unexpected DecodeError"); the service never sees them
        assert codes == {grpc.StatusCode.UNKNOWN}
        unknown = ch.unary_unary("/externalscaler.ExternalScaler/Nope")  # type: ignore[var-annotated]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await unknown(b"", timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "failed unexpectedly" not in caplog.text
    assert await client.value(HEALTHY) == 40.0


async def test_flood_of_new_scaled_objects_keeps_caches_bounded(
    cluster: Cluster, keda: Callable[[int], KedaClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscale.scaler.state as state_module

    monkeypatch.setattr(state_module, "_MAX_CACHED", 1000)  # the selection cache's bound, lowered to reach it
    scaler, client = await _healthy(cluster, keda)
    maxsize = scaler.metadata.maxsize
    n = maxsize + 300
    stub = pb_grpc.ExternalScalerStub(grpc.aio.insecure_channel(f"127.0.0.1:{scaler.grpc_port}"))

    async def one(i: int) -> None:
        md = {"podSelector": f"app=flood-{i}", "targetValue": str(1 + i % 90), "window": "0"}
        ref = pb.ScaledObjectRef(name=f"so-{i}", namespace="default", scalerMetadata=md)
        await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10)

    for start in range(0, n, 200):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 200))))
    assert len(scaler.metadata) <= maxsize
    assert scaler.state.cached_selections <= 1000
    assert await client.value(HEALTHY) == 40.0
