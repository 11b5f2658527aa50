"""Scheduling, scale-down order and demand spreading of the demo cluster (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.demo.patterns import make_pattern
from gpuscale.demo.placement import (
    DemoGpu,
    DemoPod,
    choose_gpu,
    demand_documents,
    pods_to_remove,
    spread_demand,
)

GPUS = tuple(DemoGpu(node, i, f"GPU-{node}-{i}") for node in ("node-a", "node-b", "node-c") for i in range(2))


def pod(n: int, gpu: DemoGpu, created: float = 0.0, pending: float = 1.0, loading: float = 2.0) -> DemoPod:
    return DemoPod(
        f"llm-{n}",
        n,
        f"uid-{n}",
        f"{n:064x}",
        40000 + n,
        gpu,
        created,
        created + pending,
        created + pending + loading,
    )


def test_replicas_spread_over_nodes_then_fill_them() -> None:
    pods: list[DemoPod] = []
    order = []
    for n in range(1, 7):
        gpu = choose_gpu(GPUS, pods)
        assert gpu is not None
        order.append(gpu.label)
        pods.append(pod(n, gpu))
    assert order == ["node-a/0", "node-b/0", "node-c/0", "node-a/1", "node-b/1", "node-c/1"]
    assert choose_gpu(GPUS, pods) is None


def test_a_freed_gpu_is_reused() -> None:
    pods = [pod(n, g) for n, g in enumerate(GPUS, start=1)]
    del pods[3]  # node-b/0... index 3 is node-b/1
    gpu = choose_gpu(GPUS, pods)
    assert gpu is not None and gpu.label == "node-b/1"


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (0.5, ["llm-3", "llm-2"]),  # both Pending: newest first
        (2.0, ["llm-3", "llm-2"]),  # both Loading
        (10.0, ["llm-3", "llm-2"]),  # all Ready: newest first
    ],
)
def test_scale_down_removes_the_newest_least_ready_first(now: float, expected: list[str]) -> None:
    pods = [pod(1, GPUS[0], created=-10), pod(2, GPUS[1]), pod(3, GPUS[2])]
    assert [p.name for p in pods_to_remove(pods, 2, now)] == expected


def test_scale_down_prefers_a_loading_pod_over_an_older_ready_one() -> None:
    pods = [pod(1, GPUS[0], created=-10), pod(2, GPUS[1], created=-10), pod(3, GPUS[2], created=0)]
    assert [p.name for p in pods_to_remove(pods, 1, 2.0)] == ["llm-3"]


def test_demand_is_shared_by_ready_pods_and_capped_at_100() -> None:
    pods = [pod(1, GPUS[0], created=-10), pod(2, GPUS[1], created=-10), pod(3, GPUS[2], created=0)]
    # t=2: llm-3 is loading (0 %), llm-1 and llm-2 share 15 req/s at 10 req/s per replica: 75 % each
    assert spread_demand(15.0, pods, 2.0, 10.0) == {"llm-1": 75.0, "llm-2": 75.0, "llm-3": 0.0}
    assert spread_demand(50.0, pods, 2.0, 10.0)["llm-1"] == 100.0
    # t=0.5: llm-3 is Pending: no GPU figure at all
    assert "llm-3" not in spread_demand(15.0, pods, 0.5, 10.0)
    assert spread_demand(0.0, pods, 10.0, 10.0) == {"llm-1": 0.0, "llm-2": 0.0, "llm-3": 0.0}


def test_demand_files_list_every_gpu_with_the_pods_process() -> None:
    pods = [pod(1, GPUS[0], created=-10), pod(2, GPUS[3], created=0)]
    docs = demand_documents(GPUS, pods, spread_demand(8.0, pods, 0.5, 10.0))
    assert docs["node-a"] == {
        "gpus": {
            "0": {"utilization": 80.0, "processes": [{"pid": 40001, "share": 1.0}]},
            "1": {"utilization": 0.0, "processes": []},
        }
    }
    assert docs["node-b"]["gpus"]["1"] == {"utilization": 0.0, "processes": []}  # llm-2 is still Pending
    assert set(docs) == {"node-a", "node-b", "node-c"}


@pytest.mark.parametrize("name", ["burst", "ramp", "sine", "spike", "wake"])
def test_patterns_rise_and_fall_within_the_duration(name: str) -> None:
    p = make_pattern(name, 60.0, 10.0)
    values = [p.at(t)[0] for t in range(60)]
    peak = max(values)
    assert peak >= 40.0
    assert values.index(peak) < 45
    assert values[-1] < peak / 2
    assert min(values) >= 0.0
    assert (min(values) == 0.0) == p.idles


def test_the_wake_pattern_starts_idle_then_bursts() -> None:
    """The default with an engine profile: the workload is at zero, then the burst wakes it."""
    p = make_pattern("wake", 60.0, 10.0)
    assert [p.at(t) for t in (0.0, 5.9, 6.0, 26.9, 27.0, 59.0)] == [
        (0.0, "idle"), (0.0, "idle"), (42.0, "burst"), (42.0, "burst"), (8.0, "after the burst"),
        (8.0, "after the burst"),
    ]  # fmt: skip


async def test_the_demo_pods_say_when_they_were_created_and_became_ready(tmp_path: Path) -> None:
    """The demo's API server writes each pod's creation and Ready times as a real one does, so the scaler
    learns the demo's cold start (pending + loading) from them."""
    from gpuscale.demo.cluster import NAMESPACE, DemoCluster
    from gpuscale.kube.pods import readiness

    cluster = DemoCluster(
        tmp_path, ["node-a"], gpus_per_node=2, capacity_per_replica=10.0, pending_s=5.0, loading_s=20.0,
        initial_replicas=1,
    )  # fmt: skip
    await cluster.start()
    try:
        (first,) = cluster.pods
        got = readiness(cluster.api.pods[(NAMESPACE, first.name)])
        assert got.ready is True and got.scheduled_at is not None and got.ready_at is not None
        assert got.ready_at - got.scheduled_at == pytest.approx(25.0, abs=1.0)  # the API writes whole seconds
        cluster.wanted = 2
        cluster.tick(1.0, 0.0)
        second = cluster.pods[-1]
        assert readiness(cluster.api.pods[(NAMESPACE, second.name)]).ready is False  # Pending
        cluster.tick(10.0, 0.0)
        assert readiness(cluster.api.pods[(NAMESPACE, second.name)]).ready is False  # loading its model
        cluster.tick(30.0, 0.0)
        got = readiness(cluster.api.pods[(NAMESPACE, second.name)])
        assert got.ready is True and got.ready_at is not None and got.scheduled_at is not None
        assert got.ready_at - got.scheduled_at == pytest.approx(25.0, abs=1.0)
    finally:
        await cluster.stop()
