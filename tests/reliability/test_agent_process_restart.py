"""An agent restarted as Kubernetes restarts it: a real `gpuscale agent` process on the mock backend, with its
kubelet (stand-in) and the stand-in API server, stopped with SIGTERM, then killed with SIGKILL, each time
started again on the same port, while KEDA's calls come every 200 ms. Every answer is unchanged or
UNAVAILABLE: a routine restart never moves a workload's value (the fail-safe rule for part of a workload gone
dark)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from gpuscale.backends.mock import _mock_uuid
from gpuscale.demo.processes import Child, free_ports, start_child
from tests.fakes.apiserver import make_pod
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

SOLO = {"podSelector": "app=solo", "targetValue": "60", "window": "0", "staleAfter": "5"}
LLM = {**SOLO, "podSelector": "app=llm"}


@pytest.mark.slow
@pytest.mark.parametrize("pod_lists_fail", [False, True], ids=["api-fine", "pod-lists-500"])
async def test_sigterm_then_sigkill_of_an_agent_process_changes_no_answer(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path, pod_lists_fail: bool
) -> None:
    # node-a: a real agent process with 2 mock GPUs at 70 %; node-b: an in-process agent, 1 GPU at 70 %
    kubelet = FakeKubelet(tmp_path / "node-a.sock")
    await kubelet.start()
    uuids = [_mock_uuid("GPU", "node-a", 0, i) for i in range(2)]
    for i, (name, app) in enumerate((("solo-0", "solo"), ("llm-0", "llm"))):
        cluster.apiserver.add_pod(
            make_pod(
                "default",
                name,
                node="node-a",
                labels={"app": app},
                limits={"nvidia.com/gpu": "1"},
                ready=True,
            )
        )
        kubelet.pods.append(pod_resources("default", name, {"main": [("nvidia.com/gpu", [uuids[i]])]}))
    await cluster.node("node-b", "constant:70", gpus=1)
    cluster.add_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    grpc_port, metrics_port = free_ports(2)
    args = [
        "agent",
        "--backend",
        "mock",
        "--mock-gpus",
        "2",
        "--mock-pattern",
        "constant:70",
        "--node-name",
        "node-a",
        "--interval",
        "0.2",
        "--attribution-interval",
        "0.2",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        "--kubelet-socket",
        str(kubelet.socket_path),
        "--kubeconfig",
        str(cluster.kubeconfig),
    ]

    async def start(n: int) -> Child:
        child = await start_child("agent", args, tmp_path / f"agent-{n}.log")
        await child.grpc_port(20.0)
        return child

    agent = await start(0)
    scaler = await cluster.scaler(
        kube=False, agents=(f"127.0.0.1:{grpc_port}", cluster.nodes["node-b"].address)
    )
    client = keda(scaler.grpc_port)

    async def answer(md: dict[str, str]) -> float | grpc.StatusCode:
        try:
            return await client.value(md)
        except grpc.aio.AioRpcError as e:
            return e.code()

    async def steady() -> bool:
        return await answer(SOLO) == 70.0 and await answer(LLM) == 140.0

    await until(steady, timeout=20, what="both workloads answered")
    seen: list[tuple[float | grpc.StatusCode, float | grpc.StatusCode]] = []
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            seen.append((await answer(SOLO), await answer(LLM)))
            await asyncio.sleep(0.2)

    poller = asyncio.create_task(poll())
    loop = asyncio.get_running_loop()
    try:
        for n, how in enumerate((signal.SIGTERM, signal.SIGKILL), start=1):
            if pod_lists_fail:
                cluster.apiserver.fail_pod_lists_until = loop.time() + 3.0
            agent.process.send_signal(how)
            await agent.process.wait()
            agent = await start(n)
            await asyncio.sleep(4.0)
    finally:
        done.set()
        await poller
        await agent.stop()
        await kubelet.stop()
    unchanged = [s for s in seen if s not in ((70.0, 140.0),)]
    moved = [s for s in unchanged if any(v not in (70.0, 140.0, grpc.StatusCode.UNAVAILABLE) for v in s)]
    assert not moved, moved
    assert seen[-1] == (70.0, 140.0)
