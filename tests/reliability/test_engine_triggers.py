"""Engine signals end to end: stand-in vLLM endpoints on the workload's pods on two nodes, real agents that
discover, scrape and stream them, the real scaler answering a queue_length trigger as KEDA asks."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from aiohttp import web

from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, start_mock_engine
from gpuscale.scaler.source import Query
from gpuscale.scaling.selector import parse_selector
from tests.fakes.apiserver import make_pod
from tests.fakes.kubelet import pod_resources
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

QUEUE = {
    "podSelector": "app=llm",
    "metric": "queue_length",
    "targetValue": "4",
    "window": "0",
    "staleAfter": "2",
}


def exposition(waiting: float, running: float = 3.0) -> str:
    """What a vLLM V1 engine serves for these series (vllm/v1/metrics/loggers.py), one model."""
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    return (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} {waiting}\n"
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {running}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.5\n"
    )


class Endpoint:
    def __init__(self, waiting: float) -> None:
        self.waiting = waiting
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=exposition(self.waiting), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def endpoints() -> AsyncIterator[Callable[[float], Endpoint]]:
    made: list[Endpoint] = []

    def make(waiting: float) -> Endpoint:
        e = Endpoint(waiting)
        made.append(e)
        return e

    yield make
    for e in made:
        await e.stop()


def add_engine_pod(cluster: Cluster, name: str, node: str, port: int) -> None:
    cluster.apiserver.add_pod(
        make_pod(
            "default",
            name,
            node=node,
            labels={"app": "llm"},
            limits={"nvidia.com/gpu": "1"},
            annotations={"gpuscale.io/metrics-port": str(port)},
            ip="127.0.0.1",
            ready=True,
        )
    )
    n = cluster.nodes[node]
    n.kubelet.pods.append(pod_resources("default", name, {"main": [("nvidia.com/gpu", [n.uuids[0]])]}))


async def _value(client: KedaClient, md: dict[str, str]) -> float | grpc.StatusCode:
    try:
        return await client.value(md)
    except grpc.aio.AioRpcError as e:
        return e.code()


async def test_queue_length_is_the_sum_over_the_workloads_pods_and_a_dead_endpoint_is_a_missing_pod(
    cluster: Cluster, keda: Callable[[int], KedaClient], endpoints: Callable[[float], Endpoint]
) -> None:
    a, b = endpoints(12), endpoints(4)
    await a.start()
    await b.start()
    await cluster.node("node-1", "constant:90", gpus=1)
    await cluster.node("node-2", "constant:90", gpus=1)
    add_engine_pod(cluster, "llm-a", "node-1", a.port)
    add_engine_pod(cluster, "llm-b", "node-2", b.port)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)

    async def is_(v: float) -> bool:
        return await _value(client, QUEUE) == v

    # 12 + 4 waiting requests, target 4 per replica: 16, from which KEDA's default AverageValue gives the HPA
    # ceil(16 / 4) = 4 replicas
    await until(lambda: is_(16.0), what="queue_length 16")
    assert await client.active(QUEUE)
    # the KV cache: a percentage, aggregate x pods as GPU metrics are (50 % on both)
    assert await _value(client, {**QUEUE, "metric": "kv_cache_usage", "targetValue": "80"}) == 100.0
    # requests in flight: waiting + running (3 each)
    assert await _value(client, {**QUEUE, "metric": "requests_in_flight", "targetValue": "8"}) == 22.0

    await b.stop()  # llm-b's engine stops answering: its pod is a missing pod, never a 0
    # llm-a alone asks to scale up (12 per pod, target 4); llm-b counts 0: 12, the HPA's ceil(12/4) = 3
    await until(lambda: is_(12.0), timeout=10, what="llm-b missing")
    code, message = await client.code_of(client.metrics({**QUEUE, "maxMissingPercent": "10"}))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert (
        "1 of 2 GPU pods have no fresh sample" in message
        and "node-2 (engine not read: connect_error" in message
    )
    assert scaler.metrics.missing_pods.labels("default", "so")._value.get() == 1


async def _is_value(client: KedaClient, md: dict[str, str]) -> bool:
    return isinstance(await _value(client, md), float)


async def test_a_pod_without_an_engine_endpoint_is_missing_for_engine_metrics(
    cluster: Cluster, keda: Callable[[int], KedaClient], endpoints: Callable[[float], Endpoint]
) -> None:
    a = endpoints(6)
    await a.start()
    await cluster.node("node-1", "constant:90", gpus=2)
    add_engine_pod(cluster, "llm-a", "node-1", a.port)
    cluster.add_pod("default", "llm-plain", "node-1", [1], {"app": "llm"})  # no annotation: no engine read
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: scaler.view_problem() is None, what="the scaler's view complete")
    gpu = {**QUEUE, "metric": "gpu_utilization", "targetValue": "60"}
    await until(lambda: _is_value(client, gpu), what="both pods' GPUs known")
    code, message = await client.code_of(client.metrics({**QUEUE, "maxMissingPercent": "10"}))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "no engine endpoint (annotate the pod gpuscale.io/metrics-port" in message


async def test_the_mock_engines_finished_requests_reach_the_scaler_and_grow(cluster: Cluster) -> None:
    """The mock vLLM engine's fluid model finishes requests; the agent reads vllm:request_success_total
    (summed over finished_reason) and streams it; the scaler's state holds it, growing with the engine's own
    count of finished requests."""
    engine = MockEngine(MockEngineConfig(models=("m",), service_time_s=0.5), demand=lambda t: 40.0)
    served = await start_mock_engine(engine)
    try:
        await cluster.node("node-1", "constant:90", gpus=1)
        add_engine_pod(cluster, "llm-a", "node-1", served.port)
        scaler = await cluster.scaler(kube=False)
        query = Query("workload", "default", parse_selector("app=llm"))

        def finished() -> list[float]:
            seen: list[float] = []
            for series in scaler.state.select(query).engines:
                for sample in series.samples:
                    signals = sample.model("m")
                    if signals is not None and signals.requests_finished is not None:
                        seen.append(signals.requests_finished)
            return seen

        await until(lambda: len(set(finished())) >= 3, what="three different counts of finished requests")
        counts = finished()
        # a counter: it only grows; like vLLM's, the mock's series is there at 0 before any request finishes
        assert counts == sorted(counts) and counts[-1] > counts[0] >= 0
        # what the engine itself has finished by now bounds what the scaler last heard
        assert counts[-1] <= math.floor(engine.models["m"].finished + 1e-9)
    finally:
        await served.close()
