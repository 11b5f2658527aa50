"""Broken monitoring never scales a workload down: part of a workload going dark, as a platform team would
break it. Real agents (mock GPUs) with their kubelets and pod watches, the real scaler over gRPC, the stand-in
API server with injected failures; each answer checked as KEDA gets it and as the HPA would use it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import grpc
import pytest

from tests.poll import until
from tests.reliability.proxy import PausableProxy
from tests.scaler.conftest import Cluster, KedaClient

TARGET = 60.0
LLM = {"podSelector": "app=llm", "targetValue": "60", "window": "0", "staleAfter": "1"}
SOLO = {**LLM, "podSelector": "app=solo"}  # a workload living on node-0 alone


def hpa_replicas(value: float, current: int) -> int:
    """What the HPA makes of an External AverageValue answer: within the tolerance (0.1) the current count,
    else ceil(value / target)."""
    if abs(value / (TARGET * current) - 1.0) <= 0.1:
        return current
    return math.ceil(value / TARGET)


async def answer(client: KedaClient, md: dict[str, str]) -> float | grpc.StatusCode:
    try:
        return await client.value(md)
    except grpc.aio.AioRpcError as e:
        return e.code()


async def five_nodes(cluster: Cluster, *, solo: bool = False) -> None:
    """10 GPU pods of app=llm on 5 nodes, two per node, each at 70 % (target 60: 700, the HPA asks 12)."""
    for n in range(5):
        await cluster.node(f"node-{n}", "constant:70", gpus=3 if solo and n == 0 else 2)
        for g in range(2):
            cluster.add_pod("default", f"llm-{n}-{g}", f"node-{n}", [g], {"app": "llm"})
    if solo:
        cluster.add_pod("default", "solo-0", "node-0", [2], {"app": "solo"})


async def test_two_agents_dying_never_lets_the_hpa_scale_below_ten(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await five_nodes(cluster)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, LLM, 700.0), what="10 pods at 70")
    await cluster.kill("node-3")
    await cluster.kill("node-4")
    answers: list[float | grpc.StatusCode] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + 4.0  # past staleAfter (1 s) several times over
    while loop.time() < end:
        answers.append(await answer(client, LLM))
        await asyncio.sleep(0.1)
    values = [a for a in answers if isinstance(a, float)]
    assert all(a == grpc.StatusCode.UNAVAILABLE for a in answers if not isinstance(a, float))
    assert values and all(hpa_replicas(v, 10) >= 10 for v in values), values
    # once their samples are stale, 4 of 10 pods are missing: the 6 fresh at 70 ask to scale up, with the 4
    # at 0 the ratio flips (420 / 600), so the answer holds the current count: 60 x 10
    assert values[-1] == pytest.approx(600.0)
    assert scaler.metrics.missing_pods.labels("default", "so")._value.get() == 4
    code, message = await client.code_of(client.metrics({**LLM, "maxMissingPercent": "30"}))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert message == (
        "ScaledObject default/so: 4 of 10 GPU pods have no fresh sample (more than maxMissingPercent (30 %)): "
        "node-3 (agent gone: 2 pods), node-4 (agent gone: 2 pods); KEDA keeps the replicas or applies its "
        "fallback"
    )
    assert await client.active(LLM)  # missing pods never make a workload look idle


async def _is(client: KedaClient, md: dict[str, str], value: float) -> bool:
    got = await answer(client, md)
    return isinstance(got, float) and got == pytest.approx(value)


@pytest.mark.parametrize("pod_lists_fail", [False, True], ids=["api-fine", "pod-lists-500"])
async def test_an_agent_restart_changes_no_answer(
    cluster: Cluster, keda: Callable[[int], KedaClient], pod_lists_fail: bool
) -> None:
    """node-0's agent restarted twice while KEDA polls every 200 ms: a graceful stop, then one that drops
    its server without grace. With pod lists failing (500) across the restarts the new agent cannot read its
    pods for seconds: it says so, and the scaler keeps what the old agent said."""
    await five_nodes(cluster, solo=True)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, LLM, 700.0), what="10 pods at 70")
    await until(lambda: _is(client, SOLO, 70.0), what="the solo workload at 70")
    seen: dict[str, list[float | grpc.StatusCode]] = {"llm": [], "solo": []}
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            seen["llm"].append(await answer(client, LLM))
            seen["solo"].append(await answer(client, SOLO))
            await asyncio.sleep(0.2)

    poller = asyncio.create_task(poll())
    loop = asyncio.get_running_loop()
    for graceful in (True, False):
        if pod_lists_fail:
            cluster.apiserver.fail_pod_lists_until = loop.time() + 3.0
        node = cluster.nodes["node-0"]
        if graceful:
            await cluster.kill("node-0")
        else:
            assert node.agent._grpc is not None
            await node.agent._grpc.stop(grace=None)  # the stream breaks at once, as at a SIGKILL
            await cluster.kill("node-0")
        await cluster.node("node-0", "constant:70", gpus=3)  # the new agent, on the same port
        await asyncio.sleep(1.5 if not pod_lists_fail else 3.5)
    stop.set()
    await poller
    for name, expected in (("llm", 700.0), ("solo", 70.0)):
        answers = seen[name]
        assert answers, name
        changed = [a for a in answers if a != grpc.StatusCode.UNAVAILABLE and a != pytest.approx(expected)]
        assert not changed, (name, changed)
        assert answers[-1] == pytest.approx(expected), name


async def test_a_forgotten_node_leaves_its_pods_workload_unavailable_not_zero(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await five_nodes(cluster, solo=True)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, SOLO, 70.0), what="the solo workload at 70")
    await cluster.kill("node-0")
    await until(lambda: "node-0" in {n.name for n in scaler.state.nodes() if not n.connected}, what="stale")
    await asyncio.sleep(0.2)
    assert scaler.state.sweep(0.1) == ["node-0"]  # what --forget-after does, past it
    for call in (client.metrics(SOLO), client.active(SOLO)):
        code, message = await client.code_of(call)
        assert code == grpc.StatusCode.UNAVAILABLE, message
        assert "node-0 (node forgotten: 1 pod)" in message
    # the workload across nodes: node-0's two pods are missing, 8 fresh at 70 hold it (the HPA keeps 10)
    value = await client.value(LLM)
    assert hpa_replicas(value, 10) >= 10
    # the node's agent comes back: its pods are its own again
    await cluster.node("node-0", "constant:70", gpus=3)
    await until(lambda: _is(client, SOLO, 70.0), what="back")
    assert scaler.state.forgotten_pods == 0


async def test_pods_the_kubelet_lists_no_device_for_are_missing_not_dropped(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    """Before, a pod whose device the kubelet did not list dropped out of the count, and the value fell."""
    await five_nodes(cluster)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, LLM, 700.0), what="10 pods at 70")
    kubelet = cluster.nodes["node-2"].kubelet
    kubelet.pods = []  # the kubelet lists no device for node-2's pods (their pods still run)
    await until(lambda: _is(client, LLM, 600.0), what="held: 2 pods missing")
    code, message = await client.code_of(client.metrics({**LLM, "maxMissingPercent": "10"}))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "node-2 (no device listed: 2 pods)" in message


async def test_a_scaler_restarted_while_an_agent_hangs_counts_that_nodes_pods_from_the_api(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    """The scaler (re)starts while node-4's agent hangs (its connection accepted, nothing sent). Until its
    view is complete (ready grace, 2 s here) it answers UNAVAILABLE, never a partial value; then it gives the
    hung agent up, and the Kubernetes API's list of the workload's Running GPU pods makes node-4's two pods
    missing pods: at 30 % of a target of 60 the 8 others ask to scale down, and the two count as the target.
    Without the API, they would be unknown and the answer lower."""
    for n in range(5):
        await cluster.node(f"node-{n}", "constant:30", gpus=2)
        for g in range(2):
            cluster.add_pod("default", f"llm-{n}-{g}", f"node-{n}", [g], {"app": "llm"})
    hung = PausableProxy(cluster.nodes["node-4"].agent.grpc_port)
    await hung.start()
    hung.pause()
    try:
        agents = (*(cluster.nodes[f"node-{n}"].address for n in range(4)), hung.address)
        answers: dict[bool, float | grpc.StatusCode] = {}
        for kube in (False, True):
            scaler = await cluster.scaler(kube=kube, agents=agents)
            client = keda(scaler.grpc_port)
            first = await answer(client, LLM)
            assert first == grpc.StatusCode.UNAVAILABLE  # not complete: never from part of the cluster
            await until(scaler.view_problem, what="ready grace over", ok=lambda problem: problem is None)
            await asyncio.sleep(0.3)
            answers[kube] = await answer(client, LLM)
        assert answers[False] == pytest.approx(240.0)  # 8 pods known, x 30: the HPA would ask 4
        assert answers[True] == pytest.approx(
            240.0 + 2 * 60.0
        )  # node-4's 2 pods at the target: the HPA asks 6
    finally:
        await hung.stop()


async def test_per_scaledobject_series_say_the_last_value_target_and_code(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await five_nodes(cluster)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, LLM, 700.0), what="10 pods at 70")
    m = scaler.metrics
    assert (
        m.trigger_value.labels("default", "so")._value.get(),
        m.trigger_target.labels("default", "so")._value.get(),
        m.trigger_code.labels("default", "so")._value.get(),
    ) == (700.0, 60.0, 0)
    for n in range(5):
        await cluster.kill(f"node-{n}")
    await until(lambda: _code(client), what="UNAVAILABLE")
    assert m.trigger_code.labels("default", "so")._value.get() == grpc.StatusCode.UNAVAILABLE.value[0]
    assert m.trigger_value.labels("default", "so")._value.get() == 700.0  # the last value answered, kept


async def _code(client: KedaClient) -> bool:
    return await answer(client, LLM) == grpc.StatusCode.UNAVAILABLE


async def test_query_explain_says_what_the_scaledobject_resolved_to_and_why(
    cluster: Cluster, keda: Callable[[int], KedaClient], capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse
    import json

    from gpuscale.cli import query as query_cli

    await five_nodes(cluster)
    scaler = await cluster.scaler(kube=False)
    client = keda(scaler.grpc_port)
    await until(lambda: _is(client, LLM, 700.0), what="10 pods at 70")
    await cluster.kill("node-4")
    await until(lambda: _is(client, LLM, 600.0), timeout=10, what="node-4's pods missing")
    parser = argparse.ArgumentParser()
    query_cli.register(parser.add_subparsers())
    argv = [
        "query",
        "--address",
        "127.0.0.1:1",
        "--name",
        "so",
        "--explain",
        f"127.0.0.1:{scaler.metrics_port}",
        "--json",
        *(x for k, v in LLM.items() for x in ("-m", f"{k}={v}")),
    ]
    args = parser.parse_args(argv)
    assert await asyncio.to_thread(args.func, args) == 0
    e = json.loads(capsys.readouterr().out)
    assert e["query"]["podSelector"] == "app=llm" and len(e["gpuPods"]) == 10
    assert sorted(p["pod"] for p in e["gpuPods"] if not p["agentConnected"]) == [
        "default/llm-4-0",
        "default/llm-4-1",
    ]
    fresh = [g for g in e["gpus"] if "value" in g]
    assert len(fresh) == 8 and all(g["value"] == 70 and g["newestSampleAge"] < 1 for g in fresh)
    assert [g["leftOut"] for g in e["gpus"] if "leftOut" in g] == [
        "no sample of the metric newer than staleAfter"
    ] * 2
    assert e["answer"]["value"] == 600 and e["answer"]["missingWhere"] == ["node-4 (agent gone: 2 pods)"]
    args = parser.parse_args([a for a in argv if a != "--json"])
    assert await asyncio.to_thread(args.func, args) == 0
    text = capsys.readouterr().out
    assert "GPU " in text and "left out: no sample of the metric newer than staleAfter" in text
    assert "answer: value 600 (aggregate 70 x 8 pods, 2 missing: node-4 (agent gone: 2 pods)), active" in text
