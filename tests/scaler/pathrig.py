"""Stand-ins for the request-path tests: an Envoy-like gateway over real HTTP on loopback (its counter and
gauge set by the test, and ways to break it), and the fake API server's Service, pods and EndpointSlices that
lead to it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.apiserver import FakeApiServer, make_pod, pod_ref, select, target_pods

ENVOY_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Gateway:
    """One replica of a gateway in front of cluster ``llm``: ``arrived`` (``envoy_cluster_upstream_rq_total``)
    and ``held`` (``envoy_cluster_upstream_rq_pending_active``), per cluster; ``mode`` how it answers: ``ok``,
    ``slow`` (``delay`` seconds first), ``garbage`` (a read family's line that does not parse), ``huge`` (a
    body of ``huge_bytes``), ``500``."""

    arrived: dict[str, float] = field(default_factory=lambda: {"llm": 0.0})
    held: dict[str, float] = field(default_factory=lambda: {"llm": 0.0})
    mode: str = "ok"
    delay: float = 2.0
    huge_bytes: int = 256 * 1024
    port: int = 0
    requests: int = 0
    _runner: web.AppRunner | None = None

    def body(self) -> str:
        lines = ["# TYPE envoy_cluster_upstream_rq_total counter"]
        lines += [
            f'envoy_cluster_upstream_rq_total{{envoy_cluster_name="{c}"}} {v:g}'
            for c, v in self.arrived.items()
        ]
        lines.append("# TYPE envoy_cluster_upstream_rq_pending_active gauge")
        lines += [
            f'envoy_cluster_upstream_rq_pending_active{{envoy_cluster_name="{c}"}} {v:g}'
            for c, v in self.held.items()
        ]
        lines.append("envoy_server_live{} 1")
        return "\n".join(lines) + "\n"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.mode == "slow":
            await asyncio.sleep(self.delay)
        if self.mode == "500":
            return web.Response(status=500, text="upstream connect error")
        if self.mode == "garbage":
            return web.Response(
                text='envoy_cluster_upstream_rq_total{envoy_cluster_name="llm"} banana\n',
                headers={"Content-Type": ENVOY_TEXT},
            )
        if self.mode == "huge":
            response = web.StreamResponse(headers={"Content-Type": ENVOY_TEXT})  # chunked: no Content-Length
            await response.prepare(request)
            line = b"# " + b"x" * 1000 + b"\n"
            for _ in range(self.huge_bytes // len(line) + 1):
                await response.write(line)
            await response.write_eof()
            return response
        return web.Response(text=self.body(), headers={"Content-Type": ENVOY_TEXT})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/stats/prometheus", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def serve_gateway(
    apiserver: FakeApiServer,
    namespace: str,
    gateways: Iterable[Gateway | int],
    *,
    service: str = "gateway",
    ready: bool | None = None,
    selector: bool = True,
) -> None:
    """Service ``namespace/service`` (port ``http`` 9090) and one EndpointSlice per gateway (a ``Gateway``,
    or a bare port nothing listens on) on 127.0.0.1 at its port, each ``ready``. ``selector``: as the
    EndpointSlice controller makes them, the Service selects ``app=<service>`` and each gateway is a pod
    of the namespace at 127.0.0.1 (every pod on loopback, each its port), its endpoint's ``targetRef``;
    else a Service without a selector and slices written by hand (no ``targetRef``)."""
    labels = {"app": service}
    svc = apiserver.put_service(namespace, service, [("http", 9090)])
    if selector:
        select(svc, labels)
    for name in [n for (ns, n) in apiserver.endpoint_slices if ns == namespace]:
        apiserver.delete_endpoint_slice(namespace, name)
    for name in [
        n for (ns, n), p in apiserver.pods.items() if ns == namespace and p["metadata"]["labels"] == labels
    ]:
        apiserver.delete_pod(namespace, name)
    for i, g in enumerate(gateways):
        port = g.port if isinstance(g, Gateway) else g
        name = f"{service}-{i}"
        slice_ = apiserver.put_endpoint_slice(
            namespace,
            name,
            service=service,
            endpoints=[("127.0.0.1", ready)],
            ports=[("http", port)],
        )
        if selector:
            apiserver.add_pod(make_pod(namespace, name, node="gateway-node", labels=labels, ip="127.0.0.1"))
            target_pods(slice_, [pod_ref(namespace, name)])
