"""The agent, wired: sampling loop → state → (/metrics, Watch), plus the attribution and pod-label loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import grpc
import grpc.aio
from aiohttp import web
from prometheus_client import CollectorRegistry

from .._proto import agent_pb2, agent_pb2_grpc
from ..backends.base import Backend
from ..backends.errors import BackendError
from ..grpcserve import serve_grpc
from ..httpserve import add_self_metrics, make_app, serve_app
from ..kube.errors import KubeError
from ..kube.podresources import PodResourcesClient
from ..lifecycle import cancel_tasks, within
from ..model import Assignment, ContainerRef, EngineMissing, PodInfo
from ..netaddr import split_address
from .attribution import attribute
from .exporter import AgentMetrics, GpuCollector
from .owners import OwnerResolver
from .sampler import Sampler
from .settings import AgentSettings
from .state import NodeState
from .watch import WatchService

__all__ = ["Agent", "DraDeviceSource", "NodeLabelSource", "PodSource"]

if TYPE_CHECKING:
    from .engines.collector import EngineCollector

log = logging.getLogger(__name__)

# an NVIDIA GPU or MIG device UUID, as NVML and the device plugin write it
_UUID_FORM = re.compile(r"(?:GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class NodeLabelSource(Protocol):
    """This node's labels (the Kubernetes API watcher of its Node implements it)."""

    @property
    def version(self) -> int: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    async def run(self) -> None: ...


class DraDeviceSource(Protocol):
    """What names the GPU of each DRA device of this node (the watcher of its ResourceSlices): ``synced`` once
    read; ``note`` says why there is nothing to read (the API server serves no DRA)."""

    synced: asyncio.Event
    note: str | None

    @property
    def devices(self) -> Mapping[str, Sequence[str]]: ...

    async def run(self) -> None: ...


class PodSource(Protocol):
    """This node's pods (the Kubernetes API watcher implements it)."""

    @property
    def version(self) -> int: ...

    def snapshot(self) -> Mapping[tuple[str, str], PodInfo]: ...

    def container(self, container_id: str) -> ContainerRef | None: ...

    @property
    def synced(self) -> asyncio.Event:
        """Set once the first complete pod list is in."""

    async def run(self) -> None: ...


class Agent:
    """One node's agent. ``start`` binds its servers (port 0 picks a free port: see ``grpc_port`` and
    ``metrics_port``); ``stop`` ends everything."""

    def __init__(
        self,
        settings: AgentSettings,
        backend: Backend,
        *,
        pods: PodSource | None = None,
        node: NodeLabelSource | None = None,
        dra: DraDeviceSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = uuidlib.uuid4().hex[:12]
        self.registry = CollectorRegistry()
        add_self_metrics(self.registry, "agent")
        self.metrics = AgentMetrics(self.registry)
        self.state = NodeState(settings.node_name, settings.history_length)
        self.sampler = Sampler(backend, read_timeout=settings.read_timeout, clock=clock)
        self.pods = pods
        self._pods_seen = -1
        self._attributed_once = True  # start() says otherwise while the kubelet is unread
        self.node = node
        self._node_seen = -1
        self.dra = dra
        self._owners = OwnerResolver(settings.proc_root, pods)
        self._clock = clock
        self.registry.register(
            GpuCollector(
                lambda: self.state.snapshot,
                hostname_label=settings.hostname_label,
                backend=backend.name,
                clock=clock,
                xid_of=getattr(backend, "xid_last", None),
            )
        )
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._kubelet: PodResourcesClient | None = None
        self.grpc_port = 0
        self.metrics_port = 0
        self._last_round_end = 0.0
        self._open_problem: str | None = None  # why the backend could not be opened yet
        self._unmatched_said: set[tuple[str, str]] = set()  # device ids that name no GPU, logged once
        self._undescribed_said: set[str] = set()  # DRA devices no ResourceSlice describes, logged once
        self._rediscover_for: str | None = None  # a device the kubelet names that the backend does not list
        self._rediscover_tried: set[str] = set()  # ids a listing was made for: not again for them
        self._rediscovered_at = -math.inf
        self.extra_services: list[Callable[[grpc.aio.Server], None]] = []
        self.engines: EngineCollector | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        try:
            self.state.set_devices(await self.sampler.open())
        except BackendError as e:  # e.g. the driver is not loaded yet: serve (not ready) and keep trying
            self._open_problem = str(e)
            log.warning(
                "GPU backend %s cannot be opened (%s): not ready until it can; retrying",
                self.sampler.backend.name,
                e,
            )
        else:
            log.info(
                "node %s: %d GPUs on backend %s",
                s.node_name,
                len(self.state.devices),
                self.sampler.backend.name,
            )
        # Until the pod list is synced and the kubelet read once, the Watch stream says its view is
        # incomplete: a scaler then keeps what it knew of this node's pods (an agent restart changes nothing)
        self._attributed_once = not os.path.exists(s.kubelet_socket)
        self.state.set_complete(self._clock(), self._view_complete())
        await self._start_grpc()
        await self._start_http()
        self._tasks.append(asyncio.create_task(self._loop("sampling", self._sample_forever)))
        self._tasks.append(asyncio.create_task(self._loop("attribution", self._attribute_forever)))
        if self.pods is not None:
            self._tasks.append(asyncio.create_task(self._loop("pod watch", self.pods.run)))
            self._tasks.append(asyncio.create_task(self._loop("engine scrape", self._engines_forever)))
        if self.node is not None:
            self._tasks.append(asyncio.create_task(self._loop("node watch", self.node.run)))
        if self.dra is not None:
            self._tasks.append(asyncio.create_task(self._loop("ResourceSlice watch", self.dra.run)))

    async def stop(self) -> None:
        """Stop everything; each step bounded (``gpuscale.lifecycle``), so a stop never hangs."""
        await cancel_tasks(self._tasks)
        self._tasks.clear()
        if self.engines is not None:
            await within(self.engines.close(), 3.0, "the engine scrapes")
        if self._grpc is not None:
            await within(self._grpc.stop(grace=0.5), 3.0, "the agent's gRPC server")
        if self._http is not None:
            await within(self._http.cleanup(), 3.0, "the agent's HTTP server")
        if self._kubelet is not None:
            await within(self._kubelet.close(), 3.0, "the kubelet channel")
        self.sampler.close()

    async def _start_grpc(self) -> None:
        watch = WatchService(
            self.state,
            agent_id=self.agent_id,
            interval=self.settings.interval,
            history_seconds=self.settings.history_seconds,
            metrics=self.metrics,
            clock=self._clock,
        )
        name = agent_pb2.DESCRIPTOR.services_by_name["Agent"].full_name
        self._grpc, self.grpc_port = await serve_grpc(
            self.settings.grpc_address,
            [(name, lambda server: agent_pb2_grpc.add_AgentServicer_to_server(watch, server))],
            tls=self.settings.tls,
            extra=self.extra_services,
        )

    async def _start_http(self) -> None:
        app = make_app(self.registry, healthy=self._health_problem, ready=self._ready_problem)
        self._http, self.metrics_port = await serve_app(app, *split_address(self.settings.metrics_address))

    def _health_problem(self) -> str | None:
        if self.state.rounds == 0:
            return None  # starting
        stalled = self._clock() - self._last_round_end
        limit = 3 * self.settings.interval + self.settings.read_timeout
        return None if stalled <= limit else f"the sampling loop has not finished a round for {stalled:.0f}s"

    def _ready_problem(self) -> str | None:
        if self._open_problem is not None:
            return f"the GPU backend is not open yet: {self._open_problem}"
        return None if self.state.rounds > 0 else "no GPU has been sampled yet"

    async def _loop(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop forever: a crash is logged and the loop restarts after a pause."""
        while True:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the %s loop failed; restarting it in 1s", name)
                await asyncio.sleep(1.0)

    # -- collect → transform -------------------------------------------------------------------------
    async def _open_backend(self) -> None:
        """Retry opening the backend (backoff from one interval, doubling to 30 s) until it opens."""
        backoff = self.settings.interval
        while self._open_problem is not None:
            await asyncio.sleep(backoff)
            backoff = min(30.0, backoff * 2)
            try:
                self.state.set_devices(await self.sampler.open())
            except BackendError as e:
                self._open_problem = str(e)
                log.debug("GPU backend %s still cannot be opened: %s", self.sampler.backend.name, e)
            else:
                self._open_problem = None
                log.info("GPU backend %s opened: %d GPUs", self.sampler.backend.name, len(self.state.devices))

    async def _engines_forever(self) -> None:
        """Once per sampling interval, read the inference engine of each GPU pod of this node that serves
        one (``agent.engines``): only pods the kubelet assigned one of this node's GPUs to are scraped."""
        from .engines.collector import EngineCollector
        from .engines.discovery import pods_holding_gpus
        from .engines.scrape import ScrapeSettings

        interval = self.settings.interval
        if self.engines is None:
            self.engines = EngineCollector(
                ScrapeSettings.for_interval(interval),
                self.registry,
                history_length=self.settings.history_length,
                clock=self._clock,
            )
        while True:
            started = time.monotonic()
            holders = pods_holding_gpus(self.state.assignments)
            results = await self.engines.scrape_round(self.state.pods, holders)
            history = {key: self.engines.history(key) for key in results}
            missing = {key: r for key, r in results.items() if isinstance(r, EngineMissing)}
            self.state.set_engines(self._clock(), history, missing)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _sample_forever(self) -> None:
        await self._open_backend()
        interval = self.settings.interval
        next_at = time.monotonic()
        while True:
            await self.sample_once()
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow read): skip the missed ticks instead of bursting
                next_at = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    async def sample_once(self) -> None:
        if self._rediscover_for is not None:  # between rounds: no read of this loop is running
            await self._rediscover()
        result = await self.sampler.sample_round()
        if result.reopened:
            self.metrics.backend_reopens.inc()
            self.state.set_devices(self.sampler.devices)
            with contextlib.suppress(KubeError):
                await self._refresh_attribution()
        self.metrics.round_duration.observe(result.duration)
        self.metrics.samples.inc(len(result.samples))
        by_uuid = {d.uuid: d for d in self.state.devices}
        for uuid, err in result.errors.items():
            dev = by_uuid.get(uuid)
            self.metrics.read_errors.labels(str(dev.index) if dev else "", uuid, err.kind).inc()
            if self.state.errors.get(uuid) is None:
                log.warning(
                    "GPU %s read failed (%s): serving its last good sample, marked with its age", uuid, err
                )
        for uuid in result.samples:
            if self.state.errors.get(uuid) is not None:
                log.info("GPU %s reads again", uuid)
        if self.pods is not None and self.pods.version != self._pods_seen:
            self._pods_seen = self.pods.version
            self.state.set_pods(self._clock(), self.pods.snapshot())
        if not self.state.complete:
            self.state.set_complete(self._clock(), self._view_complete())
        if self.node is not None and self.node.version != self._node_seen:
            self._node_seen = self.node.version
            self.state.set_node_labels(self._clock(), self.node.labels)
        owners = self._owners.resolve(self.state, result.samples)
        self.state.record_round(self._clock(), result.samples, result.errors, owners)
        self._last_round_end = self._clock()

    async def _rediscover(self) -> None:
        why, self._rediscover_for = self._rediscover_for, None
        if why is None or any(self.state.errors.get(d.uuid) is not None for d in self.state.devices):
            # a GPU failing its reads may fail a new open too, and then every GPU of the node goes dark
            return
        self._rediscovered_at = time.monotonic()
        self._rediscover_tried.add(why)
        before = {d.uuid for d in self.state.devices}
        if not await self.sampler.rediscover():
            return
        self.metrics.backend_reopens.inc()
        self.state.set_devices(self.sampler.devices)
        added = len({d.uuid for d in self.sampler.devices} - before)
        log.log(
            logging.INFO if added else logging.DEBUG,
            "GPU devices listed again (the kubelet named %s, which the backend did not list): %d devices, "
            "%d new",
            why,
            len(self.sampler.devices),
            added,
        )
        with contextlib.suppress(KubeError):
            await self._refresh_attribution()

    def _want_rediscovery(self, unmatched: Sequence[Assignment], dra: Mapping[str, Sequence[str]]) -> None:
        """An NVIDIA GPU or MIG UUID the kubelet (or a claim's ResourceSlice) names and the backend does not
        list: its layout changed since it was opened (MIG reconfigured). The devices are listed again, at
        most every ``rediscover_interval``, and once per such id: an id a new listing did not find (a GPU
        hidden from the agent's container) does not make it list them again and again."""
        if len(self._rediscover_tried) > 4096:
            self._rediscover_tried.clear()
        for a in unmatched:
            ids = dra.get(a.dra.key, ()) if a.dra is not None else (a.device_id.split("::", 1)[0],)
            tried = self._rediscover_tried
            named = next((i for i in ids if _UUID_FORM.fullmatch(i) and i not in tried), None)
            if named is not None:
                if time.monotonic() - self._rediscovered_at >= self.settings.rediscover_interval:
                    self._rediscover_for = named
                return

    async def _attribute_forever(self) -> None:
        s = self.settings
        warned = False
        while True:
            if os.path.exists(s.kubelet_socket):
                warned = False
                try:
                    await self._refresh_attribution()
                except KubeError as e:
                    self.metrics.attribution_refreshes.labels("error").inc()
                    log.warning("GPU-to-pod attribution not refreshed (%s); keeping the last one", e)
            elif not warned:
                warned = True
                log.warning(
                    "kubelet socket %s does not exist: GPUs are not attributed to pods until it does",
                    s.kubelet_socket,
                )
            await asyncio.sleep(s.attribution_interval)

    def _view_complete(self) -> bool:
        """The pod list synced (or none is watched) and the kubelet read once (or there is none)."""
        pods_synced = self.pods is None or self.pods.synced.is_set()
        return pods_synced and self._attributed_once

    async def _refresh_attribution(self) -> None:
        if self._kubelet is None:
            self._kubelet = PodResourcesClient(
                str(self.settings.kubelet_socket), extra_resource_names=self.settings.extra_resource_names
            )
        assignments = await self._kubelet.list()
        self.metrics.attribution_refreshes.labels("ok").inc()
        dra = self.dra.devices if self.dra else {}
        result = attribute(self.state.devices, assignments, dra)
        unmatched = {(a.resource_name, a.device_id) for a in result.unmatched}
        for resource, device_id in sorted(unmatched - self._unmatched_said):  # each id once, not every 5 s
            log.warning(
                "the kubelet assigned %s device %r, which names no GPU this agent reads: not attributed "
                "(a MIG layout changed? the agent lists its devices again, at most every %gs)",
                resource,
                device_id,
                self.settings.rediscover_interval,
            )
        self._unmatched_said = unmatched
        self._want_rediscovery(result.unmatched, dra)
        undescribed = {a.dra.key: a.dra.claim for a in result.undescribed if a.dra is not None}
        if self.dra is None:
            why = " (ResourceSlices are read only with the Kubernetes API)"
        elif self.dra.note is not None:
            why = f" ({self.dra.note})"
        elif not self.dra.synced.is_set():
            undescribed, why = {}, ""  # the slices are not read yet: too early to tell
        else:
            why = ""
        for key in sorted(undescribed.keys() - self._undescribed_said):
            log.warning(
                "the kubelet prepared DRA device %s (claim %s), which no ResourceSlice of node %s describes: "
                "not attributed%s",
                key,
                undescribed[key],
                self.settings.node_name,
                why,
            )
        self._undescribed_said = set(undescribed)
        self._attributed_once = True
        if self.state.set_assignments(self._clock(), dict(result.by_device)):
            log.info(
                "GPU attribution changed: %d of %d GPUs held by pods",
                len(self.state.assignments),
                len(self.state.devices),
            )
