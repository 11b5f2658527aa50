"""NodePodWatcher against FakeApiServer, through a kubeconfig (the real kubernetes_asyncio client) and as in a
pod (``InClusterApi``, over TLS): every test runs both ways (``connection`` in conftest.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gpuscale.kube._http import KubeApi
from gpuscale.kube.errors import KubeApiError, KubeConfigError
from gpuscale.kube.incluster import InClusterApi
from gpuscale.kube.pods import (
    NodePodWatcher,
    Readiness,
    WatchSettings,
    api_client_from,
    parse_time,
    readiness,
    strip_runtime_prefix,
)
from gpuscale.model import ContainerRef, PodInfo
from tests.fakes.apiserver import FakeApiServer, make_pod
from tests.poll import until

from .conftest import running

NODE = "gpu-node-1"
T0 = 1735689600.0  # make_pod's creationTimestamp, 2025-01-01T00:00:00Z: scheduled then (and Ready, if ready)
READY: dict[str, Any] = {"ready": True, "scheduled_at": T0, "ready_at": T0}
NOT_READY: dict[str, Any] = {"ready": False, "scheduled_at": T0, "ready_at": None}
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
async def watcher(api: KubeApi, sleep: FakeSleep) -> AsyncIterator[NodePodWatcher]:
    async with running(NodePodWatcher(api, NODE, WatchSettings(page_size=2), sleep=sleep)) as w:
        yield w


def _relabel(**labels: str) -> Any:
    def change(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"] = dict(labels)

    return change


async def test_list_then_follow_adds_modifies_deletes(
    apiserver: FakeApiServer, api: KubeApi, sleep: FakeSleep
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
        # a started (Ready since its creation), b not started yet: not Ready
        assert w.pod("ml", "a") == PodInfo("ml", "a", "uid-a", {"app": "a"}, wants_gpu=False, **READY)
        assert w.container(CID_A) == ContainerRef("ml", "a", "main")
        assert w.container("a" * 64) == ContainerRef("ml", "a", "main")
        assert w.pod_by_uid("uid-b") == PodInfo("ml", "b", "uid-b", {}, wants_gpu=False, **NOT_READY)
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
        await until(
            lambda: (
                w.pod("ml", "a")
                == PodInfo("ml", "a", "uid-a", {"app": "a", "tier": "gold"}, wants_gpu=False, **READY)
            )
        )

        # A status-only change moves the resourceVersion but is not a change for the agent.
        v = w.version
        pod = apiserver.modify_pod("ml", "b", lambda p: p["status"].update(qosClass="BestEffort"))
        await until(lambda: w.resource_version == pod["metadata"]["resourceVersion"])
        assert w.version == v
        # Its readiness is: b becomes Ready at T0 + 95 s
        w.changed.clear()
        became = make_pod("ml", "b", node=NODE, uid="uid-b", ready=True, ready_at=T0 + 95)["status"]
        apiserver.modify_pod("ml", "b", lambda p: p.update(status=became))
        await asyncio.wait_for(w.changed.wait(), 5)
        assert w.version == v + 1
        b = w.pod("ml", "b")
        assert b is not None and (b.ready, b.scheduled_at, b.ready_at) == (True, T0, T0 + 95)

        apiserver.delete_pod("ml", "c")
        await until(lambda: w.pod("ml", "c") is None)
        assert w.pod_by_uid("uid-c") is None
        apiserver.add_pod(make_pod("ml", "far", node="other-node"))  # filtered server-side
        apiserver.delete_pod("ml", "d")
        await until(lambda: w.container(CID_B) is None)
        assert sorted(w.snapshot()) == [("ml", "a"), ("ml", "b")]
        # A pod that finished holds no GPU and is no workload's: dropped (a Job's pods stay on the node).
        apiserver.modify_pod("ml", "b", lambda p: p["status"].update(phase="Succeeded"))
        await until(lambda: w.pod("ml", "b") is None)
        assert sorted(w.snapshot()) == [("ml", "a")] and w.pod_by_uid("uid-b") is None
        # A pod being deleted (graceful termination) is draining: the HPA leaves it out, and so do we.
        apiserver.modify_pod(
            "ml", "a", lambda p: p["metadata"].update(deletionTimestamp="2026-12-01T00:00:00Z")
        )
        await until(lambda: w.pod("ml", "a") is None)
        assert w.snapshot() == {}
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
    assert watcher.snapshot() == {
        ("ml", "b"): PodInfo("ml", "b", "uid-b", {"new": "yes"}, wants_gpu=False, **NOT_READY)
    }
    assert watcher.resource_version == str(apiserver.resource_version)
    await until(lambda: apiserver.watch_count == 1)
    apiserver.add_pod(make_pod("ml", "c", node=NODE))
    await until(lambda: watcher.pod("ml", "c") is not None)
    assert watcher.failures == 0  # a 410 is not a failure


async def test_errors_back_off_and_recover(apiserver: FakeApiServer, api: KubeApi, sleep: FakeSleep) -> None:
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


async def test_keeps_engine_annotations_and_the_pod_ip(
    apiserver: FakeApiServer, watcher: NodePodWatcher
) -> None:
    """What the agent needs to scrape a pod's inference engine: its IP, and its gpuscale.io/ and
    prometheus.io/ annotations, nothing else (a 300 kB last-applied-configuration is not kept)."""
    await asyncio.wait_for(watcher.synced.wait(), 5)
    await until(lambda: apiserver.watch_count == 1)
    pod = make_pod("ml", "llm", node=NODE, uid="uid-llm")
    pod["metadata"]["annotations"] = {
        "gpuscale.io/metrics-port": "8000",
        "prometheus.io/scrape": "true",
        "kubectl.kubernetes.io/last-applied-configuration": "x" * 300_000,
    }
    apiserver.add_pod(pod)
    await until(lambda: watcher.pod("ml", "llm") is not None)
    info = watcher.pod("ml", "llm")
    assert info is not None
    assert dict(info.annotations) == {"gpuscale.io/metrics-port": "8000", "prometheus.io/scrape": "true"}
    assert info.ip == ""  # not given one yet

    # The pod gets its IP (a status update, and one that counts), then its port annotation changes.
    v = watcher.version
    apiserver.modify_pod("ml", "llm", lambda p: p["status"].update(podIP="10.1.2.3"))
    await until(lambda: getattr(watcher.pod("ml", "llm"), "ip", "") == "10.1.2.3")
    assert watcher.version == v + 1
    apiserver.modify_pod(
        "ml", "llm", lambda p: p["metadata"]["annotations"].update({"gpuscale.io/metrics-port": "9000"})
    )
    await until(
        lambda: getattr(watcher.pod("ml", "llm"), "annotations", {}).get("gpuscale.io/metrics-port") == "9000"
    )
    # Another annotation is not the agent's business: no change.
    v = watcher.version
    changed = apiserver.modify_pod("ml", "llm", lambda p: p["metadata"]["annotations"].update({"team": "a"}))
    await until(lambda: watcher.resource_version == changed["metadata"]["resourceVersion"])
    assert watcher.version == v


async def test_wrong_token_is_a_401(connect: Callable[..., Any]) -> None:
    client = await connect(token="wrong")
    try:
        w = NodePodWatcher(client, NODE)
        with pytest.raises(KubeApiError) as info:
            await w._list()
    finally:
        await client.close()
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


@pytest.mark.parametrize("connection", ["in-cluster"])
async def test_in_cluster_token_is_read_again_when_the_kubelet_rotates_it(
    apiserver: FakeApiServer, connect: Callable[..., Any], tmp_path: Path
) -> None:
    api = await connect()
    assert isinstance(api, InClusterApi)
    api.token_refresh_s = 0.0  # read the file on every request
    try:
        apiserver.add_pod(make_pod("ml", "a", node=NODE))
        await NodePodWatcher(api, NODE)._list()  # raises KubeApiError on a 401
        apiserver.token = "rotated"  # the kubelet wrote a new token; the old one is no longer valid
        (tmp_path / "serviceaccount" / "token").write_text("rotated\n")
        w = NodePodWatcher(api, NODE)
        await w._list()
        assert w.pod("ml", "a") is not None
    finally:
        await api.close()


def test_in_cluster_without_the_environment_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(
        KubeConfigError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
    ):
        InClusterApi.from_environment(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match=r"cannot load the in-cluster service account: CA .*ca.crt"):
        InClusterApi.from_environment(tmp_path)


def test_the_agent_and_scaler_do_not_import_kubernetes_asyncio_for_in_cluster_use() -> None:
    """kubernetes_asyncio.client loads 1,300 modules (~74 MiB): only a kubeconfig needs it."""
    code = (
        "import sys, gpuscale.cli.agent, gpuscale.cli.scaler, gpuscale.kube.pods, gpuscale.kube.workloads; "
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_whether_a_pod_asks_for_a_gpu() -> None:
    """The scaler tells a workload whose GPU pods have no GPU attributed (UNAVAILABLE) from one whose pods
    use none (0): the agent says which pods ask for one."""
    from gpuscale.kube.pods import wants_gpu

    assert wants_gpu(make_pod("ml", "a", node=NODE, limits={"nvidia.com/gpu": "1"}))
    assert wants_gpu(make_pod("ml", "a", node=NODE, limits={"amd.com/gpu": "1"}))
    assert wants_gpu(make_pod("ml", "a", node=NODE, limits={"nvidia.com/mig-1g.10gb": "1"}))
    assert wants_gpu(make_pod("ml", "a", node=NODE, resource_claims=["gpu"]))  # DRA
    assert not wants_gpu(make_pod("ml", "a", node=NODE, limits={"cpu": "2", "memory": "8Gi"}))
    assert not wants_gpu(make_pod("ml", "a", node=NODE, limits={"nvidia.com/gpu": "0"}))  # a template's 0
    assert not wants_gpu(make_pod("ml", "a", node=NODE, limits={"nvidia.com/gpu.shared": "1"}))
    assert wants_gpu(
        make_pod("ml", "a", node=NODE, limits={"nvidia.com/gpu.shared": "1"}), {"nvidia.com/gpu.shared"}
    )
    init = make_pod("ml", "a", node=NODE)
    init["spec"]["initContainers"] = [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
    assert wants_gpu(init)


def _cond(kind: str, status: str, at: str | None = "2025-01-01T00:02:05Z") -> dict[str, Any]:
    return {"type": kind, "status": status, **({"lastTransitionTime": at} if at is not None else {})}


CREATED = {"creationTimestamp": "2025-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        # no status at all: readiness not known; scheduled at its creation
        ({"metadata": CREATED}, Readiness(None, T0, None)),
        ({"metadata": CREATED, "status": {}}, Readiness(None, T0, None)),
        # just created, not scheduled yet: a status, no condition: not Ready
        ({"metadata": CREATED, "status": {"phase": "Pending"}}, Readiness(False, T0, None)),
        # waiting for a node (PodScheduled False): the creation stands for the schedule
        (
            {
                "metadata": CREATED,
                "status": {"phase": "Pending", "conditions": [_cond("PodScheduled", "False")]},
            },
            Readiness(False, T0, None),
        ),
        # scheduled 5 s after creation, loading its model
        (
            {
                "metadata": CREATED,
                "status": {
                    "phase": "Running",
                    "conditions": [
                        _cond("PodScheduled", "True", "2025-01-01T00:00:05Z"),
                        _cond("Ready", "False"),
                    ],
                },
            },
            Readiness(False, T0 + 5, None),
        ),
        # Ready 2 min after it was scheduled (fractions of a second allowed)
        (
            {
                "metadata": CREATED,
                "status": {
                    "conditions": [
                        _cond("PodScheduled", "True", "2025-01-01T00:00:05Z"),
                        _cond("Ready", "True", "2025-01-01T00:02:05.5Z"),
                    ]
                },
            },
            Readiness(True, T0 + 5, T0 + 125.5),
        ),
        # its node unreachable: Unknown is not Ready
        (
            {"metadata": CREATED, "status": {"conditions": [_cond("Ready", "Unknown")]}},
            Readiness(False, T0, None),
        ),
        # times the API would never write: not known, the readiness still read
        (
            {
                "metadata": {"creationTimestamp": "yesterday"},
                "status": {"conditions": [_cond("Ready", "True", "x")]},
            },
            Readiness(True, None, None),
        ),
        ({"metadata": {}, "status": {"conditions": "Ready"}}, Readiness(False, None, None)),
    ],
)
def test_readiness_of_a_pod(pod: dict[str, Any], expected: Readiness) -> None:
    assert readiness(pod) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2025-01-01T00:00:00Z", T0),
        ("2025-01-01T01:00:00+01:00", T0),
        ("2025-01-01T00:00:00.250000Z", T0 + 0.25),
        ("2025-01-01T00:00:00", None),  # no zone: not RFC 3339
        ("", None),
        (None, None),
        (1735689600, None),
        ("not a time", None),
    ],
)
def test_parse_time(text: object, seconds: float | None) -> None:
    assert parse_time(text) == seconds
