"""Workload scope end to end: real agents (mock GPUs), real scaler, real gRPC; kubelet and API server faked."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from tests.fakes.apiserver import make_pod
from tests.fakes.kubelet import pod_resources
from tests.poll import until

from .conftest import Cluster, KedaClient

LLM = {
    "scope": "workload",
    "podSelector": "app=llm",
    "metric": "gpu_utilization",
    "aggregation": "avg",
    "targetValue": "60",
    "scalerAddress": "gpuscale.gpuscale-system.svc:6001",  # KEDA sends its own keys too
}


async def two_nodes(cluster: Cluster) -> None:
    """node-a GPUs at 40 and 10 %, node-b at 80 and 95 %; default/llm holds GPU 0 of each node, default/other
    GPU 1 of each (beside them), ml/llm-x (same labels, other namespace) a GPU of its own on node-b."""
    await cluster.node("node-a", "constant:40,constant:10", gpus=2)
    await cluster.node("node-b", "constant:80,constant:95,constant:5", gpus=3)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    cluster.add_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    cluster.add_pod("default", "other-0", "node-a", [1], {"app": "other"})
    cluster.add_pod("default", "other-1", "node-b", [1], {"app": "other"})
    cluster.add_pod("ml", "llm-x", "node-b", [2], {"app": "llm"})


async def settled(client: KedaClient, metadata: dict[str, str], expected: float) -> None:
    async def check() -> bool:
        try:
            return await client.value(metadata) == pytest.approx(expected)
        except grpc.aio.AioRpcError:
            return False

    await until(check, what=f"value {expected}")


async def test_two_nodes_only_the_workloads_gpus_count(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await two_nodes(cluster)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, LLM, 2 * 60)  # 2 pods x avg(40, 80)

    spec = (await client.spec(LLM)).metricSpecs
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec] == [
        ("gpuscale-gpu-utilization-avg", 60, 60.0)
    ]
    (value,) = (await client.metrics(LLM, metric="gpuscale-gpu-utilization-avg")).metricValues
    assert (value.metricName, value.metricValue, value.metricValueFloat) == (
        "gpuscale-gpu-utilization-avg",
        120,
        120.0,
    )
    assert await client.active(LLM)
    other = {**LLM, "podSelector": "app=other", "aggregation": "max"}
    assert await client.value(other) == 2 * 95
    assert await client.value({**LLM, "namespace": "ml"}) == 5  # one pod, its own GPU
    # KEDA's requested name is echoed (KEDA strips its own sX- prefix; any name comes back as asked).
    (v,) = (await client.metrics(LLM, metric="some-name")).metricValues
    assert v.metricName == "some-name"


async def test_sm_activity_of_the_workloads_gpus(cluster: Cluster, keda: Callable[[int], KedaClient]) -> None:
    """GPM's SM activity travels the same path as utilization: agent sample → Watch → the scaler's columns."""
    await two_nodes(cluster)  # mock H100s: SM activity is 0.8 x utilization
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    sm = {**LLM, "metric": "sm_active", "aggregation": "max", "window": "0"}
    await settled(client, sm, 2 * 0.8 * 80)
    spec = (await client.spec(sm)).metricSpecs
    assert [s.metricName for s in spec] == ["gpuscale-sm-active-max"]


async def test_scaled_object_target_is_resolved_like_the_hpa(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await two_nodes(cluster)
    cluster.apiserver.put_deployment("default", "llm", {"app": "llm"})
    cluster.apiserver.put_scaled_object("default", "llm-so", {"name": "llm"})
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    md = {k: v for k, v in LLM.items() if k != "podSelector"}
    await until(lambda: scaler.state.problem() is None)

    async def value() -> float:
        return await client.value(md, name="llm-so")

    async def ready() -> bool:
        try:
            return await value() == 120
        except grpc.aio.AioRpcError:
            return False

    await until(ready, what="workload value through the ScaledObject")
    code, message = await client.code_of(client.value(md, name="missing"))
    assert code == grpc.StatusCode.NOT_FOUND and "ScaledObject default/missing" in message


async def test_workload_without_pods_reports_zero_and_inactive(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await two_nodes(cluster)
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, LLM, 120)
    nothing = {**LLM, "podSelector": "app=nothing"}
    assert await client.value(nothing) == 0
    assert not await client.active(nothing)


async def test_pods_on_gpu_nodes_without_an_attributed_gpu_are_unavailable_not_zero(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    """The workload's pods run on GPU nodes, yet the agents can name none of their GPUs (attribution broken:
    no kubelet socket, no ResourceSlice for a claim): 0 would scale it down, so the answer is UNAVAILABLE,
    and KEDA keeps the replicas (or applies its fallback). A pod that has finished counts as no pod."""
    await two_nodes(cluster)
    gpu = {"nvidia.com/gpu": "1"}
    cluster.apiserver.add_pod(
        make_pod("default", "vlm-0", node="node-a", labels={"app": "vlm"}, limits=gpu, ready=True)
    )
    cluster.apiserver.add_pod(
        make_pod("default", "vlm-1", node="node-b", labels={"app": "vlm"}, limits=gpu, ready=True)
    )
    # a pod beside them that asks for no GPU (a router with the workload's labels) is no GPU pod: 0, not an error
    cluster.apiserver.add_pod(make_pod("default", "router-0", node="node-a", labels={"app": "router"}))
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, LLM, 120)  # the agents' state has arrived
    vlm = {**LLM, "podSelector": "app=vlm"}
    code, message = await client.code_of(client.value(vlm))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert message.startswith(
        "ScaledObject default/so: 2 pods asking for a GPU run on GPU nodes, but no GPU is attributed"
    )
    assert (await client.code_of(client.active(vlm)))[0] == grpc.StatusCode.UNAVAILABLE
    assert await client.value({**LLM, "podSelector": "app=router"}) == 0

    # once the kubelet reports the pod's GPU, the value is back
    n = cluster.nodes["node-a"]
    n.kubelet.pods.append(pod_resources("default", "vlm-0", {"main": [("nvidia.com/gpu", [n.uuids[1]])]}))
    # vlm-0 at 10 % (of a target of 60) asks to scale down; vlm-1, whose device the kubelet still does not
    # list, is a missing pod and counts as the target: (10 + 60) = 70, from which the HPA keeps 2 replicas
    await settled(client, vlm, 70)
    # pods that finished (a Job's, say) are no pods: the workload has none and reports 0. A running pod
    # added after it on the same node marks when node-b's agent has seen both.
    cluster.apiserver.add_pod(
        make_pod("default", "job-0", node="node-b", labels={"app": "job"}, phase="Succeeded", limits=gpu)
    )
    cluster.apiserver.add_pod(
        make_pod("default", "mark-0", node="node-b", labels={"app": "mark"}, limits=gpu, ready=True)
    )

    async def marker_seen() -> bool:
        code, _ = await client.code_of(client.value({**LLM, "podSelector": "app=mark"}))
        return code == grpc.StatusCode.UNAVAILABLE  # its pod known, holding no GPU

    await until(marker_seen, what="node-b's agent has seen the pods")
    job = {**LLM, "podSelector": "app=job"}
    assert await client.value(job) == 0
    assert not await client.active(job)


async def test_a_pod_moving_to_another_node(cluster: Cluster, keda: Callable[[int], KedaClient]) -> None:
    await cluster.node("node-a", "constant:30,constant:30", gpus=2)
    await cluster.node("node-b", "constant:90,constant:90", gpus=2)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    cluster.add_pod("default", "llm-1", "node-a", [1], {"app": "llm"})
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, LLM, 2 * 30)
    cluster.remove_pod("default", "llm-1")
    cluster.add_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    await settled(client, LLM, 2 * 60)  # avg(30, 90) x 2
    cluster.remove_pod("default", "llm-0")
    await settled(client, LLM, 90)


async def test_gpu_shared_by_two_pods_counts_once(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    node = await cluster.node("node-a", "constant:50,constant:20", gpus=2)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    cluster.apiserver.add_pod(make_pod("default", "llm-1", node="node-a", labels={"app": "llm"}, ready=True))
    node.kubelet.pods.append(
        pod_resources("default", "llm-1", {"main": [("nvidia.com/gpu", [node.uuids[0]])]})
    )
    scaler = await cluster.scaler()
    await settled(keda(scaler.grpc_port), LLM, 2 * 50)


async def test_gpus_allocated_through_dra_count_for_their_workload(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    """A GPU that a ResourceClaim got from NVIDIA's DRA driver: the kubelet names it gpu.nvidia.com/<pool>/gpu-N,
    the node's ResourceSlice says which UUID that is, and the workload's value counts it."""
    await cluster.node("node-a", "constant:40,constant:10", gpus=2)
    await cluster.node("node-b", "constant:80,constant:95", gpus=2)
    cluster.add_dra_pod("default", "llm-0", "node-a", [1], {"app": "llm"})
    cluster.add_dra_pod("default", "llm-1", "node-b", [0], {"app": "llm"})
    cluster.add_pod("default", "other-0", "node-a", [0], {"app": "other"})  # a device-plugin GPU beside them
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, {**LLM, "podSelector": "app=other"}, 40)

    # No ResourceSlice yet (the driver not started, or no RBAC): nothing says which GPUs the claims hold.
    # The workload's pods are known, so the answer is UNAVAILABLE, not a 0 that would scale it down.
    async def both_pods_known_none_attributed() -> bool:
        code, message = await client.code_of(client.value(LLM))
        assert code == grpc.StatusCode.UNAVAILABLE, (code, message)
        return "2 pods asking for a GPU run on GPU nodes, but no GPU is attributed" in message

    await until(both_pods_known_none_attributed, what="UNAVAILABLE naming both pods")

    cluster.publish_dra_devices("node-a")
    cluster.publish_dra_devices("node-b")
    await settled(client, LLM, 2 * 45)  # 2 pods x avg(10, 80)

    # node-b's slice is gone (its DRA driver uninstalled): nothing says which GPU llm-1 holds any more, so
    # llm-1 is a missing pod. llm-0 (10 of a target of 60) asks to scale down, and llm-1 counts as the
    # target: 10 + 60 = 70, from which the HPA keeps its 2 replicas.
    cluster.apiserver.delete_resource_slice("node-b-gpu.nvidia.com")
    await settled(client, LLM, 70)
