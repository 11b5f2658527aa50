"""``share: container`` end to end: two pods of one workload time-slice one GPU (kubelet ids ``GPU-x::0`` and
``GPU-x::1``), which two processes keep 80 % busy. Real agent (mock GPU with those processes), real scaler,
real gRPC; the kubelet and the API server are stand-ins, ``/proc`` a directory of the test's.

With each process's cgroup readable (the agent in the host's PID namespace), each pod's share is its own
processes'. Without (no ``hostPID``: no cgroup matches), the agent cannot tell whose the processes are: a pod's
share is unknown, so the pod is a missing pod, never a made-up 0 (``docs/architecture.md``)."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.mock import MockBackend, MockConfig, MockProcess
from gpuscale.backends.patterns import parse_patterns
from gpuscale.kube.nodes import NodeLabelWatcher
from gpuscale.kube.pods import NodePodWatcher, WatchSettings, api_client_from
from gpuscale.kube.resourceslices import NodeResourceSliceWatcher
from gpuscale.scaler.wire import ScaledObjectKey
from tests.fakes.apiserver import make_pod
from tests.fakes.kubelet import FakeKubelet, pod_resources
from tests.poll import until

from .conftest import Cluster, KedaClient, Node

NODE = "node-a"
# The two processes on GPU 0 (mock shares of its 80 % load): 40 % each.
PROCESSES = {"embed-0": (4001, "a" * 64), "embed-1": (4002, "b" * 64)}
GPU = {"podSelector": "app=embed", "metric": "gpu_utilization", "targetValue": "60", "window": "0"}
CONTAINER = {**GPU, "share": "container"}


def write_cgroup(proc: Path, pid: int, pod_uid: str, container_id: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice/"
        f"cri-containerd-{container_id}.scope\n"
    )


async def shared_gpu(cluster: Cluster, proc: Path, *, cgroups: tuple[str, ...]) -> Node:
    """``NODE``'s agent, its GPU 0 at 80 % from the two processes, time-sliced by the two pods of app=embed;
    under ``proc`` the cgroups of the processes of the pods ``cgroups`` names."""
    kubelet = FakeKubelet(cluster.socket_dir / f"{NODE}.sock")
    await kubelet.start()
    api = await api_client_from(str(cluster.kubeconfig), in_cluster=False)
    watch = WatchSettings(backoff_initial_s=0.05, backoff_max_s=0.5)
    backend = MockBackend(
        MockConfig(
            gpus=1,
            patterns=parse_patterns("constant:80"),
            node=NODE,
            processes={0: tuple(MockProcess(pid, 0.5) for pid, _ in PROCESSES.values())},
        )
    )
    settings = AgentSettings(
        node_name=NODE,
        interval=0.1,
        grpc_address="127.0.0.1:0",
        metrics_address="127.0.0.1:0",
        kubelet_socket=kubelet.socket_path,
        attribution_interval=0.1,
        history_seconds=10.0,
    )
    agent = Agent(
        replace(settings, proc_root=proc),
        backend,
        pods=NodePodWatcher(api, NODE, watch),
        node=NodeLabelWatcher(api, NODE, watch),
        dra=NodeResourceSliceWatcher(api, NODE, watch),
    )
    await agent.start()
    node = Node(NODE, agent, kubelet, api, "constant:80", 1)  # type: ignore[arg-type]
    cluster.nodes[NODE] = node  # stopped with the cluster
    proc.mkdir(exist_ok=True)
    gpu = node.uuids[0]
    for replica, (name, (pid, container_id)) in enumerate(PROCESSES.items()):
        uid = str(uuidlib.uuid4())
        cluster.apiserver.add_pod(
            make_pod(
                "default",
                name,
                node=NODE,
                uid=uid,
                labels={"app": "embed"},
                containers={"main": f"containerd://{container_id}"},
                limits={"nvidia.com/gpu": "1"},
                ready=True,
            )
        )
        kubelet.pods.append(
            pod_resources("default", name, {"main": [("nvidia.com/gpu", [f"{gpu}::{replica}"])]})
        )
        if name in cgroups:
            write_cgroup(proc, pid, uid, container_id)
    return node


async def settled(client: KedaClient, metadata: dict[str, str], expected: float) -> None:
    async def check() -> bool:
        try:
            return await client.value(metadata) == pytest.approx(expected)
        except grpc.aio.AioRpcError:
            return False

    await until(check, what=f"value {expected}")


async def test_each_pod_counts_its_own_processes_when_their_cgroups_tell(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path
) -> None:
    await shared_gpu(cluster, tmp_path / "proc", cgroups=tuple(PROCESSES))
    client = keda((await cluster.scaler()).grpc_port)
    await settled(client, GPU, 2 * 80)  # the whole GPU, for each of the two pods
    await settled(client, CONTAINER, 2 * 40)  # each pod's own 40 %
    assert await client.active(CONTAINER)


async def test_a_share_the_agent_cannot_tell_is_a_missing_pod_never_zero(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path
) -> None:
    """The troubleshooting guide's "No container breakdown for a shared GPU": no cgroup matches the processes."""
    node = await shared_gpu(cluster, tmp_path / "proc", cgroups=())
    client = keda((await cluster.scaler()).grpc_port)
    await settled(client, GPU, 2 * 80)  # the scaler has fresh samples of the GPU, attributed to both pods
    sample = node.agent.state.snapshot.gpus[0]
    assert len(sample.latest.processes if sample.latest else ()) == 2 and not sample.owners

    expected = (
        "ScaledObject default/so: 2 of 2 GPU pods have no fresh sample (none is fresh): node-a (share unknown: 2 pods); "
        "KEDA keeps the replicas or applies its fallback"
    )
    assert await client.code_of(client.metrics(CONTAINER)) == (grpc.StatusCode.UNAVAILABLE, expected)
    assert await client.code_of(client.active(CONTAINER)) == (grpc.StatusCode.UNAVAILABLE, expected)


async def test_a_pod_whose_share_is_unknown_beside_one_whose_is_known_is_missing(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path
) -> None:
    """embed-0's process is told by its cgroup, embed-1's is not: embed-1 is a missing pod, counted as the HPA
    counts a pod without metrics (here, scaling down: at the target), never as 0."""
    await shared_gpu(cluster, tmp_path / "proc", cgroups=("embed-0",))
    scaler = await cluster.scaler()
    client = keda(scaler.grpc_port)
    await settled(client, CONTAINER, 40 + 60)  # embed-0's 40 %, embed-1 at the target 60
    assert await client.active(CONTAINER)
    assert scaler.service is not None
    explained = await scaler.service.explain(ScaledObjectKey("so", "default", CONTAINER))
    answer = explained.get("answer")
    assert isinstance(answer, dict), explained
    assert (answer["pods"], answer["missingPods"], answer["missingWhere"]) == (
        1,
        1,
        ["node-a (share unknown: 1 pod)"],
    )
