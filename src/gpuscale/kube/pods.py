"""This node's pods, kept current by list+watch (``informer.ListWatch`` on ``spec.nodeName=<node>``).

The agent needs a pod's UID and labels, which container a container id (from a PID's cgroup) belongs to,
and, to read the metrics of an inference engine in it, its IP and its ``gpuscale.io/`` and ``prometheus.io/``
annotations (``KEPT_ANNOTATION_PREFIXES``; no other annotation is kept). One watch per node replaces
per-scrape ``GET``s, which hit client-side throttling in dcgm-exporter (#551). ``changed`` is set (and
``version`` bumped) whenever the UIDs, labels, those annotations, the pod IP, container ids or the pod's
readiness (``readiness``: Ready or not, when it was scheduled and became Ready) change; other status updates
do not count. A pod that has finished (``Succeeded``, ``Failed``) is dropped: it holds no GPU,
and a workload whose pods all finished has none on this node. So is a pod being deleted
(``deletionTimestamp``): it is draining, and the HPA leaves such pods out of its count (``groupPods``), as
gpuscale does.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from ..model import ContainerRef, PodInfo
from ._http import Json, KubeApi, get_json
from .errors import KubeApiError, KubeConfigError
from .incluster import InClusterApi
from .informer import NodeListWatch, WatchSettings
from .podresources import is_gpu_resource

__all__ = [
    "KEPT_ANNOTATION_PREFIXES",
    "NodePodWatcher",
    "PodKey",
    "Readiness",
    "WatchSettings",
    "api_client_from",
    "api_server",
    "api_unreachable",
    "kept_annotations",
    "parse_time",
    "readiness",
    "strip_runtime_prefix",
]

log = logging.getLogger(__name__)

PodKey = tuple[str, str]  # (namespace, name)

# The annotations the agent keeps of a pod: where its inference engine serves metrics (agent.engines)
KEPT_ANNOTATION_PREFIXES = ("gpuscale.io/", "prometheus.io/")


async def api_client_from(kubeconfig: str | None, in_cluster: bool) -> KubeApi:
    """The Kubernetes API: in a pod, through its service account (``InClusterApi``, no kubernetes_asyncio);
    else through a kubeconfig file (``None``: ``$KUBECONFIG``, then ``~/.kube/config``) with
    kubernetes_asyncio, imported only then. The caller closes it."""
    if in_cluster:
        return InClusterApi.from_environment()
    import yaml
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import ApiClient, Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException

    configuration = Configuration()
    try:
        await kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, AttributeError) as e:
        # YAML of the wrong shape (a list, a string) fails inside the loader with a TypeError/AttributeError
        why = " ".join(str(e).split())
        if isinstance(e, (TypeError, AttributeError)):
            why = "not a kubeconfig (a YAML mapping of clusters, contexts and users)"
        raise KubeConfigError(f"cannot load the kubeconfig {kubeconfig or '(default)'}: {why}") from e
    return ApiClient(configuration=configuration)


def api_server(api: KubeApi) -> str:
    """The API server's address (``https://host:port``), for messages."""
    if isinstance(api, InClusterApi):
        return api.server
    return str(api.configuration.host)


async def api_unreachable(api: KubeApi, *, timeout: float) -> str | None:
    """Why the API server cannot be used, or ``None``: no answer at all (connection refused, DNS, TLS, a
    timeout), or 401 (it refuses the credentials). ``GET /version``, which every client may read; any other
    answer, an error status included, is an API server reached."""
    try:
        await get_json(api, "/version", timeout=timeout)
    except KubeApiError as e:
        if e.status == 0:
            return e.message
        if e.status == 401:
            return f"HTTP 401: it refuses the credentials ({e.message})"
    return None


def strip_runtime_prefix(container_id: str) -> str:
    """``containerd://abc`` / ``cri-o://abc`` / ``docker://abc`` → ``abc``."""
    return container_id.rsplit("://", 1)[-1]


@dataclass(frozen=True, slots=True)
class _Entry:
    info: PodInfo
    containers: dict[str, ContainerRef]


_TERMINAL = ("Succeeded", "Failed")  # a finished pod holds no device and runs no process


def _key_of(obj: Json) -> PodKey | None:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        return None
    return namespace, name


def wants_gpu(obj: Json, extra_resource_names: Collection[str] = ()) -> bool:
    """Whether a pod asks for a GPU: a container's (or init container's) limit or request of a GPU
    resource (``podresources.is_gpu_resource``), or any ResourceClaim (which may be a GPU's)."""
    extra = extra_resource_names
    spec = obj.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            resources = (c.get("resources") or {}) if isinstance(c, dict) else {}
            for kind in ("limits", "requests"):
                names = resources.get(kind) or {}
                if not isinstance(names, dict):
                    continue
                asked = (n for n, q in names.items() if str(q).strip() not in ("0", ""))  # "0": none asked
                if any(is_gpu_resource(str(n), extra) for n in asked):
                    return True
    return False


def kept_annotations(meta: Json) -> dict[str, str]:
    """The pod's annotations under ``KEPT_ANNOTATION_PREFIXES``, values as strings."""
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return {}
    return {str(k): str(v) for k, v in annotations.items() if str(k).startswith(KEPT_ANNOTATION_PREFIXES)}


def parse_time(value: object) -> float | None:
    """An API timestamp (RFC 3339, ``2025-01-01T00:00:00Z``, fractions allowed) as Unix seconds; ``None``
    when absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:  # RFC 3339 has a zone (the API writes "Z"); without one it is not a time
        return None
    seconds = parsed.timestamp()
    return seconds if math.isfinite(seconds) else None


class Readiness(NamedTuple):
    """A pod's readiness as its API object says it (``readiness``)."""

    ready: bool | None
    scheduled_at: float | None
    ready_at: float | None


def readiness(obj: Json) -> Readiness:
    """Whether the pod is Ready, when it was scheduled and when it became Ready (Unix seconds).

    ``ready``: its ``Ready`` condition's status is ``True``; ``False`` for any other status (``False``,
    ``Unknown``) and for a pod whose status has no Ready condition yet (just created, Pending); ``None`` only
    when the object has no status at all. ``scheduled_at``: the ``PodScheduled`` condition's
    ``lastTransitionTime`` while it is True, else ``metadata.creationTimestamp``. ``ready_at``: the Ready
    condition's ``lastTransitionTime``, only while it is True (a pod that became not Ready has none)."""
    status = obj.get("status")
    meta = obj.get("metadata") or {}
    conditions = status.get("conditions") if isinstance(status, dict) else None
    by_type: dict[str, Json] = {}
    for c in conditions if isinstance(conditions, list) else ():
        if isinstance(c, dict) and isinstance(c.get("type"), str):
            by_type[c["type"]] = c
    scheduled = by_type.get("PodScheduled")
    scheduled_at = None
    if scheduled is not None and scheduled.get("status") == "True":
        scheduled_at = parse_time(scheduled.get("lastTransitionTime"))
    if scheduled_at is None and isinstance(meta, dict):
        scheduled_at = parse_time(meta.get("creationTimestamp"))
    if not isinstance(status, dict) or not status:
        return Readiness(None, scheduled_at, None)
    ready_condition = by_type.get("Ready")
    ready = ready_condition is not None and ready_condition.get("status") == "True"
    ready_at = parse_time(ready_condition.get("lastTransitionTime")) if ready and ready_condition else None
    return Readiness(ready, scheduled_at, ready_at)


def _entry_from(obj: Json, extra_resource_names: Collection[str] = ()) -> _Entry | None:
    """What the agent keeps of a pod; ``None`` for a finished one or one being deleted (it is no workload's
    any more)."""
    key = _key_of(obj)
    if key is None or (obj.get("status") or {}).get("phase") in _TERMINAL:
        return None
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return None  # being deleted: the HPA ignores it, and so does every workload's value
    namespace, name = key
    meta = obj.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    ready, scheduled_at, ready_at = readiness(obj)
    info = PodInfo(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        labels=labels,
        wants_gpu=wants_gpu(obj, extra_resource_names),
        annotations=kept_annotations(meta),
        ip=str((obj.get("status") or {}).get("podIP") or ""),
        ready=ready,
        scheduled_at=scheduled_at,
        ready_at=ready_at,
    )
    containers: dict[str, ContainerRef] = {}
    status = obj.get("status") or {}
    for field in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(field) or []:
            cid, cname = strip_runtime_prefix(str(cs.get("containerID") or "")), cs.get("name")
            if cid and isinstance(cname, str):
                containers[cid] = ContainerRef(namespace, name, cname)
    return _Entry(info, containers)


class NodePodWatcher(NodeListWatch):
    """List+watch of the pods on ``node_name``. ``await run()`` until cancelled; read with the accessors."""

    path = "/api/v1/pods"
    stale_consequence = "pod labels may be out of date"

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        settings: WatchSettings | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        extra_resource_names: Collection[str] = (),
    ) -> None:
        super().__init__(api, node_name, settings, sleep=sleep)
        self.extra_resource_names = frozenset(extra_resource_names)
        self._pods: dict[PodKey, _Entry] = {}
        self._by_uid: dict[str, PodInfo] = {}
        self._by_container: dict[str, ContainerRef] = {}

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

    # ----- ListWatch
    def describe(self) -> str:
        return f"pods of node {self.node_name}"

    def _selector(self) -> list[tuple[str, str]]:
        return [("fieldSelector", f"spec.nodeName={self.node_name}")]

    def _replace(self, items: list[Json]) -> bool:
        entries = (_entry_from(i, self.extra_resource_names) for i in items)
        new = {(e.info.namespace, e.info.name): e for e in entries if e is not None}
        if new == self._pods:
            return False
        self._pods = new
        self._reindex()
        return True

    def _upsert(self, obj: Json) -> bool:
        entry = _entry_from(obj, self.extra_resource_names)
        if entry is None:  # a pod that finished (or is not a pod) is no longer kept
            key_ = _key_of(obj)
            if key_ is None or self._pods.pop(key_, None) is None:
                return False
            self._reindex()
            return True
        key = (entry.info.namespace, entry.info.name)
        if self._pods.get(key) == entry:
            return False
        self._pods[key] = entry
        self._reindex()
        return True

    def _delete(self, obj: Json) -> bool:
        key = _key_of(obj)
        if key is None or self._pods.pop(key, None) is None:
            return False
        self._reindex()
        return True

    def _reindex(self) -> None:
        self._by_uid = {e.info.uid: e.info for e in self._pods.values() if e.info.uid}
        self._by_container = {cid: ref for e in self._pods.values() for cid, ref in e.containers.items()}
