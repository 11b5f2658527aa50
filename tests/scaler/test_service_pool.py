"""Pool scope end to end: each agent reads its own Node's labels from the API server and streams them; the
scaler selects nodes by them (and follows relabelling), over both ways of reading the streams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from gpuscale.scaler.source import Query
from gpuscale.scaling.selector import parse_selector
from tests.poll import until

from .conftest import Cluster, KedaClient

POOL = {"scope": "pool", "aggregation": "avg", "targetValue": "50", "window": "0"}


def pool(selector: str, **extra: str) -> dict[str, str]:
    return {**POOL, "nodeSelector": selector, **extra}


@pytest.mark.parametrize("ingest_workers", [0, 1], ids=["in-process", "ingest-worker"])
async def test_pool_follows_node_labels(
    cluster: Cluster, keda: Callable[[int], KedaClient], ingest_workers: int
) -> None:
    api = cluster.apiserver
    api.put_node("h200-a", {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "serve"})
    api.put_node("h200-b", {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "serve", "spot": "true"})
    # "lonely" has no Node object: only its hostname label is known
    await cluster.node("h200-a", "constant:80", gpus=2)
    await cluster.node("h200-b", "constant:20", gpus=2)
    await cluster.node("lonely", "constant:50", gpus=1)
    scaler = await cluster.scaler(kube=False, ingest_workers=ingest_workers)
    client = keda(scaler.grpc_port)

    def labelled() -> bool:
        unlabelled = scaler.state.select(Query("pool", node_selector=parse_selector("!pool")))
        return all("pool" in scaler.state.node_labels(n) for n in ("h200-a", "h200-b")) and (
            len(unlabelled.series) == 1
        )

    await until(labelled, what="both labelled nodes' labels reached the scaler")
    await until(lambda: scaler.view_problem() is None, what="every agent's view complete")
    assert await client.value(pool("nvidia.com/gpu.product=NVIDIA-H200")) == pytest.approx(50)
    assert await client.value(pool("nvidia.com/gpu.product=NVIDIA-H200,!spot")) == pytest.approx(80)
    assert await client.value(pool("pool in (serve)", aggregation="min")) == pytest.approx(20)
    assert await client.value(pool("!pool")) == pytest.approx(50)
    assert await client.value(pool("kubernetes.io/hostname=h200-b")) == pytest.approx(20)

    # A push stream on the on-demand H200s: active at 80 % against an activation of 60.
    stream = client.stub.StreamIsActive(
        client.ref(pool("nvidia.com/gpu.product=NVIDIA-H200,!spot", activationValue="60")), timeout=10
    )
    assert (await asyncio.wait_for(stream.read(), 5)).result is True  # type: ignore[attr-defined]

    # h200-b leaves the spot market: it joins the pool, whose average falls to 50, below the activation.
    api.put_node("h200-b", {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "serve"})
    assert (await asyncio.wait_for(stream.read(), 5)).result is False  # type: ignore[attr-defined]
    assert await client.value(pool("nvidia.com/gpu.product=NVIDIA-H200,!spot")) == pytest.approx(50)
    stream.cancel()

    # No node matches: UNAVAILABLE (KEDA keeps the replicas, or applies its fallback), naming the selector.
    code, details = await client.code_of(client.metrics(pool("nvidia.com/gpu.product=NVIDIA-B200")))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert 'nodeSelector "nvidia.com/gpu.product=NVIDIA-B200"' in details
    assert "of 3 nodes followed" in details
    assert "get, list and watch on nodes" in details


async def test_explain_in_pool_scope_names_the_nodes_and_the_gpus(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``query --explain`` of a pool trigger: the node selector, each GPU without a pod, and the answer as the
    aggregate over the GPUs (no pods to multiply by)."""
    from gpuscale.cli.query import _print_explain
    from gpuscale.scaler.wire import ScaledObjectKey

    node = await cluster.node("node-a", "constant:40,constant:60", gpus=2)
    scaler = await cluster.scaler(kube=False)
    await until(lambda: scaler.view_problem() is None, what="the agent's view complete")
    assert scaler.service is not None
    key = ScaledObjectKey("gpu-pool", "default", pool("kubernetes.io/hostname=node-a"))
    await until(lambda: _answered(scaler, key), what="an answer")
    _print_explain(await scaler.service.explain(key))
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "ScaledObject default/gpu-pool",
        "  nodes: kubernetes.io/hostname=node-a (scope pool)",
    ]
    gpus = sorted(line.split(":")[0] for line in lines if line.startswith("  GPU "))
    assert gpus == sorted(f"  GPU {u}" for u in node.uuids)
    assert lines[-1] == "  answer: value 50 (avg over 2 GPUs), active"
    assert not [line for line in lines if "None" in line or " - " in line or "0 pods" in line]


async def _answered(scaler: Any, key: Any) -> bool:
    return "answer" in await scaler.service.explain(key)
