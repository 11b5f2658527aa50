"""The demo's stand-in gateway: every request for the workload arrives here first, as it would at an Envoy in
front of it, and the counts are served as Envoy's admin serves them, so the scaler reads them as a request
path (``requestPathFormat: envoy``).

Why: at zero replicas, and while every pod of a wake loads, the workload's engines cannot say its demand. The
gateway sees every request the moment it arrives; the scaler reads that and wakes the workload at the
replicas the demand needs.

How (``advance``, each tick of the demo's clock, with the demand now and whether a pod is Ready):

* With a Ready pod a request goes on to the router (``engines.least_loaded``) and counts in
  ``envoy_cluster_upstream_rq_total``.
* With none (zero replicas, or every pod loading) it counts in ``envoy_cluster_upstream_cx_none_healthy``,
  as Envoy counts a request for a cluster without a healthy endpoint, and is held: the gauge
  ``envoy_cluster_upstream_rq_pending_active`` says how many wait. Envoy itself answers such a request 503;
  the stand-in holds it as the KEDA HTTP add-on's interceptor and Knative's activator do, up to
  ``hold_timeout_s`` (then it times out: ``envoy_cluster_upstream_rq_timeout``), so the wake loses nothing
  and the gauge shows what waits.
* Once a pod is Ready every held request is handed on at once (``advance`` returns how many): the router
  gives them to the Ready pods' engines, which queue what they cannot run yet.

Requests are a fluid here, as in the engines: ``demand * seconds`` per tick. The exposition writes whole
requests (counters rounded down, the gauge to the nearest), with the label ``envoy_cluster_name`` (the
cluster, ``requestPathMatch``): the names and label ``gpuscale.scaler.gateways`` reads for ``envoy``. It is
served on ``GET /stats/prometheus`` (Envoy's admin path) of a loopback port.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from aiohttp import web

__all__ = ["ADMIN_PATH", "DemoGateway", "GatewayStats"]

ADMIN_PATH = "/stats/prometheus"
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class GatewayStats:
    """What the gateway saw, for the demo's summary. Times are the demo's seconds; ``None``: not yet."""

    arrived: float  # every request, routed or held
    first_arrival: float | None
    max_held: float
    longest_wait: float  # the longest a held request waited before a pod took it (or it timed out)
    timed_out: float
    released: float  # held requests handed to a pod once one was Ready


class DemoGateway:
    """The gateway in front of cluster ``cluster`` (the workload). ``advance`` moves it to a time; ``start``
    serves its exposition on a free loopback port."""

    def __init__(self, cluster: str, hold_timeout_s: float = 60.0) -> None:
        self.cluster = cluster
        self.hold_timeout_s = hold_timeout_s
        self.routed = 0.0  # envoy_cluster_upstream_rq_total
        self.none_healthy = 0.0  # envoy_cluster_upstream_cx_none_healthy
        self.timeouts = 0.0  # envoy_cluster_upstream_rq_timeout
        self.released = 0.0
        self.max_held = 0.0
        self.longest_wait = 0.0
        self.first_arrival: float | None = None
        self.scrapes = 0
        self._held: collections.deque[tuple[float, float]] = collections.deque()  # (arrived at, requests)
        self._at: float | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def held(self) -> float:
        """Requests held now, waiting for a Ready pod."""
        return math.fsum(n for _, n in self._held)

    def advance(self, now: float, demand: float, ready: bool) -> float:
        """``demand`` requests/s arrived since the last call, up to ``now`` (seconds); ``ready``: a pod of
        the workload is Ready now. Returns the held requests handed on now: all of them once a pod is Ready
        (the router sends them with the demand), else 0."""
        arriving = max(0.0, demand) * (now - self._at) if self._at is not None else 0.0
        self._at = now
        if arriving > 0 and self.first_arrival is None:
            self.first_arrival = now
        while self._held and now - self._held[0][0] > self.hold_timeout_s:  # their clients gave up
            since, n = self._held.popleft()
            self.timeouts += n
            self.longest_wait = max(self.longest_wait, now - since)
        if ready:
            self.routed += arriving
            if not self._held:
                return 0.0
            self.longest_wait = max(self.longest_wait, now - self._held[0][0])
            handed = self.held
            self._held.clear()
            self.released += handed
            return handed
        if arriving > 0:
            self.none_healthy += arriving
            self._held.append((now, arriving))
            self.max_held = max(self.max_held, self.held)
        return 0.0

    def stats(self) -> GatewayStats:
        return GatewayStats(
            arrived=self.routed + self.none_healthy,
            first_arrival=self.first_arrival,
            max_held=self.max_held,
            longest_wait=self.longest_wait,
            timed_out=self.timeouts,
            released=self.released,
        )

    def exposition(self) -> str:
        """The counters as Envoy's ``/stats/prometheus`` writes them."""
        label = f'{{envoy_cluster_name="{self.cluster}"}}'
        families = (
            ("envoy_cluster_upstream_rq_total", "counter", math.floor(self.routed)),
            ("envoy_cluster_upstream_cx_none_healthy", "counter", math.floor(self.none_healthy)),
            ("envoy_cluster_upstream_rq_timeout", "counter", math.floor(self.timeouts)),
            ("envoy_cluster_upstream_rq_pending_active", "gauge", round(self.held)),
        )
        lines = []
        for name, kind, value in families:
            lines += [f"# TYPE {name} {kind}", f"{name}{label} {value}"]
        return "\n".join(lines) + "\n"

    # ----- serving
    async def _handle(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        return web.Response(text=self.exposition(), headers={"Content-Type": _CONTENT_TYPE})

    async def start(self) -> int:
        """Serve ``GET /stats/prometheus`` on a free loopback port; return the port."""
        app = web.Application()
        app.router.add_get(ADMIN_PATH, self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
