"""This node's pods, kept current by list+watch (an informer of one resource, ``spec.nodeName=<node>``).

The agent needs a pod's UID and labels, and which container a container id (from a PID's cgroup) belongs to.
One watch per node replaces per-scrape ``GET``s, which hit client-side throttling in dcgm-exporter (#551).

The loop: list (paged) → watch from the list's resourceVersion with bookmarks → on a clean end, watch again
from the last resourceVersion seen → on ``410 Gone`` (an ERROR event, or the HTTP status), list again → on
any other failure, back off exponentially and retry. ``changed`` is set (and ``version`` bumped) whenever the
UIDs, labels or container ids change; status-only updates do not count.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..model import ContainerRef, PodInfo
from ._http import Json, KubeApi, get_json, iter_lines, open_stream
from .errors import KubeApiError, KubeConfigError
from .incluster import InClusterApi

__all__ = ["NodePodWatcher", "PodKey", "WatchSettings", "api_client_from", "strip_runtime_prefix"]

log = logging.getLogger(__name__)

PodKey = tuple[str, str]  # (namespace, name)
_PODS_PATH = "/api/v1/pods"


async def api_client_from(kubeconfig: str | None, in_cluster: bool) -> KubeApi:
    """The Kubernetes API: in a pod, through its service account (``InClusterApi``, no kubernetes_asyncio);
    else through a kubeconfig file (``None``: ``$KUBECONFIG``, then ``~/.kube/config``) with
    kubernetes_asyncio, imported only then. The caller closes it."""
    if in_cluster:
        return InClusterApi.from_environment()
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import ApiClient, Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException

    configuration = Configuration()
    try:
        await kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (ConfigException, OSError) as e:
        raise KubeConfigError(f"cannot load the kubeconfig {kubeconfig or '(default)'}: {e}") from e
    return ApiClient(configuration=configuration)


def strip_runtime_prefix(container_id: str) -> str:
    """``containerd://abc`` / ``cri-o://abc`` / ``docker://abc`` → ``abc``."""
    return container_id.rsplit("://", 1)[-1]


@dataclass(frozen=True, slots=True)
class WatchSettings:
    page_size: int = 500
    watch_timeout_s: int = 300  # the server ends a watch after this; the watcher then resumes it
    read_timeout_s: float = 120.0  # no byte for this long (bookmarks come about once a minute): reconnect
    request_timeout_s: float = 30.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


@dataclass(frozen=True, slots=True)
class _Entry:
    info: PodInfo
    containers: dict[str, ContainerRef]


class _Expired(Exception):
    """The resourceVersion we hold is gone (410): list again."""


def _entry_from(obj: Json) -> _Entry | None:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        return None
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    info = PodInfo(namespace=namespace, name=name, uid=str(meta.get("uid") or ""), labels=labels)
    containers: dict[str, ContainerRef] = {}
    status = obj.get("status") or {}
    for field in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(field) or []:
            cid, cname = strip_runtime_prefix(str(cs.get("containerID") or "")), cs.get("name")
            if cid and isinstance(cname, str):
                containers[cid] = ContainerRef(namespace, name, cname)
    return _Entry(info, containers)


class NodePodWatcher:
    """List+watch of the pods on ``node_name``. ``await run()`` until cancelled; read with the accessors."""

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        settings: WatchSettings | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.settings = settings or WatchSettings()
        self._sleep = sleep
        self._pods: dict[PodKey, _Entry] = {}
        self._by_uid: dict[str, PodInfo] = {}
        self._by_container: dict[str, ContainerRef] = {}
        self.resource_version: str | None = None
        self.version = 0
        self.changed = asyncio.Event()
        self.synced = asyncio.Event()  # set after the first complete list
        self.lists = 0
        self.failures = 0

    # ----- accessors
    def snapshot(self) -> dict[PodKey, PodInfo]:
        return {key: entry.info for key, entry in self._pods.items()}

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        entry = self._pods.get((namespace, name))
        return None if entry is None else entry.info

    def pod_by_uid(self, uid: str) -> PodInfo | None:
        return self._by_uid.get(uid)

    def container(self, container_id: str) -> ContainerRef | None:
        """The container with this id (with or without the ``containerd://`` prefix)."""
        return self._by_container.get(strip_runtime_prefix(container_id))

    def containers(self) -> dict[str, ContainerRef]:
        return dict(self._by_container)

    # ----- the loop
    async def run(self) -> None:
        backoff = self.settings.backoff_initial_s
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                events = await self._watch()
                if events:
                    backoff = self.settings.backoff_initial_s
                    continue
                # A watch that ends without a single event or bookmark: don't spin on a misbehaving proxy.
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.settings.backoff_max_s)
            except _Expired:
                log.info(
                    "pods of node %s: resourceVersion %s expired; listing again",
                    self.node_name,
                    self.resource_version,
                )
                self.resource_version = None
            except KubeApiError as e:
                self.failures += 1
                log.warning(
                    "pods of node %s: %s; pod labels may be out of date, retrying in %.1fs",
                    self.node_name,
                    e,
                    backoff,
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.settings.backoff_max_s)

    def _selector(self) -> tuple[str, str]:
        return ("fieldSelector", f"spec.nodeName={self.node_name}")

    async def _list(self) -> None:
        items: list[Json] = []
        cont = ""
        while True:
            query = [self._selector(), ("limit", str(self.settings.page_size))]
            if cont:
                query.append(("continue", cont))
            try:
                body = await get_json(self.api, _PODS_PATH, query, timeout=self.settings.request_timeout_s)
            except KubeApiError as e:
                if e.status == 410 and cont:  # the continue token expired mid-list: start over
                    items, cont = [], ""
                    continue
                raise
            items.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            meta = body.get("metadata") or {}
            cont = str(meta.get("continue") or "")
            if not cont:
                break
        new = {(e.info.namespace, e.info.name): e for e in map(_entry_from, items) if e is not None}
        self.lists += 1
        self.resource_version = str(meta.get("resourceVersion") or "") or None
        if new != self._pods:
            self._pods = new
            self._reindex()
        self.synced.set()

    async def _watch(self) -> int:
        query = [
            self._selector(),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.settings.watch_timeout_s)),
        ]
        if self.resource_version:
            query.insert(1, ("resourceVersion", self.resource_version))
        try:
            response = await open_stream(
                self.api,
                _PODS_PATH,
                query,
                connect_timeout=self.settings.request_timeout_s,
                read_timeout=self.settings.read_timeout_s,
            )
        except KubeApiError as e:
            if e.status == 410:
                raise _Expired from e
            raise
        events = 0
        try:
            async for line in iter_lines(response, _PODS_PATH):
                events += 1
                self._apply(line)
        finally:
            response.release()
        return events

    def _apply(self, line: bytes) -> None:
        try:
            event: Any = json.loads(line)
            kind, obj = event["type"], event["object"]
            if not isinstance(obj, dict):
                raise TypeError("object is not a JSON object")
        except (ValueError, KeyError, TypeError) as e:
            log.warning(
                "pods of node %s: ignoring a malformed watch event (%s): %.200r", self.node_name, e, line
            )
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise KubeApiError(
                _PODS_PATH,
                int(obj.get("code") or 0),
                str(obj.get("reason") or ""),
                str(obj.get("message") or "watch ERROR event"),
            )
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            entry = _entry_from(obj)
            if entry is not None:
                key = (entry.info.namespace, entry.info.name)
                if kind == "DELETED":
                    if self._pods.pop(key, None) is not None:
                        self._reindex()
                elif self._pods.get(key) != entry:
                    self._pods[key] = entry
                    self._reindex()
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)

    def _reindex(self) -> None:
        self._by_uid = {e.info.uid: e.info for e in self._pods.values() if e.info.uid}
        self._by_container = {cid: ref for e in self._pods.values() for cid, ref in e.containers.items()}
        self.version += 1
        self.changed.set()
