"""The HTTP endpoints of the agent and the scaler: ``/metrics`` (Prometheus text or OpenMetrics, as asked),
``/healthz``, ``/readyz``. Served from the event loop with aiohttp; a scrape only formats what is in memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .errors import ListenError
from .netaddr import any_address_socket, join_host_port

__all__ = ["add_self_metrics", "make_app", "serve_app"]


def add_self_metrics(registry: CollectorRegistry, component: str) -> None:
    """``gpuscale_build_info{version, python, component}`` (always 1: which build runs where) and
    prometheus_client's process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
    ``process_open_fds``…, read from ``/proc`` at scrape time; nothing where there is no ``/proc``)."""
    import platform

    from prometheus_client import Info, ProcessCollector

    from . import __version__

    ProcessCollector(registry=registry)
    Info("gpuscale_build", "The gpuscale build that serves these series.", registry=registry).info(
        {"version": __version__, "python": platform.python_version(), "component": component}
    )


def make_app(
    registry: CollectorRegistry,
    *,
    healthy: Callable[[], str | None],
    ready: Callable[[], str | None],
    ready_detail: Callable[[], str] | None = None,
    routes: Sequence[tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] = (),
) -> web.Application:
    """``healthy``/``ready`` return ``None`` when fine, else the reason (served with status 503).
    ``ready_detail``: more lines for ``/readyz``'s body, ready or not (e.g. the agents not followed)."""

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    def probe(
        check: Callable[[], str | None], detail: Callable[[], str] | None = None
    ) -> Callable[[web.Request], object]:
        async def handler(request: web.Request) -> web.Response:
            problem = check()
            more = detail() if detail is not None else ""
            text = ("ok" if problem is None else problem) + "\n" + (more.rstrip("\n") + "\n" if more else "")
            return web.Response(status=200 if problem is None else 503, text=text)

        return handler

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(healthy))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(ready, ready_detail))  # type: ignore[arg-type]
    for path, handler in routes:
        app.router.add_get(path, handler)
    return app


async def serve_app(
    app: web.Application, host: str, port: int, *, flag: str = "--metrics-address"
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (port 0: a free one). Returns the runner (``cleanup()`` to stop) and
    the bound port. ``ListenError`` (naming ``flag``) when the address cannot be listened on."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site: web.BaseSite
    try:
        if host in ("", "::"):  # every address family, on one port: one dual-stack socket, as gRPC binds [::]
            sock = any_address_socket(port)
            site = web.SockSite(runner, sock)
            bound = sock.getsockname()[1]
        else:
            site = web.TCPSite(runner, host, port)
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ListenError(flag, join_host_port(host, port), e.strerror or str(e)) from e
    except BaseException:
        await runner.cleanup()
        raise
    if isinstance(site, web.TCPSite):
        sockets = getattr(site._server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
    return runner, bound
