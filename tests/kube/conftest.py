from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.incluster import InClusterApi
from gpuscale.kube.pods import api_client_from
from tests.fakes.apiserver import FakeApiServer, write_kubeconfig
from tests.scaler.certs import make_pki

TOKEN = "s3cret"


@pytest.fixture(params=["kubeconfig", "in-cluster"])
def connection(request: pytest.FixtureRequest) -> str:
    """Every test of the API client runs twice: through a kubeconfig (kubernetes_asyncio), and as in a pod
    (the service account's token and CA, over TLS, without kubernetes_asyncio)."""
    mode: str = request.param
    return mode


@pytest.fixture
async def apiserver(connection: str, tmp_path: Path) -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer(token=TOKEN)
    context = None
    if connection == "in-cluster":
        (tmp_path / "pki").mkdir()
        pki = make_pki(tmp_path / "pki")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki.server_cert, pki.server_key)
    await fake.start(context)
    try:
        yield fake
    finally:
        await fake.stop()


def service_account(tmp_path: Path, token: str) -> Path:
    """The files a pod's service account mount holds, for the fake API server's CA."""
    directory = tmp_path / "serviceaccount"
    directory.mkdir(exist_ok=True)
    (directory / "token").write_text(token + "\n")
    (directory / "ca.crt").write_bytes((tmp_path / "pki" / "ca.pem").read_bytes())
    return directory


@pytest.fixture
def connect(
    connection: str, apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """``connect(token=...)``: a client of ``apiserver`` the way ``connection`` says."""

    async def make(token: str = TOKEN) -> KubeApi:
        if connection == "in-cluster":
            host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
            monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
            monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
            return InClusterApi.from_environment(service_account(tmp_path, token))
        kubeconfig = write_kubeconfig(tmp_path / f"kubeconfig-{token}", apiserver.url, token=token)
        return await api_client_from(str(kubeconfig), in_cluster=False)

    return make


@pytest.fixture
async def api(connect: Callable[..., Any]) -> AsyncIterator[KubeApi]:
    client = await connect()
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def running(watcher: Any) -> AsyncIterator[Any]:
    """``watcher.run()`` as a task for the block, then cancelled (and awaited: it must end by cancellation)."""
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def noop_sleep(seconds: float) -> None:
    """A watcher's backoff, cut to a millisecond."""
    await asyncio.sleep(0.001)
