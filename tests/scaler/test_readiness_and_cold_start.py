"""Pod readiness and the learned cold start, end to end: real agents whose pod watches read each pod's Ready
and PodScheduled conditions from the stand-in API server and stream them, the real scaler taking readiness
from the agents (or the API's list where an agent cannot say), learning each ScaledObject's cold start from
its pods, exporting it and showing it in ``query --explain``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpuscale.cli.query import _print_explain
from gpuscale.kube.workload_pods import WorkloadPodLister
from gpuscale.scaler.server import Scaler
from gpuscale.scaler.source import PodStart, Query
from gpuscale.scaler.wire import ScaledObjectKey
from gpuscale.scaling.selector import parse_selector
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

LLM = {"podSelector": "app=llm", "targetValue": "60", "window": "0", "staleAfter": "2"}
QUERY = Query("workload", "default", parse_selector("app=llm"))
T0 = float(int(time.time()) - 3600)  # an hour ago, whole seconds (the API writes times to the second)


def gpu_pods(scaler: Scaler) -> dict[str, bool | None]:
    """The scaler's state: each GPU pod of app=llm and its readiness as the agents report it."""
    return {p.name: p.ready for p in scaler.state.select(QUERY).gpu_pods}


def cold_start_gauge(scaler: Scaler) -> float | None:
    value = scaler.metrics.registry.get_sample_value(
        "gpuscale_workload_cold_start_seconds", {"namespace": "default", "scaledobject": "so"}
    )
    return value


async def explained(scaler: Scaler) -> dict[str, Any]:
    assert scaler.service is not None
    return await scaler.service.explain(ScaledObjectKey("so", "default", LLM))


async def test_agents_report_each_pods_readiness_and_the_scaler_learns_the_cold_start(
    cluster: Cluster, keda: Callable[[int], KedaClient], capsys: pytest.CaptureFixture[str]
) -> None:
    await cluster.node("node-1", "constant:70", gpus=3)
    # two replicas that took 100 s and 120 s from scheduled to Ready, one still loading its model
    cluster.add_pod("default", "llm-0", "node-1", [0], {"app": "llm"}, created_at=T0, ready_at=T0 + 100)
    cluster.add_pod(
        "default", "llm-1", "node-1", [1], {"app": "llm"},
        created_at=T0 + 50, scheduled_at=T0 + 60, ready_at=T0 + 180,
    )  # fmt: skip
    cluster.add_pod("default", "llm-2", "node-1", [2], {"app": "llm"}, ready=False, created_at=T0 + 900)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await until(
        lambda: gpu_pods(scaler) == {"default/llm-0": True, "default/llm-1": True, "default/llm-2": False},
        what="the agent's readiness of each pod",
    )
    assert sorted(scaler.state.select(QUERY).started, key=lambda s: s.pod) == [
        PodStart("default/llm-0", T0, T0 + 100),
        PodStart("default/llm-1", T0 + 60, T0 + 180),  # from its PodScheduled condition, not its creation
    ]
    assert cold_start_gauge(scaler) is None  # learned when the ScaledObject is asked about
    await until(lambda: _answers(client), what="an answer")
    assert cold_start_gauge(scaler) == 110.0  # the median of 100 and 120
    e = await explained(scaler)
    assert e["coldStartSeconds"] == 110.0
    assert {p["pod"]: (p["ready"], p["scheduledToReadySeconds"]) for p in e["gpuPods"]} == {
        "default/llm-0": (True, 100.0),
        "default/llm-1": (True, 120.0),
        "default/llm-2": (False, None),
    }

    # llm-2 finishes loading 90 s after it was scheduled: the agent says so, the cold start follows
    def ready(pod: dict[str, Any]) -> None:
        pod["status"]["conditions"][1].update(status="True", lastTransitionTime=_rfc3339(T0 + 990))
        pod["status"]["containerStatuses"][0]["ready"] = True

    cluster.apiserver.modify_pod("default", "llm-2", ready)
    await until(lambda: gpu_pods(scaler)["default/llm-2"] is True, what="llm-2 Ready")
    await client.value(LLM)
    assert cold_start_gauge(scaler) == 100.0  # the median of 90, 100 and 120
    # asked again and again, a pod's one Ready transition counts once
    for _ in range(5):
        await client.value(LLM)
    assert cold_start_gauge(scaler) == 100.0
    _print_explain(await explained(scaler))
    text = capsys.readouterr().out
    assert "pod default/llm-2 on node-1: Ready, 90 s after it was scheduled" in text
    assert "cold start: 100 s (scheduled to Ready, the median of its last pods)" in text


async def test_where_the_agent_is_gone_the_api_says_whether_its_pod_is_ready(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await cluster.node("node-1", "constant:70", gpus=1)
    await cluster.node("node-2", "constant:70", gpus=1)
    cluster.add_pod("default", "llm-0", "node-1", [0], {"app": "llm"}, created_at=T0, ready_at=T0 + 100)
    cluster.add_pod("default", "llm-1", "node-2", [0], {"app": "llm"}, ready=False, created_at=T0)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await until(lambda: gpu_pods(scaler).get("default/llm-1") is False, what="llm-1 loading")
    await until(lambda: _answers(client), what="an answer")
    await cluster.kill("node-2")
    await until(lambda: not scaler.state.follows("node-2"), what="node-2's agent gone")

    # llm-1 becomes Ready while its agent is gone: the state keeps the agent's last word, the API's list
    # (every 15 s: here every 0.1 s) says Ready, and the scaler takes the list's word
    def ready(pod: dict[str, Any]) -> None:
        pod["status"]["conditions"][1].update(status="True", lastTransitionTime=_rfc3339(T0 + 140))

    cluster.apiserver.modify_pod("default", "llm-1", ready)
    assert gpu_pods(scaler)["default/llm-1"] is False
    assert scaler.service is not None and isinstance(scaler.service.pods, WorkloadPodLister)
    scaler.service.pods.ttl_s = 0.1

    async def readiness() -> dict[str, tuple[bool | None, bool]]:
        return {p["pod"]: (p["ready"], p["agentConnected"]) for p in (await explained(scaler))["gpuPods"]}

    await until(
        lambda: _equal(readiness(), {"default/llm-0": (True, True), "default/llm-1": (True, False)}),
        what="llm-1 Ready as the API lists it",
    )
    # the API's list is a source of cold starts too: 100 s (llm-0) and 140 s (llm-1)
    await _answers(client)
    assert cold_start_gauge(scaler) == 120.0


async def _equal(got: Awaitable[object], expected: object) -> bool:
    return await got == expected


async def _answers(client: KedaClient) -> bool:
    try:
        await client.value(LLM)
    except Exception:
        return False
    return True


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
