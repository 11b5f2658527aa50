"""NodePodWatcher against FakeApiServer through the real kubernetes_asyncio client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale.kube.errors import KubeApiError, KubeConfigError
from gpuscale.kube.pods import NodePodWatcher, WatchSettings, api_client_from, strip_runtime_prefix
from gpuscale.model import ContainerRef, PodInfo
from tests.fakes.apiserver import FakeApiServer, make_pod, write_kubeconfig

from .conftest import until

NODE = "gpu-node-1"
CID_A = "containerd://" + "a" * 64
CID_B = "cri-o://" + "b" * 64


class FakeSleep:
    """Records backoff delays instead of sleeping (yields once so other tasks run)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0.001)


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
async def watcher(api: ApiClient, sleep: FakeSleep) -> AsyncIterator[NodePodWatcher]:
    w = NodePodWatcher(api, NODE, WatchSettings(page_size=2), sleep=sleep)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def _relabel(**labels: str) -> Any:
    def change(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"] = dict(labels)

    return change


async def test_list_then_follow_adds_modifies_deletes(
    apiserver: FakeApiServer, api: ApiClient, sleep: FakeSleep
) -> None:
    apiserver.add_pod(
        make_pod("ml", "a", node=NODE, uid="uid-a", labels={"app": "a"}, containers={"main": CID_A})
    )
    apiserver.add_pod(make_pod("ml", "b", node=NODE, uid="uid-b"))
    apiserver.add_pod(make_pod("ml", "c", node=NODE, uid="uid-c"))
    apiserver.add_pod(make_pod("ml", "elsewhere", node="other-node"))
    w = NodePodWatcher(api, NODE, WatchSettings(page_size=2), sleep=sleep)
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert sorted(w.snapshot()) == [("ml", "a"), ("ml", "b"), ("ml", "c")]
        assert w.pod("ml", "a") == PodInfo("ml", "a", "uid-a", {"app": "a"})
        assert w.container(CID_A) == ContainerRef("ml", "a", "main")
        assert w.container("a" * 64) == ContainerRef("ml", "a", "main")
        assert w.pod_by_uid("uid-b") == PodInfo("ml", "b", "uid-b", {})
        # Paged: 3 pods in pages of 2, with a continue token, and the node filter on every request.
        lists = [r for r in apiserver.requests if "watch=true" not in r and "/api/v1/pods" in r]
        assert len(lists) == 2 and "continue=" in lists[1]
        assert all("fieldSelector=spec.nodeName%3Dgpu-node-1" in r for r in lists)
        await until(lambda: apiserver.watch_count == 1)

        v = w.version
        w.changed.clear()
        apiserver.add_pod(make_pod("ml", "d", node=NODE, uid="uid-d", containers={"x": CID_B}))
        await asyncio.wait_for(w.changed.wait(), 5)
        assert w.version == v + 1
        assert w.container(CID_B) == ContainerRef("ml", "d", "x")

        apiserver.modify_pod("ml", "a", _relabel(app="a", tier="gold"))
        await until(lambda: w.pod("ml", "a") == PodInfo("ml", "a", "uid-a", {"app": "a", "tier": "gold"}))

        # A status-only change moves the resourceVersion but is not a change for the agent.
        v = w.version
        pod = apiserver.modify_pod("ml", "b", lambda p: p["status"].update(phase="Succeeded"))
        await until(lambda: w.resource_version == pod["metadata"]["resourceVersion"])
        assert w.version == v

        apiserver.delete_pod("ml", "c")
        await until(lambda: w.pod("ml", "c") is None)
        assert w.pod_by_uid("uid-c") is None
        apiserver.add_pod(make_pod("ml", "far", node="other-node"))  # filtered server-side
        apiserver.delete_pod("ml", "d")
        await until(lambda: w.container(CID_B) is None)
        assert sorted(w.snapshot()) == [("ml", "a"), ("ml", "b")]
        assert w.lists == 1 and sleep.delays == []
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_bookmarks_move_the_resource_version(apiserver: FakeApiServer, watcher: NodePodWatcher) -> None:
    await asyncio.wait_for(watcher.synced.wait(), 5)
    await until(lambda: apiserver.watch_count == 1)
    assert any("allowWatchBookmarks=true" in r for r in apiserver.requests)
    apiserver.add_pod(make_pod("ml", "elsewhere", node="other-node"))  # not sent to this watch
    apiserver.bookmark()
    await until(lambda: watcher.resource_version == str(apiserver.resource_version))
    # The server ends the watch (timeoutSeconds); the watcher resumes from the bookmark, without a list.
    apiserver.close_watches()
    await until(lambda: sum("watch=true" in r for r in apiserver.requests) == 2)
    assert apiserver.requests[-1].count(f"resourceVersion={apiserver.resource_version}") == 1
    assert watcher.lists == 1


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-410"])
async def test_410_gone_relists(apiserver: FakeApiServer, watcher: NodePodWatcher, as_status: bool) -> None:
    apiserver.gone_as_status = as_status
    apiserver.add_pod(make_pod("ml", "a", node=NODE, uid="uid-a"))
    await asyncio.wait_for(watcher.synced.wait(), 5)
    await until(lambda: apiserver.watch_count == 1)
    # Changes happen while the watch is down, then etcd compacts them away: the next watch is too old.
    apiserver.close_watches()
    apiserver.delete_pod("ml", "a")
    apiserver.add_pod(make_pod("ml", "b", node=NODE, uid="uid-b", labels={"new": "yes"}))
    apiserver.compact()
    await until(lambda: watcher.lists == 2)
    assert watcher.snapshot() == {("ml", "b"): PodInfo("ml", "b", "uid-b", {"new": "yes"})}
    assert watcher.resource_version == str(apiserver.resource_version)
    await until(lambda: apiserver.watch_count == 1)
    apiserver.add_pod(make_pod("ml", "c", node=NODE))
    await until(lambda: watcher.pod("ml", "c") is not None)
    assert watcher.failures == 0  # a 410 is not a failure


async def test_errors_back_off_and_recover(
    apiserver: FakeApiServer, api: ApiClient, sleep: FakeSleep
) -> None:
    apiserver.add_pod(make_pod("ml", "a", node=NODE))
    apiserver.fail_next = [500, 503, 500]
    w = NodePodWatcher(api, NODE, WatchSettings(backoff_initial_s=0.25, backoff_max_s=0.5), sleep=sleep)
    task = asyncio.create_task(w.run())
    try:
        await asyncio.wait_for(w.synced.wait(), 5)
        assert sleep.delays == [0.25, 0.5, 0.5]
        assert w.failures == 3
        assert sorted(w.snapshot()) == [("ml", "a")]
        # The server goes away entirely; the watcher retries until it is back.
        await until(lambda: apiserver.watch_count == 1)
        await apiserver.stop()
        await until(lambda: w.failures >= 5)  # connection refused, over and over, backing off
        assert sleep.delays[-1] == 0.5
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_watch_error_event_other_than_410(apiserver: FakeApiServer, watcher: NodePodWatcher) -> None:
    await asyncio.wait_for(watcher.synced.wait(), 5)
    await until(lambda: apiserver.watch_count == 1)
    for w in list(apiserver._watches):
        w.queue.put_nowait(
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 500,
                    "reason": "InternalError",
                    "message": "etcd is sad",
                },
            }
        )
    await until(lambda: watcher.failures == 1)
    await until(lambda: apiserver.watch_count == 1)
    assert watcher.lists == 1  # resumed from the same resourceVersion


async def test_large_pod_event_line(apiserver: FakeApiServer, watcher: NodePodWatcher) -> None:
    await asyncio.wait_for(watcher.synced.wait(), 5)
    await until(lambda: apiserver.watch_count == 1)
    big = make_pod("ml", "big", node=NODE, labels={"app": "big"})
    big["metadata"]["annotations"] = {"blob": "x" * 300_000}  # over aiohttp's 128 KiB readline limit
    apiserver.add_pod(big)
    await until(lambda: watcher.pod("ml", "big") is not None)


async def test_wrong_token_is_a_401(apiserver: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", apiserver.url, token="wrong")
    async with await api_client_from(str(kubeconfig), in_cluster=False) as client:
        w = NodePodWatcher(client, NODE)
        with pytest.raises(KubeApiError) as info:
            await w._list()
    assert (info.value.status, info.value.reason) == (401, "Unauthorized")
    assert str(info.value) == "GET /api/v1/pods: HTTP 401 Unauthorized: Unauthorized"


async def test_bad_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"cannot load the kubeconfig .*missing"):
        await api_client_from(str(tmp_path / "missing"), in_cluster=False)


@pytest.mark.parametrize(
    ("raw", "bare"),
    [("containerd://abc", "abc"), ("cri-o://abc", "abc"), ("docker://abc", "abc"), ("abc", "abc")],
)
def test_strip_runtime_prefix(raw: str, bare: str) -> None:
    assert strip_runtime_prefix(raw) == bare
