"""The end-to-end tier: the real control plane and KEDA (``gpuscale.controlplane``), built from Go modules
into the versioned cache, with gpuscale's agents and scaler on it. A build or start failure is an error of
the tests that need it, never a skip. ``scripts/test`` builds first (minutes on a fresh machine), so no
test's timeout has to cover a cold build; the fixtures then find the cache warm.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscale.controlplane import Binaries, ControlPlane, GpuNode, build
from gpuscale.controlplane.stack import GpuStack
from tests.tiers import mark_tier

NODES = (GpuNode("gpu-node-1", 4), GpuNode("gpu-node-2", 4))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, "e2e")


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return build()


@pytest.fixture(scope="session")
def plane(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    # the HPA syncs every second here (default 15 s) to keep the tier short; the benchmark runs the defaults
    with ControlPlane(binaries, tmp_path_factory.mktemp("cp"), nodes=NODES, hpa_sync_period="1s") as p:
        yield p


@pytest.fixture(scope="session")
def stack(plane: ControlPlane) -> Iterator[GpuStack]:
    s = GpuStack(plane)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def gpus(stack: GpuStack) -> Iterator[GpuStack]:
    """The stack with every GPU idle before and after the test, and every agent running after it."""
    stack.set_load(0.0)
    yield stack
    stack.set_load(0.0)
    for name, a in stack.agents.items():
        if a.agent is None:
            stack.start_agent(name)
    stack.plane.check()
