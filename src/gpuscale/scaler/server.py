"""The cluster scaler, wired: discovery → agent subscribers → cluster state → ExternalScaler (+ health,
reflection) on gRPC, and ``/metrics``, ``/healthz``, ``/readyz`` over HTTP."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from aiohttp import web
from prometheus_client import CollectorRegistry

from ..grpcserve import serve_grpc
from ..httpserve import add_self_metrics, make_app, serve_app
from ..lifecycle import cancel_tasks, within
from ..netaddr import parse_host_port, split_address
from ..scaling.metadata import MetadataCache
from ..scaling.profiles import ProfileSet
from ..tls import TlsFiles, server_credentials
from .discovery import Discovery, DnsDiscovery, StaticDiscovery, follow
from .ingest import WorkerPool
from .metrics import ScalerMetrics
from .requestpath import PathSettings, RequestPaths
from .service import SERVICE_NAME, ExternalScalerService, add_external_scaler
from .state import ClusterState
from .subscriber import AgentPool, SubscriberSettings
from .wire import ScaledObjectKey

__all__ = ["Scaler", "ScalerSettings", "TlsFiles", "server_credentials"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScalerSettings:
    agents: tuple[str, ...] = ()
    agents_dns: str | None = None  # NAME:PORT of the agents' headless Service
    dns_interval_s: float = 5.0
    grpc_address: str = "0.0.0.0:6001"
    metrics_address: str = "0.0.0.0:9401"
    kubeconfig: str | None = None
    in_cluster: bool = False
    tls: TlsFiles | None = None
    history_s: float = 120.0
    ready_grace_s: float = 10.0  # ready after this even if some discovered agents never answered
    api_check_s: float = 10.0  # seconds between checks that the Kubernetes API answers (/readyz)
    subscriber: SubscriberSettings = field(default_factory=SubscriberSettings)
    ingest_workers: int = 0  # > 0: read the agent streams in that many child processes (scaler/ingest.py)
    event_loop: str = "auto"  # of the ingest workers
    log_format: str = "text"  # of the ingest workers (their level is the scaler's)
    request_path: PathSettings = field(default_factory=PathSettings)  # reading triggers' requestPath


class Scaler:
    """``start`` binds (port 0 picks a free port: ``grpc_port``, ``metrics_port``); ``stop`` ends it all.
    ``api`` (a ``kube._http.KubeApi``) is used as given, else made from the settings, else none:
    then workload scope needs ``podSelector``."""

    def __init__(
        self,
        settings: ScalerSettings,
        *,
        profiles: ProfileSet | None = None,
        api: Any = None,
        discovery: Discovery | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        add_self_metrics(self.registry, "scaler")
        self.metrics = ScalerMetrics(self.registry)
        self.state = ClusterState(history_s=settings.history_s)
        subscriber = _with_history(settings.subscriber, settings.history_s)
        self.pool: AgentPool | WorkerPool
        if settings.ingest_workers > 0:
            self.pool = WorkerPool(
                self.state,
                subscriber,
                self.metrics,
                workers=settings.ingest_workers,
                event_loop=settings.event_loop,
                log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower(),
                log_format=settings.log_format,
            )
        else:
            self.pool = AgentPool(self.state, subscriber, self.metrics)
        self.metadata = MetadataCache(profiles)
        self._api = api
        self._own_api = False
        self._discovery = discovery
        self._clock = clock
        self.service: ExternalScalerService | None = None
        self.grpc_port = 0
        self.metrics_port = 0
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._started = 0.0
        self._discovered = False
        self._view_complete = False
        self._api_problem: str | None = None
        self._resolver: Any = None  # kube.workloads.WorkloadResolver, when there is an API
        self._pods: Any = None  # kube.workload_pods.WorkloadPodLister, likewise
        self.request_paths: RequestPaths | None = None
        self.metrics.bind(
            agents_connected=lambda: self.pool.connected,
            agents_known=lambda: len(self.pool.addresses),
            stale_nodes=lambda: self.state.stale_nodes,
            workloads=lambda: self.state.cached_selections,
        )

    async def start(self) -> None:
        s = self.settings
        self._started = time.monotonic()
        resolver = None
        pods = None
        if self._api is None and (s.kubeconfig is not None or s.in_cluster):
            from ..kube.pods import api_client_from

            self._api, self._own_api = await api_client_from(s.kubeconfig, s.in_cluster), True
        if self._api is not None:
            from ..kube.workload_pods import WorkloadPodLister
            from ..kube.workloads import WorkloadResolver

            resolver = self._resolver = WorkloadResolver(self._api)
            pods = self._pods = WorkloadPodLister(self._api)
        else:
            log.warning(
                "no Kubernetes API (--kubeconfig or in-cluster): workload scope works only with podSelector "
                "in the trigger metadata, and requestPath (a Service) cannot be read"
            )
        self.request_paths = RequestPaths(s.request_path, self._api, metrics=self.metrics, clock=self._clock)
        self.service = ExternalScalerService(
            self.state,
            metadata=self.metadata,
            resolver=resolver,
            metrics=self.metrics,
            clock=self._clock,
            view_problem=self.view_problem,
            pods=pods,
            request_paths=self.request_paths,
        )
        if isinstance(self.pool, WorkerPool):
            await self.pool.start()
        await self._start_grpc(self.service)
        await self._start_http()
        discovery = self._discovery = self._discovery or self._discovery_from_settings()
        interval = s.dns_interval_s if isinstance(discovery, DnsDiscovery) else 30.0
        self._tasks.append(asyncio.create_task(follow(discovery, self._apply_discovery, interval)))
        if self._api is not None:
            from ..kube.pods import api_server

            self._api_problem = f"the Kubernetes API at {api_server(self._api)} has not answered yet"
            self._tasks.append(
                asyncio.create_task(self._check_api(self._api), name="the Kubernetes API check")
            )

    async def _check_api(self, api: Any) -> None:
        """Ask the Kubernetes API every ``api_check_s`` whether it answers: ``/readyz`` is not ready while it
        does not (workload scope without ``podSelector`` cannot find its pods). One warning when it stops
        answering, naming the server, one line when it answers again."""
        from ..kube.pods import api_server, api_unreachable

        server = api_server(api)
        every = self.settings.api_check_s
        down = False
        while True:
            why = await api_unreachable(api, timeout=min(5.0, every))
            if why is None:
                if down:
                    log.info("the Kubernetes API at %s answers again", server)
                self._api_problem, down = None, False
            else:
                self._api_problem = f"the Kubernetes API at {server} cannot be reached: {why}"
                if not down:
                    log.warning(
                        "the Kubernetes API at %s cannot be reached (%s): not ready until it can; "
                        "ScaledObjects without podSelector cannot find their pods meanwhile (check "
                        "--kubeconfig, or the in-cluster service account and network policy)",
                        server,
                        why,
                    )
                down = True
            await asyncio.sleep(every)

    def _discovery_from_settings(self) -> Discovery:
        if self.settings.agents_dns:
            host, port = parse_host_port(self.settings.agents_dns, "--agents-dns")
            return DnsDiscovery(host, port)
        return StaticDiscovery(self.settings.agents)

    def _apply_discovery(self, addresses: set[str]) -> None:
        self.pool.reconcile(addresses)
        self._discovered = True
        self.state.discovery_note = None if addresses or self._discovery is None else self._discovery.note

    async def stop(self) -> None:
        """Stop everything; each step bounded (``gpuscale.lifecycle``), so a stop never hangs."""
        await cancel_tasks(self._tasks)
        self._tasks.clear()
        await within(self.pool.close(), 5.0, "the agent streams")
        if self._grpc is not None:
            await within(self._grpc.stop(grace=0.5), 3.0, "the scaler's gRPC server")
        if self._http is not None:
            await within(self._http.cleanup(), 3.0, "the scaler's HTTP server")
        if self.request_paths is not None:
            await within(self.request_paths.close(), 4.0, "the request path readers")
        # no call is left: the API lookups they started (shared, shielded) run on, and end before it closes
        for lookups, what in ((self._resolver, "the ScaledObject lookups"), (self._pods, "the pod lists")):
            if lookups is not None:
                await within(lookups.close(), 3.0, what)
        if self._own_api and self._api is not None:
            await within(self._api.close(), 3.0, "the Kubernetes API client")

    async def _start_grpc(self, service: ExternalScalerService) -> None:
        self._grpc, self.grpc_port = await serve_grpc(
            self.settings.grpc_address,
            [(SERVICE_NAME, lambda server: add_external_scaler(server, service))],
            tls=self.settings.tls,
        )

    async def _start_http(self) -> None:
        app = make_app(
            self.registry,
            healthy=lambda: None,
            ready=self.ready_problem,
            ready_detail=self.agents_detail,
            routes=[("/explain", self._explain)],
        )
        self._http, self.metrics_port = await serve_app(app, *split_address(self.settings.metrics_address))

    async def _explain(self, request: web.Request) -> web.Response:
        """``GET /explain?name=N&namespace=NS&m=key=value&m=...``: ``ExternalScalerService.explain`` as JSON
        (``gpuscale query --explain``)."""
        assert self.service is not None
        q = request.query
        metadata: dict[str, str] = {}
        for item in q.getall("m", []):
            name, sep, value = item.partition("=")
            if not sep:
                return web.json_response({"error": f'"m" value "{item}" must be KEY=VALUE'}, status=400)
            metadata[name] = value
        ref = ScaledObjectKey(q.get("name", ""), q.get("namespace", ""), metadata)
        return web.json_response(await self.service.explain(ref))

    def agents_detail(self, most: int = 20) -> str:
        """For ``/readyz``: how many agents are followed and, by address, those that are not, with the newest
        failure (ready or not: one unreachable agent does not take a replica out of KEDA's rotation)."""
        known, connected = len(self.pool.addresses), self.pool.connected
        if connected >= known:
            return f"{connected} of {known} agents connected"
        not_connected = getattr(self.pool, "not_connected", None)
        if not_connected is None:  # ingest workers: the addresses are in their logs
            return f"{connected} of {known} agents connected; the ingest workers' logs name the others"
        lines = [f"{connected} of {known} agents connected; not connected:"]
        items = list(not_connected().items())
        for address, error in items[:most]:
            lines.append(f"  {address}: {error or 'connecting (no attempt has failed yet)'}")
        if len(items) > most:
            lines.append(f"  and {len(items) - most} more")
        return "\n".join(lines)

    def ready_problem(self) -> str | None:
        """Ready once every discovered agent has sent its complete state (or ``ready_grace_s`` after start)
        and, where the scaler has one, while the Kubernetes API answers. Liveness (``/healthz``) is neither:
        restarting the scaler mends neither."""
        problems = [p for p in (self.view_problem(), self._api_problem) if p is not None]
        return "; ".join(problems) if problems else None

    def view_problem(self) -> str | None:
        """Why the scaler's view of the cluster is not complete yet, or ``None``. Until every discovered agent
        has sent its complete state, or ``ready_grace_s`` has passed since start (those that have not are
        given up), ``GetMetrics`` and ``IsActive`` answer ``UNAVAILABLE``: a restarted scaler never answers
        from part of the cluster."""
        if self._view_complete:
            return None  # complete once: from then on a node going away is the missing-pod rule's
        if not self._discovered:
            return "agents not discovered yet"
        grace = self.settings.ready_grace_s
        if time.monotonic() - self._started >= grace:
            self._view_complete = True
            return None
        known, connected = len(self.pool.addresses), self.pool.connected
        if connected < known:
            return f"{connected} of {known} agents have sent their state (waiting at most {grace:g} s)"
        incomplete = self.state.incomplete_nodes
        if incomplete:
            return (
                f"the agents of {', '.join(incomplete)} have not read their pods yet (waiting at most "
                f"{grace:g} s)"
            )
        self._view_complete = True
        return None


def _with_history(settings: SubscriberSettings, history_s: float) -> SubscriberSettings:
    from dataclasses import replace

    return replace(settings, history_s=history_s)
