"""``gpuscale_scaler_decisions_total``: each GetMetrics answer a decision moved is counted per ScaledObject and
decision (the Grafana dashboard's "Decisions taken" panel), the plain value not at all."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuscale.scaler.metrics import DECISIONS
from gpuscale.scaler.server import Scaler
from gpuscale.scaling.decisions import Decision
from tests.poll import until
from tests.scaler.conftest import Cluster, KedaClient

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
    before = {d: decisions(scaler, d) for d in DECISIONS}
    await client.value(LLM)
    assert {d: decisions(scaler, d) for d in DECISIONS} == before


@pytest.mark.parametrize(
    ("decision", "label"),
    [
        (Decision.AHEAD, "ahead"),
        (Decision.N_MINUS_1_GUARD, "n_minus_1_guard"),
        (Decision.KV_CACHE_GUARD, "kv_cache_guard"),
        (Decision.BACKLOG_HOLD, "backlog_hold"),
        (Decision.ALL_PODS_LOADING, "all_pods_loading"),
        (Decision.UNCAPPED, "uncapped"),
        (Decision.CAPACITY, "capacity"),
        (Decision.REQUEST_PATH, "request_path"),
    ],
)
def test_each_decision_has_its_label(decision: Decision, label: str) -> None:
    """The labels the dashboard and the alerts name: one per decision, without its figures."""
    assert decision.label == label and label in DECISIONS
    assert len(DECISIONS) == len(Decision)


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
