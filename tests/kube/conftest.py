from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.kubelet import FakeKubelet


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
    fake = FakeKubelet(socket_dir / "kubelet.sock")
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()
