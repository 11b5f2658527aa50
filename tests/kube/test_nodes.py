"""NodeLabelWatcher against FakeApiServer, both ways (``connection`` in conftest.py): the labels that pool scope
selects on, read by each agent from its own Node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.nodes import NodeLabelWatcher
from gpuscale.kube.pods import NodePodWatcher
from tests.fakes.apiserver import FakeApiServer, make_pod
from tests.poll import until

from .conftest import running

NODE = "gpu-node-1"


async def _noop_sleep(seconds: float) -> None:
    await asyncio.sleep(0.001)


@pytest.fixture
async def watcher(api: KubeApi) -> AsyncIterator[NodeLabelWatcher]:
    async with running(NodeLabelWatcher(api, NODE, sleep=_noop_sleep)) as w:
        yield w


async def test_reads_its_own_node_and_follows_label_changes(apiserver: FakeApiServer, api: KubeApi) -> None:
    apiserver.put_node(NODE, {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "inference"})
    apiserver.put_node("other-node", {"pool": "training"})
    w = NodeLabelWatcher(api, NODE, sleep=_noop_sleep)
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert dict(w.labels) == {
            "kubernetes.io/hostname": NODE,
            "nvidia.com/gpu.product": "NVIDIA-H200",
            "pool": "inference",
        }
        assert any(f"/api/v1/nodes?fieldSelector=metadata.name%3D{NODE}" in r for r in apiserver.requests)
        await until(lambda: apiserver.watch_count == 1)
        version = w.version

        # Another node's change is not ours; a status update of ours changes no label: neither counts.
        apiserver.put_node("other-node", {"pool": "inference"})
        apiserver.modify_node(NODE, lambda n: n["status"].update(images=[{"names": ["x"]}]))
        apiserver.put_node(NODE, {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "inference", "spot": ""})
        await until(lambda: w.version > version)
        assert w.version == version + 1
        assert w.labels["spot"] == ""
        assert w.labels["pool"] == "inference"

        apiserver.delete_node(NODE)
        await until(lambda: not w.labels)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_node_not_there_yet(apiserver: FakeApiServer, watcher: NodeLabelWatcher) -> None:
    """A node object that appears after the agent started (or was re-created) is picked up by the watch."""
    await asyncio.wait_for(watcher.synced.wait(), 5)
    assert dict(watcher.labels) == {}
    await until(lambda: apiserver.watch_count == 1)
    apiserver.put_node(NODE, {"pool": "a"})
    await until(lambda: watcher.labels.get("pool") == "a")


async def test_410_relists_and_pod_events_do_not_leak(apiserver: FakeApiServer, api: KubeApi) -> None:
    """Pods and nodes share one resourceVersion sequence; each watch sees only its own kind."""
    apiserver.put_node(NODE, {"pool": "a"})
    nodes = NodeLabelWatcher(api, NODE, sleep=_noop_sleep)
    pods = NodePodWatcher(api, NODE, sleep=_noop_sleep)
    tasks = [asyncio.create_task(nodes.run()), asyncio.create_task(pods.run())]
    try:
        await asyncio.wait_for(nodes.synced.wait(), 5)
        await asyncio.wait_for(pods.synced.wait(), 5)
        await until(lambda: apiserver.watch_count == 2)
        apiserver.add_pod(make_pod("ml", "a", node=NODE, labels={"pool": "b"}))
        await until(lambda: pods.pod("ml", "a") is not None)
        assert nodes.labels["pool"] == "a"

        # The node watch last saw a resourceVersion older than the pod's: after a compaction it is gone.
        apiserver.compact()
        apiserver.close_watches()
        await until(lambda: nodes.lists == 2)
        await until(lambda: apiserver.watch_count == 2)
        assert pods.lists == 1
        apiserver.put_node(NODE, {"pool": "c"})
        await until(lambda: nodes.labels.get("pool") == "c")
        assert nodes.failures == 0
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_forbidden_is_retried_and_says_what_is_stale(
    apiserver: FakeApiServer, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Without RBAC for nodes (an old chart), the watcher retries and logs what pool scope loses."""
    apiserver.put_node(NODE, {"pool": "a"})
    apiserver.fail_next = [403]
    w = NodeLabelWatcher(api, NODE, sleep=_noop_sleep)
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert w.failures == 1
        assert w.labels["pool"] == "a"
        assert any(
            f"node {NODE}" in r.getMessage() and "403" in r.getMessage() and "pool scope" in r.getMessage()
            for r in caplog.records
        )
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
