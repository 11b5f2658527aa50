"""The one stand-in left: the kubelet's PodResources API of a kwok node (kwok offers none).

A device plugin hands a container its GPUs when the kubelet admits the pod; here, the pods the real
scheduler bound to ``node`` (read from the real API server every ``interval`` seconds) get free mock GPU
UUIDs in index order, the same UUIDs ``gpuscale agent --backend mock --node-name NODE --mock-gpus N``
reports, and keep them until they are gone or finished. The socket is served by ``gpuscale.demo.kubelet``'s
``LocalKubelet`` (the generated servicer on a unix socket), the demo's and the unit tests' stand-in.

Run one per node: ``python -m gpuscale.controlplane kubelet --kubeconfig K --node N --gpus 4 --socket S``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..backends.mock import MockBackend, MockConfig, find_model
from ..demo.kubelet import LocalKubelet, pod_resources
from .client import KubeClient

__all__ = ["GpuAllocator", "mock_gpu_uuids", "serve_kubelet"]

log = logging.getLogger(__name__)
GPU_RESOURCE = "nvidia.com/gpu"


def mock_gpu_uuids(node: str, count: int, *, seed: int = 0) -> tuple[str, ...]:
    """The UUIDs the agent's mock backend reports for ``node`` (seeded by the node's name and the seed)."""
    backend = MockBackend(MockConfig(gpus=count, model=find_model("h100"), node=node, seed=seed))
    backend.open()
    try:
        return tuple(d.uuid for d in backend.devices() if not d.is_mig)
    finally:
        backend.close()


def _gpu_requests(pod: Mapping[str, Any]) -> list[tuple[str, int]]:
    out = []
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources", {})
        n = res.get("limits", {}).get(GPU_RESOURCE) or res.get("requests", {}).get(GPU_RESOURCE)
        if n is not None and int(n) > 0:
            out.append((c["name"], int(n)))
    return out


class GpuAllocator:
    """Pod UID → {container: GPU UUIDs}, kept across rounds as a device plugin's checkpoint keeps it."""

    def __init__(self, uuids: Sequence[str]) -> None:
        self.uuids = tuple(uuids)
        self.by_pod: dict[str, tuple[str, str, dict[str, list[str]]]] = {}  # uid -> (ns, name, containers)

    def update(self, pods: Sequence[Mapping[str, Any]]) -> None:
        live = {}
        for p in pods:
            if p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            live[p["metadata"]["uid"]] = p
        for uid in [u for u in self.by_pod if u not in live]:
            del self.by_pod[uid]
        taken = {u for _, _, cs in self.by_pod.values() for ids in cs.values() for u in ids}
        for uid, p in live.items():
            if uid in self.by_pod:
                continue
            wants = _gpu_requests(p)
            if not wants:
                continue
            free = [u for u in self.uuids if u not in taken]
            if sum(n for _, n in wants) > len(free):
                log.warning(
                    "pod %s/%s asks for more GPUs than are free",
                    p["metadata"]["namespace"],
                    p["metadata"]["name"],
                )
                continue
            containers: dict[str, list[str]] = {}
            for cname, n in wants:
                containers[cname], free = free[:n], free[n:]
                taken.update(containers[cname])
            self.by_pod[uid] = (p["metadata"]["namespace"], p["metadata"]["name"], containers)

    def pod_resources(self) -> list[Any]:
        return [
            pod_resources(ns, name, {c: [(GPU_RESOURCE, ids)] for c, ids in cs.items()})
            for ns, name, cs in self.by_pod.values()
        ]


async def serve_kubelet(
    client: KubeClient, node: str, gpus: int, socket: Path, *, interval: float = 0.5, seed: int = 0
) -> None:
    """Serve PodResources on ``socket`` for ``node`` until cancelled."""
    alloc = GpuAllocator(mock_gpu_uuids(node, gpus, seed=seed))
    kubelet = LocalKubelet(socket)
    await kubelet.start()
    log.info("serving PodResources for node %s on %s (%d GPUs)", node, socket, gpus)
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
    try:
        while True:
            try:
                pods = (await asyncio.to_thread(client.get, path)).get("items", [])
                alloc.update(pods)
                kubelet.pods = alloc.pod_resources()
            except Exception as e:  # the API server away for a moment: keep the last assignments
                log.warning("cannot list the pods of node %s: %s", node, e)
            await asyncio.sleep(interval)
    finally:
        await kubelet.stop()
