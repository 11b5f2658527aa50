"""The demand-based decisions through the real path (starting pods as coming capacity, scaling ahead by the
learned cold start, the N-1 guard, GPU utilization uncapped by the engines' demand): mock vLLM engines (their
finished counters and queue gauges driven by a known arrival rate), real agents that discover, scrape and
stream them with each pod's readiness and start times, the real scaler answering as KEDA asks."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc
import pytest

from gpuscale.backends.mock_engine import MockEngine, MockEngineConfig, MockEngineServer, start_mock_engine
from gpuscale.demo.apiserver import make_pod
from gpuscale.scaler.wire import ScaledObjectKey
from tests.fakes.kubelet import pod_resources
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

RATE = {
    "podSelector": "app=llm",
    "metric": "request_rate",
    "targetValue": "4",
    "window": "2",
    "staleAfter": "3",
}
Rate = Callable[[float], float]


@pytest.fixture
async def engines() -> AsyncIterator[Callable[[Rate], Awaitable[MockEngineServer]]]:
    """Start mock vLLM engines (``gpuscale.backends.mock_engine``) whose arrivals per second are
    ``rate(t)`` (t: seconds since the engine started), with room for all of them (64 requests/s): nothing
    waits, and the finished counter grows by what arrives less what stays in flight."""
    made: list[MockEngineServer] = []

    async def start(rate: Rate) -> MockEngineServer:
        engine = MockEngine(MockEngineConfig(models=("llama",), service_time_s=0.5), demand=rate)
        made.append(await start_mock_engine(engine))
        return made[-1]

    yield start
    for server in made:
        await server.close()


def add_pod(
    cluster: Cluster, name: str, node: str, gpu: int, port: int, *, ready: bool, started: float | None = None
) -> None:
    """A GPU pod of app=llm on ``node``'s GPU ``gpu``, its engine on ``port`` (0: none), scheduled
    ``started`` and Ready 10 s later (when ``ready``)."""
    at = started if started is not None else time.time() - 600
    cluster.apiserver.add_pod(
        make_pod(
            "default",
            name,
            node=node,
            labels={"app": "llm"},
            limits={"nvidia.com/gpu": "1"},
            annotations={"gpuscale.io/metrics-port": str(port or 1)},
            ip="127.0.0.1",
            ready=ready,
            created_at=at,
            scheduled_at=at,
            ready_at=at + 10 if ready else None,
        )
    )
    n = cluster.nodes[node]
    n.kubelet.pods.append(pod_resources("default", name, {"main": [("nvidia.com/gpu", [n.uuids[gpu]])]}))


async def _value(client: KedaClient, md: dict[str, str]) -> float | grpc.StatusCode:
    try:
        return await client.value(md)
    except grpc.aio.AioRpcError as e:
        return e.code()


async def test_the_demand_with_starting_pods_as_coming_capacity(
    cluster: Cluster,
    keda: Callable[[int], KedaClient],
    engines: Callable[[Rate], Awaitable[MockEngineServer]],
) -> None:
    """One Ready pod taking 6 requests/s and two still loading their model (their engines refuse
    connections): the answer is the demand, 6 (ceil(6 / 4) = 2 replicas, the loading ones counted), where
    before the two loading pods were missing pods, 2 of 3, and the answer UNAVAILABLE."""
    e = await engines(lambda t: 6.0)
    await cluster.node("node-1", "constant:50", gpus=3)
    add_pod(cluster, "llm-0", "node-1", 0, e.port, ready=True)
    add_pod(cluster, "llm-1", "node-1", 1, 0, ready=False)
    add_pod(cluster, "llm-2", "node-1", 2, 0, ready=False)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)

    async def demand() -> bool:
        v = await _value(client, RATE)
        return isinstance(v, float) and abs(v - 6.0) < 0.3

    await until(demand, what="the Ready pod's demand, the loading pods not missing")


async def test_scale_ahead_on_a_known_ramp_through_the_scaler(
    cluster: Cluster,
    keda: Callable[[int], KedaClient],
    engines: Callable[[Rate], Awaitable[MockEngineServer]],
) -> None:
    """Arrivals rising 1 request/s every second; the pods' cold start is 10 s (scheduled to Ready, from the
    API, streamed by the agent). Once the ramp fills the 10 s look-back, `scaleAhead: auto` answers the
    demand 10 s ahead: about 10 above the plain answer (Sen's slope 1/s x 10 s). The plain answer says when
    the look-back is inside the ramp, and it is held to the engine's own demand at the engine's last step:
    no reading of the wall clock decides the outcome."""
    stepped = [0.0]  # the engine's time (seconds since it started) at its last step

    def ramp(t: float) -> float:
        stepped[0] = t
        return 2.0 + t

    e = await engines(ramp)
    await cluster.node("node-1", "constant:50", gpus=1)
    add_pod(cluster, "llm-0", "node-1", 0, e.port, ready=True)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    ahead_md = {**RATE, "scaleAhead": "auto"}

    async def learned() -> bool:
        await _value(client, ahead_md)
        return (
            scaler.metrics.registry.get_sample_value(
                "gpuscale_workload_cold_start_seconds", {"namespace": "default", "scaledobject": "so"}
            )
            == 10.0
        )

    await until(learned, what="the cold start learned from the pod", timeout=10)
    # the look-back (10 s) inside the ramp: the plain answer reads the demand of the ramp's 13th second
    plain = await until(
        lambda: _value(client, RATE),
        30,
        "the plain answer at the ramp's 13th second (14 requests/s)",
        interval=0.2,
        ok=lambda v: isinstance(v, float) and v >= 14.0,
    )
    ahead = await _value(client, ahead_md)
    assert isinstance(plain, float) and isinstance(ahead, float)
    assert abs(plain - (2.0 + stepped[0] - 1.0)) < 1.5  # the 2 s window's mean: the demand a second ago
    assert 7.0 < ahead - plain < 12.0


async def test_the_n_minus_1_guard_through_the_scaler(
    cluster: Cluster,
    keda: Callable[[int], KedaClient],
    engines: Callable[[Rate], Awaitable[MockEngineServer]],
) -> None:
    """5 Ready pods at 24 requests/s each (120: 3 replicas' worth at 40) jump to 38 each (190). For about
    5.7 s the 10 s window's mean reads under 160 (120 + 70 x elapsed / 10), ceil(mean / 40) = 4 or fewer:
    fewer replicas than the 5 there are, though 4 at the target carry 160, not the 190 arriving. The scaler
    answers the present demand (the newest readings, about 190: 5 replicas) and says why.

    The rates are high and the window long so that neither the engines' whole-number counters nor a slow
    machine (a stalled event loop skipping the lag) decide the outcome."""
    md = {**RATE, "targetValue": "40", "window": "10", "staleAfter": "12"}
    made = [await engines(lambda t: 24.0) for _ in range(5)]
    # sampled every 0.25 s (an engine read may take 0.2 s): a loaded machine that stalls an 80 ms read
    # makes the pods missing, which is right, but then there is no answer to look at
    await cluster.node("node-1", "constant:50", gpus=5, interval=0.25)
    for i, e in enumerate(made):
        add_pod(cluster, f"llm-{i}", "node-1", i, e.port, ready=True)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)

    async def steady() -> bool:
        v = await _value(client, md)
        return isinstance(v, float) and abs(v - 120.0) < 5.0

    await until(steady, what="120 requests/s over the 5 pods", timeout=30)
    start = time.time()
    for e in made:
        jump_at = start - e.engine.started
        e.engine.demand = lambda t, j=jump_at: 24.0 if t < j else 38.0
    assert scaler.service is not None
    answers: list[dict[str, Any]] = []
    while time.time() - start < 5.0:  # inside the window's lag (about 5.7 s)
        explained = await scaler.service.explain(ScaledObjectKey("so", "default", md))
        if "answer" in explained:  # else an error KEDA acts on (pods missing): never fewer replicas
            answers.append(cast(dict[str, Any], explained["answer"]))
        else:
            assert cast(dict[str, Any], explained["error"])["code"] == "UNAVAILABLE", explained
        await asyncio.sleep(0.1)
    # whenever the present demand needs 5, never one replica fewer while the window's mean lags the jump;
    # and the guard is why, at least once
    after = [a for a in answers if a["present"] is not None and a["present"] > 160.0]
    assert after and all(math.ceil(a["value"] / 40 - 1e-9) == 5 for a in after), answers
    assert any(a["decided"] == "N-1 guard" for a in after), answers


async def test_gpu_utilization_pinned_at_100_is_uncapped_by_the_engines_through_the_scaler(
    cluster: Cluster,
    keda: Callable[[int], KedaClient],
    engines: Callable[[Rate], Awaitable[MockEngineServer]],
) -> None:
    """Two pods whose GPUs read 100 % (avg x pods: 200, ceil(200 / 70) = 3 replicas) and whose engines serve
    at most 64 requests/s (32 running, 0.5 s each) while 100 arrive at each: the queues grow by 36 a second.
    The scaler answers the utilization that demand would take, 200 x 100 / 64 = 312.5 (5 replicas), and
    says why; without the engines' signals it would answer 200."""
    made = [await engines(lambda t: 100.0) for _ in range(2)]
    await cluster.node("node-1", "constant:100", gpus=2)
    for i, e in enumerate(made):
        add_pod(cluster, f"llm-{i}", "node-1", i, e.port, ready=True)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    md = {
        "podSelector": "app=llm",
        "metric": "gpu_utilization",
        "aggregation": "avg",
        "targetValue": "70",
        "window": "2",
        "staleAfter": "3",
    }

    assert scaler.service is not None
    service = scaler.service
    seen: list[dict[str, Any]] = []

    async def uncapped() -> bool:
        v = await _value(client, md)
        explained = await service.explain(ScaledObjectKey("so", "default", md))
        got = cast(dict[str, Any] | None, explained.get("answer"))  # absent while there is no data yet
        if got is None or not isinstance(v, float) or not 280.0 < v < 345.0:
            return False
        seen.append(got)
        return 280.0 < got["value"] < 345.0

    await until(uncapped, what="the utilization uncapped to about 312", timeout=15)
    answer = seen[-1]  # the answer that read uncapped, as explain gave it
    assert answer["aggregate"] == pytest.approx(100.0)
    assert str(answer["decided"]).startswith("uncapped by the engines' demand (x1.")
