"""The scaler and its Kubernetes API: ``/readyz`` is not ready while the API cannot be reached (one warning
naming the server, one line when it answers again) nor while it refuses the credentials, and ``/healthz``
stays live; a shutdown with a ScaledObject lookup in flight ends it before closing the client, so nothing
is logged with a traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp import web

from gpuscale.scaler.server import Scaler, ScalerSettings
from tests.fakes.apiserver import FakeApiServer, write_kubeconfig
from tests.poll import until
from tests.scaler.conftest import KedaClient

LOGGER = "gpuscale.scaler.server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get(scaler: Scaler, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{scaler.metrics_port}{path}") as r,
    ):
        return r.status, await r.text()


async def _scaler(kubeconfig: Path) -> Scaler:
    scaler = Scaler(
        ScalerSettings(
            grpc_address="127.0.0.1:0",
            metrics_address="127.0.0.1:0",
            kubeconfig=str(kubeconfig),
            ready_grace_s=0.1,
            api_check_s=0.2,
        )
    )
    await scaler.start()
    return scaler


@asynccontextmanager
async def _api(port: int, slow: bool = False) -> AsyncIterator[None]:
    """An API server on 127.0.0.1:``port`` answering ``/version``; with ``slow``, a ScaledObject GET that
    takes a minute."""

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "36", "gitVersion": "v1.36.3"})

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(60)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/version", version)
    if slow:
        app.router.add_get("/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/{name}", hang)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


def _warnings(caplog: pytest.LogCaptureFixture, server: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and server in r.getMessage()
    ]


async def test_readiness_follows_whether_the_api_can_be_reached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = _free_port()
    server = f"http://127.0.0.1:{port}"
    scaler = await _scaler(write_kubeconfig(tmp_path / "kubeconfig", server))
    try:

        async def says(status: int, text: str) -> bool:
            got = await _get(scaler, "/readyz")
            return got[0] == status and text in got[1]

        # nothing listens: not ready, saying why; alive
        unreachable = f"the Kubernetes API at {server} cannot be reached: Cannot connect to host"
        await until(lambda: says(503, unreachable), what="/readyz names the unreachable API")
        assert await _get(scaler, "/healthz") == (200, "ok\n")
        await asyncio.sleep(0.7)  # several more checks: still one warning
        (line,) = _warnings(caplog, server)
        assert line.startswith(f"the Kubernetes API at {server} cannot be reached (Cannot connect to host")
        assert "not ready until it can" in line

        # the API comes up: ready, and said so once
        async with _api(port):
            await until(lambda: says(200, "ok"), what="ready once the API answers")
            answers = [r.getMessage() for r in caplog.records if r.getMessage().endswith("answers again")]
            assert answers == [f"the Kubernetes API at {server} answers again"]

        # it goes away: not ready again, a second warning
        await until(lambda: says(503, unreachable), what="not ready once the API is gone")
        assert len(_warnings(caplog, server)) == 2
        assert (await _get(scaler, "/healthz"))[0] == 200
    finally:
        await scaler.stop()


async def test_an_api_that_refuses_the_credentials_is_not_ready(
    tmp_path: Path, apiserver: FakeApiServer
) -> None:
    scaler = await _scaler(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token="wrong"))
    try:

        async def refused() -> bool:
            status, text = await _get(scaler, "/readyz")
            return status == 503 and "it refuses the credentials" in text

        await until(refused, what="/readyz says the API refuses the credentials")
    finally:
        await scaler.stop()


async def test_a_reachable_api_is_ready(tmp_path: Path, apiserver: FakeApiServer) -> None:
    """The stand-in API server answers ``/version`` 404: an answer, so the API is reached."""
    scaler = await _scaler(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token=apiserver.token))
    try:

        async def ready() -> bool:
            return (await _get(scaler, "/readyz"))[0] == 200

        await until(ready, what="ready")
    finally:
        await scaler.stop()


async def test_a_shutdown_during_a_lookup_logs_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, keda: Callable[[int], KedaClient]
) -> None:
    """KEDA asks about a ScaledObject whose lookup the API is slow to answer, and the scaler stops: the
    lookup (shared between calls, so not cancelled with the call) ends before the API client closes."""
    caplog.set_level(logging.DEBUG)
    port = _free_port()
    async with _api(port, slow=True):
        scaler = await _scaler(write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}"))
        client = keda(scaler.grpc_port)
        await until(lambda: scaler.ready_problem() is None, what="ready")
        call = asyncio.ensure_future(client.code_of(client.metrics({"targetValue": "60"})))
        assert scaler._resolver is not None
        await until(lambda: bool(scaler._resolver._inflight), what="the lookup in flight")
        await scaler.stop()
        code, _ = await asyncio.wait_for(call, 5)
        assert code is not grpc.StatusCode.OK
        await asyncio.sleep(0.2)
        gc.collect()  # a task whose exception was never retrieved is logged when it is collected
        await asyncio.sleep(0)
    tracebacks = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info or r.levelno >= 40]
    assert tracebacks == []
