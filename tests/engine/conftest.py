"""The engine tier: a real vLLM (its CPU build, ``gpuscale.vllmcpu``) serving a tiny local model, scraped by
gpuscale's real agent and answered on by its real scaler. An install or start failure is an error of the
tests that need it, never a skip: ``scripts/test`` installs first (minutes on a fresh machine), so no test's
timeout covers the install; the fixtures find the cache warm and start one server for the session (about a
minute on 2 cores).

The server runs 4 sequences at once in a KV cache of 8 blocks of 16 tokens (``--num-gpu-blocks-override``),
so a handful of requests fill the cache and a few more queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscale.vllmcpu import Engine, VllmServer, build
from tests.scaler.conftest import (  # noqa: F401  (fixtures, re-exported for this directory)
    Cluster,
    KedaClient,
    apiserver,
    cluster,
    keda,
)
from tests.tiers import mark_tier

KV_BLOCKS = 8
MAX_NUM_SEQS = 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "engine")


@pytest.fixture(scope="session")
def vllm_engine() -> Engine:
    return build()


@pytest.fixture(scope="session")
def vllm(vllm_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """One real vLLM for the session. A test that stops or restarts it leaves it running again."""
    server = VllmServer.start(
        vllm_engine, tmp_path_factory.mktemp("vllm"), kv_blocks=KV_BLOCKS, max_num_seqs=MAX_NUM_SEQS
    )
    yield server
    server.stop()


@pytest.fixture
def real_vllm(vllm: VllmServer) -> Iterator[VllmServer]:
    """The session's vLLM, healthy before the test, and running again after it."""
    if not vllm.healthy():
        vllm.restart()
    yield vllm
    if not vllm.healthy():
        vllm.restart()
