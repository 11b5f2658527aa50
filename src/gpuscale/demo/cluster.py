"""The demo cluster: a local Kubernetes API, one kubelet PodResources server per mock node, and what the
deployment controller, scheduler and kubelet would do for one Deployment.

``demo/llm`` (selector ``app=llm``) and its ScaledObject live in the API. A write to the Deployment's
``/scale`` (by the demo's HPA/KEDA controller, over HTTP) sets the wanted replicas; ``tick`` then creates or
deletes pods ``llm-<n>``, each scheduled on a free GPU, moves them Pending → Running (loading) → Ready, keeps
the API pods, the kubelets' GPU assignments and a ``/proc/<pid>/cgroup`` per pod (so agents attribute
per-container figures) in step, and writes every node's mock demand file from the demand now. With
``engines`` each pod also runs a mock vLLM engine on a loopback port (``engines.DemoEngines``), announced by
its ``gpuscale.io/metrics-port`` annotation, with IP ``127.0.0.1`` once its container starts, fed by the
demand the router sends it (to the least loaded Ready pod); its GPU is then as busy as its engine's batch.
With ``gateway`` the demand first reaches a stand-in gateway (``gateway.DemoGateway``: it counts every
request and holds them while no pod is Ready), served on a loopback port and announced in the API as the
Service ``demo/llm-gateway`` (port ``admin`` 9901) with an EndpointSlice on ``127.0.0.1`` at that port, so
the scaler finds it as it finds a gateway's replicas in a cluster (``requestPath: llm-gateway:9901/…``).
With ``real`` (``--engine vllm``) one pod's engine is the real vLLM once it is healthy: the pod Ready longest,
or else the first to become Ready; its annotation is rewritten to the real server's port (``_bind_real``).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.mock import MockBackend, MockConfig, find_model
from .apiserver import LocalApiServer, Obj, make_pod, write_kubeconfig
from .engines import ANNOTATION, DemoEngines
from .gateway import ADMIN_PATH, DemoGateway
from .kubelet import LocalKubelet, pod_resources
from .placement import (
    DemoGpu,
    DemoPod,
    choose_gpu,
    demand_documents,
    pods_to_remove,
    spread_demand,
)
from .realvllm import RealVllm

__all__ = [
    "GATEWAY_PORT",
    "GATEWAY_SERVICE",
    "NAMESPACE",
    "SCALED_OBJECT",
    "WORKLOAD",
    "DemoCluster",
    "DemoNode",
    "request_path",
]

NAMESPACE = "demo"
WORKLOAD = "llm"
SCALED_OBJECT = "llm"
LABELS = {"app": "llm"}
GPU_RESOURCE = "nvidia.com/gpu"
MOCK_MODEL = "h100"
GATEWAY_SERVICE = "llm-gateway"
GATEWAY_PORT = 9901  # the Service's port (Envoy's admin port); its endpoint listens on a free loopback port


def request_path() -> str:
    """The trigger's ``requestPath``: the gateway's Service, port and metrics path."""
    return f"{GATEWAY_SERVICE}:{GATEWAY_PORT}{ADMIN_PATH}"


@dataclass(frozen=True)
class DemoNode:
    name: str
    kubelet: LocalKubelet
    demand_file: Path
    gpus: tuple[DemoGpu, ...]


def _mock_gpus(node: str, count: int) -> tuple[DemoGpu, ...]:
    """The GPUs the agent's mock backend will report for ``node`` (UUIDs are seeded by the node's name)."""
    backend = MockBackend(MockConfig(gpus=count, model=find_model(MOCK_MODEL), node=node))
    backend.open()
    try:
        return tuple(DemoGpu(node, d.index, d.uuid) for d in backend.devices())
    finally:
        backend.close()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class DemoCluster:
    """``start`` serves the API and the kubelets; ``tick(now, demand)`` advances pods and GPU load."""

    def __init__(
        self,
        workdir: Path,
        node_names: Sequence[str],
        *,
        gpus_per_node: int,
        capacity_per_replica: float,
        pending_s: float,
        loading_s: float,
        initial_replicas: int,
        scaled_object_triggers: Sequence[Obj] = (),
        engines: bool = False,
        gateway: bool = False,
        hold_timeout_s: float = 60.0,
        real: RealVllm | None = None,
    ) -> None:
        self.workdir = workdir
        self.real = real if engines else None
        self.capacity_per_replica = capacity_per_replica
        self.pending_s = pending_s
        self.loading_s = loading_s
        self.token = secrets.token_hex(16)
        self.api = LocalApiServer(token=self.token)
        self.api.on_scale.append(self._scaled)
        self.proc_root = workdir / "proc"
        self.nodes = tuple(
            DemoNode(
                name,
                LocalKubelet(workdir / f"{name}.sock"),
                workdir / f"{name}-demand.json",
                _mock_gpus(name, gpus_per_node),
            )
            for name in node_names
        )
        self.gpus = tuple(g for n in self.nodes for g in n.gpus)
        self.kubeconfig = workdir / "kubeconfig"
        self.pods: list[DemoPod] = []
        self.wanted = initial_replicas
        self.utilization: dict[str, float] = {}  # pod name -> GPU utilization now
        self._next = 1
        self._phases: dict[str, str] = {}
        self._documents: dict[str, str] = {}
        self._triggers = list(scaled_object_triggers)
        # Unix seconds of the demo's time 0: the pods' creation and Ready times are written as the API would
        # (from which the scaler learns the cold start, pending_s + loading_s)
        self.epoch = time.time()
        self.engines = DemoEngines(capacity_per_replica, real=self.real) if engines else None
        self.gateway = DemoGateway(WORKLOAD, hold_timeout_s) if gateway else None
        self.first_ready_at: float | None = None  # the demo's time the first pod became Ready
        self._annotations: dict[str, dict[str, str]] = {}
        # With engines the pods ask for their GPU (resources.limits), as a vLLM Deployment does: the scaler
        # reads engine metrics of the pods that want a GPU.
        self._limits = {GPU_RESOURCE: "1"} if engines else None

    # ----- lifecycle
    async def start(self) -> None:
        self.proc_root.mkdir(parents=True, exist_ok=True)
        url = await self.api.start()
        write_kubeconfig(self.kubeconfig, url, self.token, namespace=NAMESPACE)
        self.api.put_deployment(NAMESPACE, WORKLOAD, LABELS, replicas=self.wanted)
        self.api.put_scaled_object(
            NAMESPACE,
            SCALED_OBJECT,
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKLOAD},
            self._triggers,
        )
        product = find_model(MOCK_MODEL).name.replace(" ", "-")  # as GPU feature discovery labels it
        for node in self.nodes:
            labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.present": "true"}
            self.api.put_node(node.name, labels)
            await node.kubelet.start()
        if self.gateway is not None:
            port = await self.gateway.start()
            self.api.put_service(NAMESPACE, GATEWAY_SERVICE, [("admin", GATEWAY_PORT)])
            self.api.put_endpoint_slice(
                NAMESPACE,
                f"{GATEWAY_SERVICE}-1",
                service=GATEWAY_SERVICE,
                endpoints=[("127.0.0.1", True)],
                ports=[("admin", port)],
            )
        for _ in range(self.wanted):  # the replicas there before the demo starts: Ready already
            self._create_pod(now=-(self.pending_s + self.loading_s + 1.0))
        self.tick(0.0, 0.0)

    async def stop(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
        if self.engines is not None:
            await self.engines.close()
        for node in self.nodes:
            await node.kubelet.stop()
        await self.api.stop()

    # ----- the deployment controller
    def _scaled(self, group_version: str, plural: str, namespace: str, name: str, replicas: int) -> None:
        if (group_version, plural, namespace, name) == ("apps/v1", "deployments", NAMESPACE, WORKLOAD):
            self.wanted = replicas

    def _create_pod(self, now: float) -> DemoPod | None:
        gpu = choose_gpu(self.gpus, self.pods)
        if gpu is None:
            return None  # unschedulable: every GPU is taken
        n = self._next
        self._next += 1
        pod = DemoPod(
            name=f"{WORKLOAD}-{n}",
            number=n,
            uid=str(uuidlib.uuid4()),
            container_id=secrets.token_hex(32),
            pid=40000 + n,
            gpu=gpu,
            created_at=now,
            running_at=now + self.pending_s,
            ready_at=now + self.pending_s + self.loading_s,
        )
        self.pods.append(pod)
        annotations: dict[str, str] = {}
        if self.engines is not None:
            annotations[ANNOTATION] = str(self.engines.create(pod.name))
        self._annotations[pod.name] = annotations
        api_pod = make_pod(
            NAMESPACE,
            pod.name,
            node=gpu.node,
            uid=pod.uid,
            labels=LABELS,
            phase="Pending",
            created_at=self.epoch + pod.created_at,
            annotations=annotations,
            limits=self._limits,
        )
        self.api.add_pod(api_pod)
        self._phases[pod.name] = "Pending"
        return pod

    def _delete_pod(self, pod: DemoPod, now: float) -> None:
        if self.real is not None:
            self.real.release(pod.name, now)
        self.pods.remove(pod)
        self.api.delete_pod(NAMESPACE, pod.name)
        kubelet = self._node(pod.gpu.node).kubelet
        kubelet.pods = [p for p in kubelet.pods if p.name != pod.name]
        self._phases.pop(pod.name, None)
        self._annotations.pop(pod.name, None)
        if self.engines is not None:
            self.engines.remove(pod.name)
        cgroup = self.proc_root / str(pod.pid)
        (cgroup / "cgroup").unlink(missing_ok=True)
        if cgroup.exists():
            cgroup.rmdir()

    def _node(self, name: str) -> DemoNode:
        return next(n for n in self.nodes if n.name == name)

    def _advance(self, pod: DemoPod, now: float) -> None:
        """Bring the API pod, the kubelet and ``/proc`` in line with the pod's phase at ``now``."""
        phase = pod.phase(now)
        if self._phases.get(pod.name) == phase:
            return
        if phase != "Pending" and self._phases.get(pod.name) == "Pending":
            node = self._node(pod.gpu.node)
            node.kubelet.pods.append(
                pod_resources(NAMESPACE, pod.name, {"main": [(GPU_RESOURCE, [pod.gpu.uuid])]})
            )
            proc = self.proc_root / str(pod.pid)
            proc.mkdir(exist_ok=True)
            (proc / "cgroup").write_text(f"0::/kubepods/besteffort/pod{pod.uid}/{pod.container_id}\n")
            if self.engines is not None:
                self.engines.start(pod.name)
        ready = phase == "Ready"
        if ready and self.first_ready_at is None:
            self.first_ready_at = pod.ready_at
        fresh = make_pod(
            NAMESPACE,
            pod.name,
            node=pod.gpu.node,
            uid=pod.uid,
            labels=LABELS,
            containers={"main": f"containerd://{pod.container_id}"},
            phase="Running",
            ready=ready,
            created_at=self.epoch + pod.created_at,
            ready_at=self.epoch + pod.ready_at if ready else None,
            annotations=self._annotations.get(pod.name),
            ip="127.0.0.1" if self.engines is not None else None,
            limits=self._limits,
        )

        def update(obj: dict[str, Any]) -> None:
            obj["status"] = fresh["status"]

        self.api.modify_pod(NAMESPACE, pod.name, update)
        self._phases[pod.name] = phase

    def tick(self, now: float, demand: float) -> None:
        """Reconcile the pods with the wanted replicas, advance their phases, write the GPUs' demand."""
        while len(self.pods) < self.wanted and self._create_pod(now) is not None:
            pass
        if len(self.pods) > self.wanted:
            for pod in pods_to_remove(self.pods, len(self.pods) - self.wanted, now):
                self._delete_pod(pod, now)
        for pod in self.pods:
            self._advance(pod, now)
        ready = sum(1 for p in self.pods if p.phase(now) == "Ready")

        def status(obj: dict[str, Any]) -> None:
            obj["status"] = {"replicas": len(self.pods), "readyReplicas": ready}

        deployment = self.api.objects[("apps/v1", "deployments", NAMESPACE, WORKLOAD)]
        if deployment.get("status") != {"replicas": len(self.pods), "readyReplicas": ready}:
            self.api.update_object("apps/v1", "deployments", NAMESPACE, WORKLOAD, status)
        self.utilization = spread_demand(demand, self.pods, now, self.capacity_per_replica)
        if self.engines is not None:  # the router decides each pod's share; its GPU is as busy as its batch
            ready_now = {p.name for p in self.pods if p.phase(now) == "Ready"}
            self._bind_real(now, ready_now)
            release = 0.0
            if self.gateway is not None:  # it holds what arrives while no pod is Ready
                release = self.gateway.advance(now, demand, bool(ready_now))
            routed = demand if ready_now or self.gateway is None else 0.0
            self.engines.route(routed, {p.name: p.name in ready_now for p in self.pods}, release)
            self.utilization = {
                pod: round(self.engines.busy_percent(pod), 3) if pod in ready_now else 0.0
                for pod in self.utilization
            }
        for node_name, doc in demand_documents(self.gpus, self.pods, self.utilization).items():
            text = json.dumps(doc, sort_keys=True)
            if self._documents.get(node_name) != text:
                _write_atomically(self._node(node_name).demand_file, text)
                self._documents[node_name] = text

    def _bind_real(self, now: float, ready: set[str]) -> None:
        """Once the real vLLM is healthy and no pod has it, give it to the pod Ready longest (the oldest: a
        scale-down removes the newest first), pointing the pod's annotation at the real server's port."""
        real = self.real
        if real is None or self.engines is None or not real.healthy:
            return
        real.note(now)
        if real.pod is not None:
            return
        pod = next((p for p in self.pods if p.name in ready), None)  # self.pods: oldest first
        if pod is None:
            return
        port = str(real.server.port)
        self._annotations[pod.name] = {**self._annotations.get(pod.name, {}), ANNOTATION: port}

        def annotate(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("annotations", {})[ANNOTATION] = port

        self.api.modify_pod(NAMESPACE, pod.name, annotate)
        self.engines.bind_real(pod.name, now)

    # ----- what the view and the timeline read
    def queue(self) -> float:
        """Requests waiting in the pods' engines now (NaN without engines)."""
        return self.engines.waiting() if self.engines is not None else math.nan

    def held(self) -> float:
        """Requests the gateway holds now (NaN without a gateway)."""
        return self.gateway.held if self.gateway is not None else math.nan

    def ready_count(self, now: float) -> int:
        return sum(1 for p in self.pods if p.phase(now) == "Ready")

    def gpu_table(self, now: float) -> Mapping[DemoGpu, tuple[DemoPod | None, float]]:
        """Every GPU: the pod on it (if any) and its utilization now."""
        by_gpu = {p.gpu: p for p in self.pods}
        out: dict[DemoGpu, tuple[DemoPod | None, float]] = {}
        for g in self.gpus:
            pod = by_gpu.get(g)
            out[g] = (pod, self.utilization.get(pod.name, 0.0) if pod is not None else 0.0)
        return out
