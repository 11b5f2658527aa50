"""What KEDA's ``fallback`` needs from the scaler, for the example that uses it: ``GetMetricSpec`` answers
from the metadata alone while ``GetMetrics`` fails, so KEDA counts failed polls and holds the fallback
replicas. The example's own trigger, against a real scaler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
import yaml

from tests.poll import until

from .conftest import Cluster, KedaClient

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "external-fallback.yaml"


def _example() -> tuple[dict[str, str], dict[str, int]]:
    (so,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (trigger,) = so["spec"]["triggers"]
    metadata = {k: v for k, v in trigger["metadata"].items() if k != "scalerAddress"}
    return metadata, so["spec"]["fallback"]


async def test_with_no_agent_get_metrics_fails_and_get_metric_spec_does_not(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    metadata, fallback = _example()
    # the behaviour that never scales a running workload down (docs/scaler.md)
    assert fallback == {"failureThreshold": 3, "replicas": 4, "behavior": "currentReplicasIfHigher"}
    md = {**metadata, "podSelector": "app=llm"}
    scaler = await cluster.scaler(kube=False, agents=())
    client = keda(scaler.grpc_port)
    for _ in range(fallback["failureThreshold"]):  # every poll: the spec, then the metric fails
        (spec,) = (await client.spec(md)).metricSpecs
        assert spec.targetSizeFloat == 5.0  # llm-serving: 5 waiting requests per replica
        code, _ = await client.code_of(client.metrics(md))
        assert code == grpc.StatusCode.UNAVAILABLE


async def test_with_the_only_agent_gone_get_metrics_fails(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    metadata, _ = _example()
    # on GPU utilization (these mock pods serve no engine): the premise is the same for every metric
    md = {**metadata, "podSelector": "app=llm", "window": "0", "staleAfter": "1"}
    md.update(metric="gpu_utilization", targetValue="85")
    await cluster.node("node-a", "constant:40", gpus=1)
    cluster.add_pod("default", "llm-0", "node-a", [0], {"app": "llm"})
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)

    async def answers() -> bool:
        return (await client.code_of(client.metrics(md)))[0] == grpc.StatusCode.OK

    await until(answers, what="the workload answers")
    await cluster.kill("node-a")
    await until(lambda: scaler.state.stale_nodes == 1, what="node-a marked stale")
    await asyncio.sleep(1.5)  # past staleAfter
    code, _ = await client.code_of(client.metrics(md))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert (await client.spec(md)).metricSpecs[0].targetSizeFloat == 85.0
