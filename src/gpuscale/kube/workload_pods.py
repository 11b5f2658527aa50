"""A workload's GPU pods as the Kubernetes API knows them, so the scaler counts them without asking the
agents: an agent that is gone, hung or restarting cannot hide its node's pods, and a scaler restarted while
one hangs still knows them.

One ``LIST /api/v1/namespaces/{ns}/pods?labelSelector=…`` per workload, at most every ``ttl_s`` seconds (15:
the HPA's own sync period), shared by the calls in between; refreshed in the background of the call that
finds it due, so no call waits on the API once a first list is in. A pod counts when it is Running, not
being deleted (the HPA ignores those), bound to a node, and asks for a GPU (a GPU resource limit or
request, or a ResourceClaim: ``kube.pods.wants_gpu``); each with its readiness (``kube.pods.readiness``:
Ready or still starting, when it was scheduled and became Ready), which the scaler takes where the pod's
agent cannot say, and learns the workload's cold start from. A failing API leaves the last list in place for
``max_age_s``, then none (the agents' view alone), and says so once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ._http import KubeApi, get_json
from .errors import KubeApiError
from .pods import readiness, wants_gpu
from .workloads import _cancel

__all__ = ["ApiGpuPod", "WorkloadPodLister"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ApiGpuPod:
    """A Running GPU pod of the workload as the list had it: ``ready``, ``scheduled_at``, ``ready_at`` as
    ``kube.pods.readiness`` reads them (Unix seconds; ``None``: not known)."""

    name: str  # namespace/name
    node: str
    ready: bool | None = None
    scheduled_at: float | None = None
    ready_at: float | None = None


class WorkloadPodLister:
    def __init__(
        self,
        api: KubeApi,
        *,
        ttl_s: float = 15.0,
        max_age_s: float = 120.0,
        request_timeout_s: float = 5.0,
        maxsize: int = 4096,
        extra_resource_names: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl_s, self.max_age_s, self.request_timeout_s = ttl_s, max_age_s, request_timeout_s
        self.maxsize = maxsize
        self.extra = frozenset(extra_resource_names)
        self._clock = clock
        self._lists: OrderedDict[tuple[str, str], tuple[float, tuple[ApiGpuPod, ...]]] = OrderedDict()
        self._replicas: dict[tuple[str, str], int] = {}
        self._tried: dict[tuple[str, str], float] = {}
        self._inflight: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._warned = -1e18
        self.lists = 0

    def cached(self, namespace: str, selector: str) -> tuple[ApiGpuPod, ...] | None:
        """The last list of this workload's GPU pods, or ``None`` (never listed, or older than max_age_s)."""
        entry = self._lists.get((namespace, selector))
        if entry is None or self._clock() - entry[0] > self.max_age_s:
            return None
        return entry[1]

    def replicas(self, namespace: str, selector: str) -> int | None:
        """How many of the workload's pods the last list had that are not finished nor being deleted (Pending
        ones too): what the target's ``status.replicas`` counts, which the HPA's AverageValue rule divides
        by. ``None`` as ``cached``."""
        if self.cached(namespace, selector) is None:
            return None
        return self._replicas.get((namespace, selector))

    async def refresh(self, namespace: str, selector: str) -> None:
        """List again when due (``ttl_s`` since the last try). The first list of a workload is waited for;
        later ones run in the background."""
        key = (namespace, selector)
        now = self._clock()
        if now - self._tried.get(key, -1e18) < self.ttl_s or key in self._inflight:
            first = key not in self._lists and key in self._inflight
            if first:
                await asyncio.shield(self._inflight[key])
            return
        self._tried[key] = now
        if (
            len(self._tried) > 2 * self.maxsize
        ):  # workloads whose list never succeeds: forget the oldest tries
            for old in sorted(self._tried, key=self._tried.__getitem__)[: self.maxsize]:
                del self._tried[old]
        task = asyncio.ensure_future(self._list(namespace, selector))
        self._inflight[key] = task
        task.add_done_callback(lambda _: self._inflight.pop(key, None))
        if key not in self._lists:
            await asyncio.shield(task)

    async def close(self) -> None:
        """End the lists in flight, before the API client closes (see ``WorkloadResolver.close``)."""
        await _cancel(self._inflight.values())

    async def _list(self, namespace: str, selector: str) -> None:
        key = (namespace, selector)
        query = [("labelSelector", selector)] if selector else []
        try:
            body = await get_json(
                self.api, f"/api/v1/namespaces/{namespace}/pods", query, timeout=self.request_timeout_s
            )
        except KubeApiError as e:
            if self._clock() - self._warned >= 60.0:
                self._warned = self._clock()
                log.warning(
                    "pods of %s (%s) cannot be listed (%s): the workloads' GPU pods are what the agents "
                    "last reported",
                    namespace,
                    selector or "every pod",
                    e,
                )
            return
        self.lists += 1
        pods: list[ApiGpuPod] = []
        replicas = 0
        for item in body.get("items") or []:
            if not isinstance(item, dict):
                continue
            meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
            if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
                continue
            replicas += 1
            if status.get("phase") != "Running" or not spec.get("nodeName"):
                continue
            if wants_gpu(item, self.extra):
                ready, scheduled_at, ready_at = readiness(item)
                name = f"{namespace}/{meta.get('name')}"
                pods.append(ApiGpuPod(name, str(spec["nodeName"]), ready, scheduled_at, ready_at))
        self._lists.pop(key, None)
        self._lists[key] = (self._clock(), tuple(sorted(pods, key=lambda p: p.name)))
        self._replicas[key] = replicas
        while len(self._lists) > self.maxsize:
            old, _ = self._lists.popitem(last=False)
            self._tried.pop(old, None)
            self._replicas.pop(old, None)
