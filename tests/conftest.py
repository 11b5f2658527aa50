"""Suite-wide settings.

All async tests and fixtures share one event loop (pyproject: asyncio_default_*_loop_scope = "session"), and
one gRPC channel stays open for the whole run. gRPC's asyncio layer initialises itself for an event loop
when its first object is created and shuts down (joining its poller thread) when the last one is gone;
cycling that for every test makes the shutdown hang now and then. Keeping it up once avoids the cycle.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc.aio
import pytest
import pytest_asyncio

from tests.fakes.kubelet import FakeKubelet


@pytest_asyncio.fixture(scope="session", autouse=True, loop_scope="session")
async def _grpc_aio_kept_alive() -> AsyncIterator[None]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never used for a call
    yield
    await channel.close()


@pytest.fixture
def socket_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for unix sockets: tmp_path, unless its path is too long for ``sun_path`` (108 bytes)."""
    if len(str(tmp_path)) < 80:
        yield tmp_path
        return
    short = Path(tempfile.mkdtemp(prefix="gpuscale-"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[FakeKubelet]:
    """A stand-in kubelet serving the PodResources API on ``socket_dir/kubelet.sock``."""
    fake = FakeKubelet(socket_dir / "kubelet.sock")
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()
