from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale.kube.pods import api_client_from
from tests.fakes.apiserver import FakeApiServer, write_kubeconfig


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    fake = FakeApiServer(token="s3cret")
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def api(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[ApiClient]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token="s3cret")
    client = await api_client_from(str(kubeconfig), in_cluster=False)
    try:
        yield client
    finally:
        await client.close()


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` every few milliseconds until it holds; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
