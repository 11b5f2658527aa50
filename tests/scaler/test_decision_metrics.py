"""``gpuscale_scaler_decisions_total``: each GetMetrics answer a decision moved is counted per ScaledObject and
decision (the Grafana dashboard's "Decisions taken" panel), the plain value not at all."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuscale.scaler.metrics import DECISIONS, decision_label
from gpuscale.scaler.server import Scaler
from tests.scaler.conftest import Cluster, KedaClient, until

LLM = {"podSelector": "app=llm", "targetValue": "60", "window": "0", "staleAfter": "2"}


def decisions(scaler: Scaler, decision: str) -> float | None:
    return scaler.metrics.registry.get_sample_value(
        "gpuscale_scaler_decisions_total",
        {"namespace": "default", "scaledobject": "so", "decision": decision},
    )


async def test_answers_moved_by_a_decision_are_counted(
    cluster: Cluster, keda: Callable[[int], KedaClient]
) -> None:
    await cluster.node("node-1", "constant:70", gpus=2)
    cluster.add_pod("default", "llm-0", "node-1", [0], {"app": "llm"}, ready=False)  # loading its model
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)

    async def held() -> bool:
        try:
            return await client.value(LLM) == 60.0  # the count held: target x 1 replica
        except Exception:
            return False

    await until(held, what="the answer of a workload whose pods all load")
    counted = decisions(scaler, "all_pods_loading")
    assert counted is not None and counted >= 1
    await client.value(LLM)
    assert decisions(scaler, "all_pods_loading") == counted + 1

    # Ready: the plain value (70 x 1 pod), counted nowhere
    cluster.apiserver.modify_pod("default", "llm-0", _ready)
    await until(lambda: _is(client, 70.0), what="the plain value once the pod is Ready")
    before = {d: decisions(scaler, d) for d in DECISIONS.values()}
    await client.value(LLM)
    assert {d: decisions(scaler, d) for d in DECISIONS.values()} == before


@pytest.mark.parametrize(
    ("decided", "label"),
    [
        ("ahead 120 s", "ahead"),
        ("N-1 guard", "n_minus_1_guard"),
        ("KV-cache guard", "kv_cache_guard"),
        ("backlog hold", "backlog_hold"),
        ("all pods loading", "all_pods_loading"),
        ("uncapped by the engines' demand (x1.80)", "uncapped"),
        ("something new", "other"),
    ],
)
def test_the_decision_label_drops_the_figures(decided: str, label: str) -> None:
    assert decision_label(decided) == label


def _ready(pod: dict[str, object]) -> None:
    status = pod["status"]
    assert isinstance(status, dict)
    for condition in status["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = "True"
    for container in status.get("containerStatuses", []):
        container["ready"] = True


async def _is(client: KedaClient, value: float) -> bool:
    try:
        return await client.value(LLM) == value
    except Exception:
        return False
