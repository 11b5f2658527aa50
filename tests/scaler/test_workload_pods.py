"""The scaler's list of a workload's GPU pods from the Kubernetes API: what counts, how often it is asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpuscale.kube.pods import api_client_from
from gpuscale.kube.workload_pods import ApiGpuPod, WorkloadPodLister
from tests.fakes.apiserver import FakeApiServer, make_pod, write_kubeconfig
from tests.poll import until

T0 = 1735689600.0  # 2025-01-01T00:00:00Z, make_pod's default creationTimestamp


@pytest.fixture
async def lister(tmp_path: Path) -> AsyncIterator[tuple[WorkloadPodLister, FakeApiServer, list[float]]]:
    api = FakeApiServer(token="t")
    await api.start()
    path = write_kubeconfig(tmp_path / "kubeconfig", api.url, token="t")
    client = await api_client_from(str(path), in_cluster=False)
    now = [0.0]
    yield WorkloadPodLister(client, ttl_s=15.0, clock=lambda: now[0]), api, now
    await client.close()
    await api.stop()


async def test_only_running_gpu_pods_not_being_deleted_count(
    lister: tuple[WorkloadPodLister, FakeApiServer, list[float]],
) -> None:
    pods, api, _ = lister
    gpu = {"nvidia.com/gpu": "1"}
    api.add_pod(make_pod("ml", "llm-0", node="n1", labels={"app": "llm"}, limits=gpu))
    api.add_pod(make_pod("ml", "llm-1", node="n2", labels={"app": "llm"}, limits=gpu, phase="Pending"))
    api.add_pod(make_pod("ml", "router", node="n1", labels={"app": "llm"}))  # asks for no GPU
    api.add_pod(make_pod("ml", "other", node="n1", labels={"app": "other"}, limits=gpu))
    gone = make_pod("ml", "llm-2", node="n2", labels={"app": "llm"}, limits=gpu)
    gone["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    api.add_pod(gone)
    await pods.refresh("ml", "app=llm")
    # not started yet: not Ready, scheduled at its creation (2025-01-01T00:00:00Z)
    assert pods.cached("ml", "app=llm") == (ApiGpuPod("ml/llm-0", "n1", False, T0, None),)


async def test_each_pod_comes_with_its_readiness_and_start_times(
    lister: tuple[WorkloadPodLister, FakeApiServer, list[float]],
) -> None:
    pods, api, _ = lister
    gpu = {"nvidia.com/gpu": "1"}
    api.add_pod(
        make_pod(
            "ml", "llm-0", node="n1", labels={"app": "llm"}, limits=gpu, ready=True,
            created_at=T0, scheduled_at=T0 + 2, ready_at=T0 + 122,
        )
    )  # fmt: skip
    loading = make_pod("ml", "llm-1", node="n2", labels={"app": "llm"}, limits=gpu, scheduled_at=T0 + 40)
    api.add_pod(loading)
    await pods.refresh("ml", "app=llm")
    assert pods.cached("ml", "app=llm") == (
        ApiGpuPod("ml/llm-0", "n1", ready=True, scheduled_at=T0 + 2, ready_at=T0 + 122),
        ApiGpuPod("ml/llm-1", "n2", ready=False, scheduled_at=T0 + 40, ready_at=None),
    )


async def test_one_list_per_workload_per_ttl(
    lister: tuple[WorkloadPodLister, FakeApiServer, list[float]],
) -> None:
    pods, api, now = lister
    for _ in range(20):
        await pods.refresh("ml", "app=llm")
    assert pods.lists == 1
    now[0] = 16.0
    await pods.refresh("ml", "app=llm")  # due: listed again, in the background
    await until(lambda: pods.lists, what="the list made in the background", ok=lambda n: n == 2)
    api.fail_next = [500]
    now[0] = 32.0
    await pods.refresh("ml", "app=llm")
    now[0] = 100.0
    assert pods.cached("ml", "app=llm") == ()  # the last good list, while not older than max_age_s
    now[0] = 200.0
    assert pods.cached("ml", "app=llm") is None  # too old: the agents' view alone
