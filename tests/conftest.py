"""Suite-wide settings.

All async tests and fixtures share one event loop (pyproject: asyncio_default_*_loop_scope = "session"), and
one gRPC channel stays open for the whole run. gRPC's asyncio layer initialises itself for an event loop
when its first object is created and shuts down (joining its poller thread) when the last one is gone;
cycling that for every test makes the shutdown hang now and then. Keeping it up once avoids the cycle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc.aio
import pytest_asyncio


@pytest_asyncio.fixture(scope="session", autouse=True, loop_scope="session")
async def _grpc_aio_kept_alive() -> AsyncIterator[None]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never used for a call
    yield
    await channel.close()
