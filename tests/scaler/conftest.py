"""A small cluster on loopback: real agents on the mock backend (each with its FakeKubelet, and watchers of its
pods, its Node and its ResourceSlices on the FakeApiServer), a real scaler following them, and an async client
that calls it the way KEDA does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale._proto import externalscaler_pb2 as pb
from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
from gpuscale.agent.service import Agent
from gpuscale.agent.settings import AgentSettings
from gpuscale.backends.mock import MockBackend, MockConfig
from gpuscale.backends.patterns import parse_patterns
from gpuscale.kube.nodes import NodeLabelWatcher
from gpuscale.kube.pods import NodePodWatcher, WatchSettings, api_client_from
from gpuscale.kube.resourceslices import NodeResourceSliceWatcher
from gpuscale.scaler.server import Scaler, ScalerSettings
from gpuscale.scaler.subscriber import SubscriberSettings
from tests.fakes.apiserver import FakeApiServer, make_pod, write_kubeconfig
from tests.fakes.kubelet import FakeKubelet, dra_claim, pod_resources

TOKEN = "s3cret"


@dataclass
class Node:
    name: str
    agent: Agent
    kubelet: FakeKubelet
    api: ApiClient | None
    patterns: str
    gpus: int

    @property
    def uuids(self) -> list[str]:
        return [d.uuid for d in self.agent.state.devices]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.agent.grpc_port}"


@dataclass
class Cluster:
    socket_dir: Path
    apiserver: FakeApiServer
    kubeconfig: Path
    nodes: dict[str, Node] = field(default_factory=dict)
    scalers: list[Scaler] = field(default_factory=list)

    async def node(self, name: str, patterns: str = "constant:0", gpus: int = 2, **settings: Any) -> Node:
        """Start (or restart, on the same port) the agent of node ``name``."""
        old = self.nodes.get(name)
        kubelet = old.kubelet if old else FakeKubelet(self.socket_dir / f"{name}.sock")
        if old is None:
            await kubelet.start()
        api = await api_client_from(str(self.kubeconfig), in_cluster=False)
        watch = WatchSettings(backoff_initial_s=0.05, backoff_max_s=0.5)
        pods = NodePodWatcher(api, name, watch)
        base = AgentSettings(
            node_name=name,
            interval=0.1,
            grpc_address=f"127.0.0.1:{old.agent.grpc_port}" if old else "127.0.0.1:0",
            metrics_address="127.0.0.1:0",
            kubelet_socket=kubelet.socket_path,
            attribution_interval=0.1,
            history_seconds=10.0,
        )
        backend = MockBackend(MockConfig(gpus=gpus, patterns=parse_patterns(patterns), node=name))
        agent = Agent(
            replace(base, **settings),
            backend,
            pods=pods,
            node=NodeLabelWatcher(api, name, watch),
            dra=NodeResourceSliceWatcher(api, name, watch),
        )
        await agent.start()
        node = Node(name, agent, kubelet, api, patterns, gpus)  # type: ignore[arg-type]
        self.nodes[name] = node
        return node

    async def kill(self, name: str) -> None:
        node = self.nodes[name]
        await node.agent.stop()
        if node.api is not None:
            await node.api.close()
            node.api = None

    async def scaler(self, *, kube: bool = True, **settings: Any) -> Scaler:
        base = ScalerSettings(
            agents=tuple(n.address for n in self.nodes.values()),
            grpc_address="127.0.0.1:0",
            metrics_address="127.0.0.1:0",
            kubeconfig=str(self.kubeconfig) if kube else None,
            history_s=10.0,
            ready_grace_s=2.0,
            subscriber=SubscriberSettings(backoff_initial_s=0.05, backoff_max_s=0.3, min_silence_s=0.5),
        )
        scaler = Scaler(replace(base, **settings))
        await scaler.start()
        self.scalers.append(scaler)
        return scaler

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        gpus: Sequence[int],
        labels: Mapping[str, str],
        *,
        ready: bool = True,
        created_at: float | None = None,
        scheduled_at: float | None = None,
        ready_at: float | None = None,
    ) -> None:
        """A pod on ``node`` holding GPUs (by index) of that node: in the API server and in its kubelet;
        Ready (serving) unless ``ready=False``, created, scheduled and Ready at those Unix seconds
        (``make_pod``'s defaults: its creation)."""
        limits = {"nvidia.com/gpu": str(len(gpus))}
        pod = make_pod(
            namespace,
            name,
            node=node,
            labels=labels,
            limits=limits,
            ready=ready,
            created_at=created_at,
            scheduled_at=scheduled_at,
            ready_at=ready_at,
        )
        self.apiserver.add_pod(pod)
        n = self.nodes[node]
        ids = [n.uuids[i] for i in gpus]
        n.kubelet.pods.append(pod_resources(namespace, name, {"main": [("nvidia.com/gpu", ids)]}))

    def publish_dra_devices(self, node: str) -> None:
        """The ResourceSlice NVIDIA's DRA driver publishes for ``node``: ``gpu-<index>`` for each of its GPUs,
        named by its ``uuid`` attribute."""
        devices = {
            f"gpu-{i}": {"type": {"string": "gpu"}, "uuid": {"string": uuid}}
            for i, uuid in enumerate(self.nodes[node].uuids)
        }
        self.apiserver.put_resource_slice(
            f"{node}-gpu.nvidia.com", node=node, driver="gpu.nvidia.com", devices=devices
        )

    def add_dra_pod(
        self, namespace: str, name: str, node: str, gpus: Sequence[int], labels: Mapping[str, str]
    ) -> None:
        """A pod on ``node`` whose ResourceClaim got GPUs (by index) of that node from NVIDIA's DRA driver."""
        self.apiserver.add_pod(
            make_pod(namespace, name, node=node, labels=labels, resource_claims=[f"{name}-gpu"], ready=True)
        )
        claim = dra_claim(namespace, f"{name}-gpu", "gpu.nvidia.com", node, [f"gpu-{i}" for i in gpus])
        self.nodes[node].kubelet.pods.append(pod_resources(namespace, name, {}, {"main": [claim]}))

    def remove_pod(self, namespace: str, name: str) -> None:
        node = self.apiserver.pods[(namespace, name)]["spec"]["nodeName"]
        self.apiserver.delete_pod(namespace, name)
        kubelet = self.nodes[node].kubelet
        kubelet.pods = [p for p in kubelet.pods if (p.namespace, p.name) != (namespace, name)]

    async def close(self) -> None:
        for s in self.scalers:
            await s.stop()
        for n in self.nodes.values():
            await n.agent.stop()
            if n.api is not None:
                await n.api.close()
            await n.kubelet.stop()


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer(token=TOKEN)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def cluster(socket_dir: Path, tmp_path: Path, apiserver: FakeApiServer) -> AsyncIterator[Cluster]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token=TOKEN)
    c = Cluster(socket_dir, apiserver, kubeconfig)
    try:
        yield c
    finally:
        await c.close()


class KedaClient:
    """Calls a scaler like KEDA: one ScaledObjectRef for every call."""

    def __init__(self, channel: grpc.aio.Channel, name: str = "so", namespace: str = "default") -> None:
        self.stub = pb_grpc.ExternalScalerStub(channel)
        self.name = name
        self.namespace = namespace

    def ref(self, metadata: Mapping[str, str], name: str | None = None) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(
            name=name or self.name, namespace=self.namespace, scalerMetadata=dict(metadata)
        )

    async def spec(self, metadata: Mapping[str, str], **kw: Any) -> pb.GetMetricSpecResponse:
        return await self.stub.GetMetricSpec(self.ref(metadata, **kw), timeout=5)

    async def metrics(
        self, metadata: Mapping[str, str], metric: str = "", **kw: Any
    ) -> pb.GetMetricsResponse:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(metadata, **kw), metricName=metric)
        return await self.stub.GetMetrics(request, timeout=5)

    async def value(self, metadata: Mapping[str, str], **kw: Any) -> float:
        (v,) = (await self.metrics(metadata, **kw)).metricValues
        return v.metricValueFloat

    async def active(self, metadata: Mapping[str, str], **kw: Any) -> bool:
        return (await self.stub.IsActive(self.ref(metadata, **kw), timeout=5)).result

    async def code_of(self, call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
        try:
            await call
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details() or ""
        return grpc.StatusCode.OK, ""


@pytest.fixture
async def keda() -> AsyncIterator[Callable[[int], KedaClient]]:
    channels: list[grpc.aio.Channel] = []

    def connect(port: int) -> KedaClient:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(ch)
        return KedaClient(ch)

    yield connect
    for ch in channels:
        await ch.close()
