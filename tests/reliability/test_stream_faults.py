"""Agent stream faults: an agent killed and restarted, partitioned (its stream open but silent), slow.

Three nodes, one GPU each, one workload per node and one spanning two nodes. The scaler must mark exactly the
affected node stale, answer ``UNAVAILABLE`` only for the workloads whose every GPU is on it (a workload with
GPUs elsewhere answers from those), and recover without a restart. Every test runs twice: streams read in
the scaler's own process, and in an ingest worker process (``--ingest-workers``), which must not change
what KEDA sees.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
import pytest

from gpuscale.scaler.ingest import WorkerPool, shard_of
from gpuscale.scaler.server import Scaler
from tests.poll import until

from .conftest import Cluster, KedaClient
from .proxy import PausableProxy

STALE_AFTER = "0.8"


def md(app: str) -> dict[str, str]:
    """The trigger of workload ``app``; ``wab`` selects by a label the pods of ``wa`` and ``wb`` both carry."""
    selector = "all=ab" if app == "wab" else f"app={app}"
    return {"podSelector": selector, "targetValue": "60", "window": "0", "staleAfter": STALE_AFTER}


EXPECTED = {"wa": 40.0, "wb": 70.0, "wc": 20.0, "wab": 2 * 55.0}  # wab: avg(40, 70) times 2 pods


@dataclass
class Fleet:
    cluster: Cluster
    scaler: Scaler
    client: KedaClient
    proxies: dict[str, PausableProxy]

    async def values(self) -> dict[str, float | grpc.StatusCode]:
        out: dict[str, float | grpc.StatusCode] = {}
        for app in EXPECTED:
            try:
                out[app] = await self.client.value(md(app))
            except grpc.aio.AioRpcError as e:
                out[app] = e.code()
        return out

    def stale(self) -> set[str]:
        return {n.name for n in self.scaler.state.nodes() if not n.connected}

    def reconnects(self, reason: str) -> float:
        value = self.scaler.metrics.agent_reconnects.labels(reason)._value.get()
        return float(value)


@pytest.fixture(params=[0, 1], ids=["in-process", "ingest-worker"])
async def fleet(
    cluster: Cluster, keda: Callable[[int], KedaClient], request: pytest.FixtureRequest
) -> AsyncIterator[Fleet]:
    for name, load in (("node-a", 40), ("node-b", 70), ("node-c", 20)):
        await cluster.node(name, f"constant:{load}", gpus=1)
    cluster.add_pod("default", "wa-0", "node-a", [0], {"app": "wa", "all": "ab"})
    cluster.add_pod("default", "wb-0", "node-b", [0], {"app": "wb", "all": "ab"})
    cluster.add_pod("default", "wc-0", "node-c", [0], {"app": "wc"})
    proxies = {}
    for name, node in cluster.nodes.items():  # every agent behind a proxy the test can pause
        proxies[name] = PausableProxy(node.agent.grpc_port)
        await proxies[name].start()
    scaler = await cluster.scaler(
        kube=False, agents=tuple(p.address for p in proxies.values()), ingest_workers=request.param
    )
    f = Fleet(cluster, scaler, keda(scaler.grpc_port), proxies)
    await until(lambda: _all_ok(f), what="every workload answers")
    try:
        yield f
    finally:
        for p in proxies.values():
            await p.stop()


async def _all_ok(f: Fleet) -> bool:
    return await f.values() == EXPECTED


async def _wait_stale(f: Fleet) -> None:
    await asyncio.sleep(float(STALE_AFTER) + 0.1)


async def test_agent_killed_then_restarted(fleet: Fleet) -> None:
    f = fleet
    await f.cluster.kill("node-a")
    await until(lambda: f.stale() == {"node-a"}, what="node-a, and only node-a, stale")
    await _wait_stale(f)
    assert await f.values() == {
        "wa": grpc.StatusCode.UNAVAILABLE,  # every GPU of it is on node-a
        "wb": 70.0,
        "wc": 20.0,
        # wa-0 (node-a) is a missing pod: wb-0 alone (70, target 60) asks to scale up; with wa-0 at 0 the
        # ratio is 70 / 120, a flip, so the answer keeps the current count (60 x 2): no scale-down
        "wab": 120.0,
    }
    await f.cluster.node("node-a", "constant:40", gpus=1)  # back on the same port
    await until(lambda: _all_ok(f), what="recovered without a scaler restart")
    assert f.stale() == set()


async def test_partition_stream_open_but_silent(fleet: Fleet) -> None:
    f = fleet
    f.proxies["node-b"].pause()  # nothing moves; the TCP connection and the Watch stream stay open
    await until(lambda: f.stale() == {"node-b"}, timeout=5, what="silence detected")
    assert f.reconnects("silent") >= 1
    await _wait_stale(f)
    # wab: wa-0 alone (40 of 60) asks to scale down; wb-0, missing, counts as the target: (40 + 60) / 120 is
    # outside the tolerance, so 100 (the HPA: ceil(100 / 60) = 2, the replicas it has)
    assert await f.values() == {"wa": 40.0, "wb": grpc.StatusCode.UNAVAILABLE, "wc": 20.0, "wab": 100.0}
    f.proxies["node-b"].resume()
    await until(lambda: _all_ok(f), what="recovered after the partition healed")
    assert f.stale() == set()


async def test_slow_link_within_the_silence_budget_is_not_stale(fleet: Fleet) -> None:
    f = fleet
    f.proxies["node-c"].delay = 0.2  # every chunk 0.2 s late; silence limit is 6 intervals (0.6 s)
    before = f.reconnects("silent")
    await asyncio.sleep(2.0)
    assert f.stale() == set()
    assert f.reconnects("silent") == before
    assert await f.values() == EXPECTED  # samples ~0.2-0.4 s old: still fresh (staleAfter 0.8 s)


async def test_stream_is_active_of_other_workloads_survives_a_dead_node(fleet: Fleet) -> None:
    f = fleet
    activity = {**md("wc"), "activationValue": "10"}
    stream = f.client.stub.StreamIsActive(f.client.ref(activity), timeout=10)
    assert (await stream.read()).result is True  # type: ignore[attr-defined]
    await f.cluster.kill("node-a")
    await until(lambda: f.stale() == {"node-a"}, what="node-a stale")
    await _wait_stale(f)
    read = asyncio.ensure_future(stream.read())
    await asyncio.sleep(0.3)
    assert not read.done()  # nothing changed for wc: no message, and the stream is still open
    assert await f.client.value(md("wc")) == 20.0
    stream.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read


@pytest.mark.parametrize("fleet", [1], ids=["ingest-worker"], indirect=True)
async def test_ingest_worker_killed_is_restarted_and_its_nodes_are_stale_meanwhile(fleet: Fleet) -> None:
    f = fleet
    assert isinstance(f.scaler.pool, WorkerPool)
    worker = f.scaler.pool.workers[0]
    assert worker.proc is not None
    worker.proc.kill()
    # every node it followed is marked stale at once (the scaler does not wait for the silence timeout) ...
    await until(lambda: f.stale() == {"node-a", "node-b", "node-c"}, timeout=2, what="all nodes stale")
    # ... and a new worker follows them again; nothing else restarted
    await until(lambda: f.stale() == set(), what="the restarted worker's streams")
    await _wait_stale(f)  # every sample now is from the new worker's streams
    await until(lambda: _all_ok(f), what="answers from the restarted worker")
    assert f.scaler.pool.restarts == 1
    assert worker.proc.returncode is None


def test_shards_are_stable_and_spread() -> None:
    addresses = [f"10.0.{k // 250}.{k % 250}:6000" for k in range(1000)]
    counts = [0, 0, 0, 0]
    for a in addresses:
        counts[shard_of(a, 4)] += 1
    assert min(counts) > 200  # 250 each if perfectly even
    # the same in another process with another string-hash seed: a restarted scaler, or a second replica
    code = (
        "from gpuscale.scaler.ingest import shard_of; "
        "print([shard_of(f'10.0.{k // 250}.{k % 250}:6000', 4) for k in range(1000)])"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert out.stdout.strip() == str([shard_of(a, 4) for a in addresses])
