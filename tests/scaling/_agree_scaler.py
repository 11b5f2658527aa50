"""The scaler side of the agreement tests: a state (``_agree.State``) as the agents stream it to a real
``ClusterState``, and the real ``ExternalScalerService`` asked over gRPC on loopback, as KEDA asks it.

Each node's agent sends a SNAPSHOT when it connects (the history it holds), then an UPDATE per sampling
round with the new samples and readings, the pod list again where a pod was deleted (``agent_stream``:
``convert.node_update_to_pb``, as the agent's ``watch.py`` sends them). The streams are applied in time
order, those that ended marked disconnected; the scaler's clock is ``NOW``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import grpc
import grpc.aio
import pytest

from gpuscale._proto import agent_pb2
from gpuscale._proto import externalscaler_pb2 as pb
from gpuscale._proto import externalscaler_pb2_grpc as pb_grpc
from gpuscale.convert import node_update_to_pb
from gpuscale.kube.workload_pods import ApiGpuPod
from gpuscale.model import (
    Assignment,
    ContainerRef,
    DeviceInfo,
    EngineMissing,
    EngineState,
    GpuState,
    NodeUpdate,
    PodInfo,
)
from gpuscale.scaler.service import ExternalScalerService, add_external_scaler
from gpuscale.scaler.state import ClusterState
from gpuscale.scaler.wire import scaled_object_key
from gpuscale.scaling.aggregate import Evaluation
from gpuscale.scaling.capacity import Capacities
from gpuscale.scaling.coldstart import ColdStarts
from tests.scaling._agree import (
    GIB,
    NOW,
    NS,
    SELECTOR,
    Answer,
    Pod,
    State,
    engine_readings,
    gpu_samples,
    uuid,
)

CONNECTED_S = 20.5  # the agents connected (their SNAPSHOT) this long before NOW; UPDATEs since
# what a loading pod's agent says of its engine (the simulator's words: sim.scaler.LOADING_ENGINE)
LOADING_REASON = "connect_error"
LOADING_DETAIL = "the engine is loading: connection refused"


def _pod_info(p: Pod) -> PodInfo:
    return PodInfo(
        NS,
        p.name,
        f"uid-{p.name}",
        {"app": "llm"},
        wants_gpu=True,
        ready=p.ready,
        scheduled_at=None if p.scheduled is None else NOW - p.scheduled,
        ready_at=None if p.became_ready is None or not p.ready else NOW - p.became_ready,
    )


def _device(p: Pod) -> DeviceInfo:
    return DeviceInfo(0, uuid(p), "H100", "0000:00:00.0", 80 * GIB, 700.0)


def _alive(p: Pod, t: float) -> bool:
    return p.deleted is None or t < NOW - p.deleted


def agent_stream(state: State, node: str) -> list[tuple[float, agent_pb2.NodeUpdate]]:
    """What ``node``'s agent sends, with when: a SNAPSHOT as it connects (the history it holds), then an
    UPDATE per sampling round with what is new (a GPU's assignments with each of its samples, as
    ``watch.py`` sends them), the pods again where one was deleted, until its stream ends."""
    pods = [p for p in state.pods if p.node == node]
    gone = state.gone_at(node)
    end = gone if gone is not None else NOW
    connect = min(NOW - CONNECTED_S, end - 5.0)
    samples = {p.name: gpu_samples(p) for p in pods}
    readings = {p.name: engine_readings(p) for p in pods}
    deletions = {NOW - p.deleted for p in pods if p.deleted is not None}
    assert all(connect < t <= end for t in deletions), "a pod is deleted while its agent streams"
    stamps = [s.timestamp for p in pods for s in samples[p.name]]
    stamps += [r.timestamp for p in pods for r in readings[p.name]]
    times = sorted({t for t in stamps if connect < t <= end} | deletions)
    out = []
    before = -math.inf
    for seq, t in enumerate([connect, *times], start=1):
        snapshot = seq == 1
        gpus = []
        engines = []
        for p in pods:
            new = tuple(s for s in samples[p.name] if before < s.timestamp <= t)
            # every GPU in the snapshot; in an update, those with new samples, and a deleted pod's (no
            # longer assigned)
            if snapshot or new or (p.deleted is not None and NOW - p.deleted == t):
                held = (Assignment(ContainerRef(NS, p.name, "main"), "nvidia.com/gpu", uuid(p)),)
                gpus.append(GpuState(_device(p), new, assignments=held if _alive(p, t) else ()))
            if not _alive(p, t):
                continue
            fresh = tuple(r for r in readings[p.name] if before < r.timestamp <= t)
            if fresh or (snapshot and readings[p.name]):
                engines.append(EngineState(NS, p.name, fresh))
            elif not p.ready:  # its agent's scrape is refused while the model loads
                engines.append(EngineState(NS, p.name, (), EngineMissing(t, LOADING_REASON, LOADING_DETAIL)))
        changed = t in deletions
        update: NodeUpdate[GpuState] = NodeUpdate(
            snapshot,
            node,
            f"agent-{node}",
            seq,
            t,
            1.0,
            gpus=tuple(gpus),
            pods=tuple(_pod_info(p) for p in pods if _alive(p, t)) if snapshot or changed else (),
            pods_changed=changed and not snapshot,
            complete=True,
            engines_supported=True,
            engines=tuple(engines),
        )
        out.append((t, node_update_to_pb(update)))
        before = t
    return out


@functools.cache
def timeline(state: State) -> tuple[tuple[float, int, str, agent_pb2.NodeUpdate | None], ...]:
    """Every agent's messages in time order, with ``("gone", node)`` where a stream ended and ``"poll"``
    just before the first pod deletion (KEDA polled while the pod lived: the scaler saw it start)."""
    steps: list[tuple[float, int, str, agent_pb2.NodeUpdate | None]] = []
    for node in sorted({p.node for p in state.pods} | set(state.nodes)):
        steps.extend((t, 0, node, msg) for t, msg in agent_stream(state, node))
        gone = state.gone_at(node)
        if gone is not None:
            steps.append((gone, 1, node, None))
    deletions = [NOW - p.deleted for p in state.pods if p.deleted is not None]
    if deletions:
        steps.append((min(deletions), -1, "poll", None))
    return tuple(sorted(steps, key=lambda s: (s[0], s[1], s[2])))


@dataclass
class ApiView:
    """The Kubernetes API's view of the workload (``service.PodLister``): its Running GPU pods, listed, and
    its replicas (Pending pods too)."""

    pods: tuple[ApiGpuPod, ...]
    count: int

    def cached(self, namespace: str, selector: str) -> tuple[ApiGpuPod, ...]:
        return self.pods

    def replicas(self, namespace: str, selector: str) -> int:
        return self.count

    async def refresh(self, namespace: str, selector: str) -> None:
        pass


def api_view(state: State) -> ApiView | None:
    """What the API lists of ``state``'s workload (``None``: the scaler has no API)."""
    if state.replicas is None:
        return None
    listed = []
    for p in state.pods:
        if p.deleted is None:
            info = _pod_info(p)
            listed.append(ApiGpuPod(f"{NS}/{p.name}", p.node, p.ready, info.scheduled_at, info.ready_at))
    return ApiView(tuple(listed), state.replicas)


@dataclass(frozen=True)
class Served:
    """A real ``ExternalScalerService`` on loopback and a stub calling it, as KEDA does."""

    service: ExternalScalerService
    stub: pb_grpc.ExternalScalerStub


def scaled_object(metadata: Mapping[str, str]) -> pb.ScaledObjectRef:
    """ScaledObject ``sim/llm`` with ``metadata``, its pods found by ``podSelector: app=llm``."""
    return pb.ScaledObjectRef(name="llm", namespace=NS, scalerMetadata={**metadata, "podSelector": SELECTOR})


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[Served]:
    service = ExternalScalerService(ClusterState(), clock=lambda: NOW)
    server = grpc.aio.server()
    add_external_scaler(server, service)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(service, pb_grpc.ExternalScalerStub(channel))
    finally:
        await channel.close()
        await server.stop(None)


def reset(served: Served, cluster: ClusterState, api: ApiView | None = None) -> None:
    """A fresh scaler over ``cluster``: nothing learned from an earlier case (cold starts, capacities)."""
    served.service.source = cluster
    served.service.pods = api
    served.service.cold_starts = ColdStarts()
    served.service.capacities = Capacities()


async def ask(served: Served, metadata: Mapping[str, str]) -> Answer:
    """KEDA's ``GetMetrics`` and ``IsActive`` over gRPC: ``(value, active)``, ``(None, False)`` for
    ``UNAVAILABLE``."""
    ref = scaled_object(metadata)
    try:
        value = await served.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref))
        active = await served.stub.IsActive(ref)
    except grpc.aio.AioRpcError as e:
        assert e.code() is grpc.StatusCode.UNAVAILABLE, e.details()
        return None, False
    item = value.metricValues[0]
    assert item.metricValueFloat == pytest.approx(item.metricValue, abs=1)
    return item.metricValueFloat, active.result


async def feed(served: Served, state: State) -> ClusterState:
    """A fresh scaler fed ``state``'s agent streams in time order (the streams that ended marked so)."""
    cluster = ClusterState(history_s=120.0)
    reset(served, cluster, api_view(state))
    for _, _, what, msg in timeline(state):
        if msg is not None:
            cluster.apply(msg)
        elif what == "poll":
            with contextlib.suppress(grpc.aio.AioRpcError):
                await served.stub.IsActive(scaled_object({"targetValue": "60"}))
        else:
            cluster.mark_disconnected(what, f"agent-{what}")
    return cluster


async def scaler_answer(served: Served, metadata: Mapping[str, str], state: State) -> Answer:
    await feed(served, state)
    return await ask(served, metadata)


async def scaler_evaluation(served: Served, metadata: Mapping[str, str], state: State) -> Evaluation:
    """The scaler's answer with how it came about (``Evaluation.decision``), as ``GetMetrics`` computes it;
    raises where it answers an error."""
    await feed(served, state)
    service = served.service
    key = scaled_object_key(scaled_object(metadata))
    md = service.metadata.parse(key.metadata)
    return service.evaluate(md, await service.query(key, md), key=key)
