"""Per-container use of shared GPUs: two pods time-slicing one GPU each get their own series, and their
shares add up to the GPU's use. Processes are mapped to containers through /proc/<pid>/cgroup (a fake proc
root here) and this node's pods from the Kubernetes API (the stand-in API server, through the real client)."""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpuscale.backends.mock import MockBackend, MockConfig, MockProcess
from gpuscale.backends.patterns import parse_patterns
from gpuscale.kube.pods import NodePodWatcher, api_client_from
from tests.conftest import AgentFactory
from tests.fakes.apiserver import FakeApiServer, make_pod, write_kubeconfig
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until

from .scrape import scrape, series

NODE = "node-a"


def write_cgroup(proc: Path, pid: int, pod_uid: str, container_id: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    slice_uid = pod_uid.replace("-", "_")
    (d / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/"
        f"cri-containerd-{container_id}.scope\n"
    )


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer(token=None)
    await server.start()
    yield server
    await server.stop()


async def test_two_pods_sharing_a_gpu(
    start_agent: AgentFactory, kubelet: FakeKubelet, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    proc = tmp_path / "proc"
    pods = {"embed-a": (1001, 0.25, "a" * 64), "embed-b": (1002, 0.5, "b" * 64)}
    for name, (pid, _, cid) in pods.items():
        uid = str(uuidlib.uuid4())
        apiserver.add_pod(
            make_pod(
                "ai",
                name,
                node=NODE,
                uid=uid,
                labels={"app": "embed"},
                containers={"worker": f"containerd://{cid}"},
            )
        )
        write_cgroup(proc, pid, uid, cid)
    # GPU 0 at 80 %, of which pod a's process uses 25 % of the GPU's load and pod b's 50 %.
    cfg = MockConfig(
        gpus=2,
        patterns=parse_patterns("constant:80,constant:10"),
        node=NODE,
        processes={0: tuple(MockProcess(pid, share) for pid, share, _ in pods.values())},
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)
    watcher = NodePodWatcher(await api_client_from(str(kubeconfig), False), NODE)
    agent = await start_agent(backend=MockBackend(cfg), pods=watcher, proc_root=proc, node=NODE)
    gpu0 = agent.state.devices[0].uuid
    kubelet.pods = [
        pod_resources("ai", name, {"worker": [("nvidia.com/gpu", [f"{gpu0}::{i}"])]})
        for i, name in enumerate(pods)
    ]

    async def shares() -> dict[str, float] | None:
        _, text = await scrape(agent)
        got = {lab["PodName"]: v for lab, v in series(text, "DCGM_CUSTOM_PROCESS_SM_UTIL")}
        return got if len(got) == 2 else None

    try:
        got = await until(shares)
    finally:
        await watcher.api.close()
    assert got == {"embed-a": pytest.approx(20.0), "embed-b": pytest.approx(40.0)}
    _, text = await scrape(agent)
    labels = series(text, "DCGM_CUSTOM_PROCESS_SM_UTIL")[0][0]
    assert set(labels) == {"gpu", "UUID", "NamespaceName", "PodName", "ContainerName", "NodeName"}
    assert (labels["NamespaceName"], labels["ContainerName"], labels["NodeName"]) == ("ai", "worker", NODE)
    # The shares add up to the GPU's use by its processes; memory likewise.
    gpu_util = {lab["UUID"]: v for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL") if lab["UUID"] == gpu0}
    assert sum(got.values()) == pytest.approx(gpu_util[gpu0] * (0.25 + 0.5))
    mem = {lab["PodName"]: v for lab, v in series(text, "DCGM_CUSTOM_PROCESS_MEM_USED")}
    fb_used = next(v for lab, v in series(text, "DCGM_FI_DEV_FB_USED") if lab["UUID"] == gpu0)
    assert sum(mem.values()) == pytest.approx(fb_used * 0.75, rel=1e-3)
    alloc = {lab["PodName"]: v for lab, v in series(text, "DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED")}
    assert alloc == {"embed-a": pytest.approx(81559 / 2), "embed-b": pytest.approx(81559 / 2)}
    ratio = {lab["PodName"]: v for lab, v in series(text, "DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO")}
    assert ratio["embed-b"] == pytest.approx(2 * ratio["embed-a"], rel=1e-3)
    # The device-level series carry both holders.
    holders = sorted(lab["pod"] for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL") if lab["UUID"] == gpu0)
    assert holders == ["embed-a", "embed-b"]
    # And the Watch stream carries each process's container, with the pods' labels.
    assert agent.state.pods[("ai", "embed-a")].labels == {"app": "embed"}
    owners = agent.state.snapshot.gpus[0].owners
    assert {ref.pod for ref in owners.values()} == {"embed-a", "embed-b"}


async def test_single_holder_gets_its_processes_without_the_api(
    start_agent: AgentFactory, kubelet: FakeKubelet
) -> None:
    cfg = MockConfig(
        gpus=1, patterns=parse_patterns("constant:60"), node=NODE, processes={0: (MockProcess(77, 1.0),)}
    )
    agent = await start_agent(backend=MockBackend(cfg))
    kubelet.pods = [
        pod_resources("ai", "llm-0", {"server": [("nvidia.com/gpu", [agent.state.devices[0].uuid])]})
    ]

    async def share() -> float | None:
        _, text = await scrape(agent)
        got = series(text, "DCGM_CUSTOM_PROCESS_SM_UTIL")
        return got[0][1] if got else None

    assert await until(share) == pytest.approx(60.0)
    await asyncio.sleep(0)


async def test_shares_no_cgroup_tells_are_left_out_never_zero(
    start_agent: AgentFactory, kubelet: FakeKubelet, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Two pods time-slice GPU 0 (``GPU-x::0``, ``GPU-x::1``), 80 % busy from two processes, and no cgroup
    matches them (no hostPID): neither pod's SM utilization nor memory is known. Each keeps its allocation."""
    for name in ("embed-a", "embed-b"):
        apiserver.add_pod(make_pod("ai", name, node=NODE, containers={"worker": f"containerd://{name}"}))
    cfg = MockConfig(
        gpus=1,
        patterns=parse_patterns("constant:80"),
        node=NODE,
        processes={0: (MockProcess(2001, 0.5), MockProcess(2002, 0.5))},
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)
    watcher = NodePodWatcher(await api_client_from(str(kubeconfig), False), NODE)
    (tmp_path / "proc").mkdir()
    agent = await start_agent(backend=MockBackend(cfg), pods=watcher, proc_root=tmp_path / "proc", node=NODE)
    gpu0 = agent.state.devices[0].uuid
    kubelet.pods = [
        pod_resources("ai", name, {"worker": [("nvidia.com/gpu", [f"{gpu0}::{i}"])]})
        for i, name in enumerate(("embed-a", "embed-b"))
    ]

    async def allocated() -> str | None:
        _, text = await scrape(agent)
        return text if len(series(text, "DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED")) == 2 else None

    try:
        text = await until(allocated)
    finally:
        await watcher.api.close()
    assert len(agent.state.snapshot.gpus[0].latest.processes) == 2  # type: ignore[union-attr]
    for name in (
        "DCGM_CUSTOM_PROCESS_SM_UTIL",
        "DCGM_CUSTOM_PROCESS_MEM_USED",
        "DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO",
    ):
        assert series(text, name) == [], name
    assert [v for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL") if lab["UUID"] == gpu0] == [80.0, 80.0]
