"""Failure semantics: what KEDA gets when metadata is bad, data is missing or stale, or something breaks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from gpuscale._proto import externalscaler_pb2 as pb
from tests.poll import until

from .conftest import Cluster, KedaClient

BASE = {"podSelector": "app=llm", "targetValue": "60"}
BAD = [
    (
        {"aggregation": "mean"},
        'invalid trigger metadata: parameter "aggregation" value "mean" must be one of '
        "[avg, max, min, p50, p90, p95, p99, sum]",
    ),
    (
        {"targetValue": "-1"},
        'invalid trigger metadata: parameter "targetValue" value "-1" must be greater than 0',
    ),
    (
        {"metric": "fan_speed"},
        'invalid trigger metadata: parameter "metric" value "fan_speed" must be one of [dram_active, '
        "generation_tokens_per_second, gpu_utilization, gr_engine_active, itl_p95, kv_cache_usage, memory_used, "
        "memory_used_percent, memory_utilization, power, power_percent, queue_length, request_rate, requests_in_flight, "
        "sm_active, sm_occupancy, temperature, tensor_active, ttft_p50, ttft_p95]",
    ),
]


async def all_calls(client: KedaClient, md: dict[str, str]) -> list[tuple[grpc.StatusCode, str]]:
    async def first_stream_message() -> None:
        async for _ in client.stub.StreamIsActive(client.ref(md), timeout=5):
            break

    return [
        await client.code_of(client.spec(md)),
        await client.code_of(client.metrics(md)),
        await client.code_of(client.active(md)),
        await client.code_of(first_stream_message()),
    ]


@pytest.mark.parametrize(("change", "message"), BAD, ids=["aggregation", "targetValue", "metric"])
async def test_invalid_metadata_fails_every_call_with_invalid_argument(
    cluster: Cluster, keda: Callable[[int], KedaClient], change: dict[str, str], message: str
) -> None:
    await cluster.node("node-a", "constant:50", gpus=1)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    results = await all_calls(client, {**BASE, **change})
    assert results == [(grpc.StatusCode.INVALID_ARGUMENT, message)] * 4
    # nothing else is affected: valid metadata on the same connection still answers
    assert (await client.spec(BASE)).metricSpecs[0].targetSizeFloat == 60


async def test_every_problem_is_named_at_once(cluster: Cluster, keda: Callable[[int], KedaClient]) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    code, message = await keda(scaler.grpc_port).code_of(
        keda(scaler.grpc_port).spec({"aggregation": "mean", "targetValue": "-1", "bogus": "1"})
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.count("; parameter") == 2 and '"bogus" is not known' in message


async def test_no_data_yet_is_unavailable_but_spec_answers(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    scaler = await cluster.scaler(kube=False, agents=("127.0.0.1:1",))  # nothing listens there
    client = keda(scaler.grpc_port)
    spec = (await client.spec(BASE)).metricSpecs
    assert [(s.metricName, s.targetSize) for s in spec] == [("gpuscale-gpu-utilization-avg", 60)]
    for call in (client.metrics(BASE), client.active(BASE)):
        code, message = await client.code_of(call)
        assert code == grpc.StatusCode.UNAVAILABLE and message == "no agent has sent its state yet"


async def test_agent_killed_goes_unavailable_then_recovers(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await cluster.node("node-a", "constant:40", gpus=1)
    await cluster.node("node-b", "constant:70", gpus=1)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    md = {**BASE, "staleAfter": "1", "window": "0"}

    async def value_is(v: float) -> bool:
        try:
            return await client.value(md) == v
        except grpc.aio.AioRpcError:
            return False

    await until(lambda: value_is(40), what="first value")
    await cluster.kill("node-a")
    await until(lambda: scaler.state.stale_nodes == 1, what="node-a marked stale")
    assert await client.value(md) == 40  # its last samples are still younger than staleAfter
    await asyncio.sleep(1.1)
    for call in (client.metrics(md), client.active(md)):
        code, message = await client.code_of(call)
        assert code == grpc.StatusCode.UNAVAILABLE
        assert message == (
            "ScaledObject default/so: 1 of 1 GPU pod have no fresh sample (none is fresh): node-a (agent gone: "
            "1 pod); KEDA keeps the replicas or applies its fallback"
        )
    assert (await client.spec(md)).metricSpecs[0].targetSizeFloat == 60  # still answers: fallback works
    await cluster.node("node-a", "constant:40", gpus=1)  # restarted on the same port
    await until(lambda: value_is(40), what="recovery after restart")
    assert scaler.state.stale_nodes == 0


async def test_workload_scope_without_api_or_pod_selector(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await cluster.node("node-a", "constant:40", gpus=1)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    md = {"targetValue": "60"}
    assert (await client.spec(md)).metricSpecs[0].metricName == "gpuscale-gpu-utilization-avg"
    code, message = await client.code_of(client.metrics(md))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "needs the Kubernetes API" in message and "podSelector" in message


async def test_node_scope_is_not_answered_by_the_cluster_scaler(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    scaler = await cluster.scaler(kube=False, agents=())
    code, message = await keda(scaler.grpc_port).code_of(
        keda(scaler.grpc_port).spec({"scope": "node", "targetValue": "60"})
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "--serve-external-scaler" in message


async def test_unexpected_exception_is_internal_for_that_call_only(
    cluster: Cluster, keda: Callable[[int], KedaClient], caplog: pytest.LogCaptureFixture
) -> None:
    await cluster.node("node-a", "constant:40", gpus=1)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: scaler.state.problem() is None and scaler.view_problem() is None)
    real = scaler.state.select
    calls = 0

    def broken(query: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ZeroDivisionError("boom")
        return real(query)  # type: ignore[arg-type]

    scaler.state.select = broken  # type: ignore[assignment,method-assign]
    code, message = await client.code_of(client.metrics(BASE))
    assert code == grpc.StatusCode.INTERNAL and "ZeroDivisionError: boom" in message
    assert "GetMetrics failed unexpectedly" in caplog.text

    async def answers() -> bool:
        return (await client.code_of(client.metrics(BASE)))[0] == grpc.StatusCode.OK

    await until(answers, what="the next call answers")


async def test_request_metrics_by_method_and_code(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    import aiohttp

    scaler = await cluster.scaler(kube=False, agents=())
    client = keda(scaler.grpc_port)
    await client.code_of(client.spec(BASE))
    await client.code_of(client.metrics(BASE))
    await client.code_of(client.spec({"aggregation": "mean"}))
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{scaler.metrics_port}/metrics") as r:
            text = await r.text()
        async with http.get(f"http://127.0.0.1:{scaler.metrics_port}/healthz") as r:
            assert r.status == 200
    assert 'gpuscale_scaler_requests_total{code="OK",method="GetMetricSpec"} 1.0' in text
    assert 'gpuscale_scaler_requests_total{code="UNAVAILABLE",method="GetMetrics"} 1.0' in text
    assert 'gpuscale_scaler_requests_total{code="INVALID_ARGUMENT",method="GetMetricSpec"} 1.0' in text
    assert "gpuscale_scaler_request_duration_seconds_bucket" in text
    assert "gpuscale_scaler_agents_connected 0.0" in text


def test_int_fields_are_filled_for_old_keda() -> None:
    from gpuscale.scaler.wire import metric_spec_response, metric_value_response

    assert metric_spec_response("m", 0.4).metricSpecs[0] == pb.MetricSpec(
        metricName="m", targetSize=1, targetSizeFloat=0.4
    )
    assert metric_value_response("m", 119.6).metricValues[0].metricValue == 120
    assert metric_value_response("m", float("nan")).metricValues[0].metricValueFloat == 0


async def test_dns_name_without_agents_yet_is_ready_then_follows_them(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    """Installed before any GPU node is up: the agents' headless Service has no ready pod, and cluster DNS
    answers NXDOMAIN. That is an answer ("no agent"), not a failed lookup: the scaler becomes ready and says
    why it has no data, then follows the first agent as soon as DNS lists it."""
    import socket
    from dataclasses import replace
    from typing import Any

    from aiohttp import ClientSession

    from gpuscale.scaler.discovery import DnsDiscovery
    from gpuscale.scaler.server import Scaler

    listed: list[tuple[Any, ...]] = []

    async def resolver(name: str, port: int, **kw: Any) -> list[tuple[Any, ...]]:
        if not listed:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return listed

    node = await cluster.node("node-a", "constant:40", gpus=1)  # up, but not Ready: DNS does not list it
    port = node.agent.grpc_port
    template = await cluster.scaler(kube=False, agents=())
    settings = replace(template.settings, agents=(), agents_dns=f"agents.svc:{port}", dns_interval_s=0.05)
    scaler = Scaler(settings, discovery=DnsDiscovery("agents.svc", port, resolver=resolver))
    await scaler.start()
    cluster.scalers.append(scaler)
    async with ClientSession() as http:

        async def ready() -> bool:
            async with http.get(f"http://127.0.0.1:{scaler.metrics_port}/readyz") as r:
                return r.status == 200

        await until(ready, what="ready with no agent")
    client = keda(scaler.grpc_port)
    md = {
        "scope": "pool",
        "nodeSelector": "kubernetes.io/hostname=node-a",
        "targetValue": "60",
        "window": "0",
    }
    code, message = await client.code_of(client.metrics(md))
    assert (code, message) == (
        grpc.StatusCode.UNAVAILABLE,
        "no agent has sent its state yet; the agents' DNS name agents.svc has no address: no agent pod is "
        "ready, or the name is wrong",
    )

    listed.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)))

    async def answers() -> bool:
        return (await client.code_of(client.metrics(md)))[0] == grpc.StatusCode.OK

    await until(answers, what="the agent listed by DNS is followed")
    assert await client.value(md) == pytest.approx(40)
