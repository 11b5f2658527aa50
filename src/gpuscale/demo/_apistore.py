"""The state of the demo's local API server: its objects, their resourceVersions and the history of
changes its watches replay, and the watches open now.

Every write bumps the server's resourceVersion; a change to a pod, node, ResourceSlice or EndpointSlice is
recorded with it and reaches each open watch of that resource (``apiserver`` serves them over HTTP). Other
objects (Deployments, ScaledObjects, custom resources) are stored for GET and ``/scale``, without history.

Private to ``apiserver``: ``LocalApiServer`` is this store with its HTTP routes.
"""

from __future__ import annotations

import asyncio
import copy
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from ._apiobjects import BUILTIN_RESOURCES, Obj

__all__ = ["ApiStore", "Watch"]


class Watch:
    """An open watch: the request that opened it, the resource it follows, whether it asked for bookmarks,
    and the events still to send (None: end the watch)."""

    def __init__(self, request: web.Request, plural: str, bookmarks: bool) -> None:
        self.request = request
        self.plural = plural
        self.bookmarks = bookmarks
        self.queue: asyncio.Queue[Obj | None] = asyncio.Queue()


class ApiStore:
    """Pods, Nodes, ResourceSlices, Services, EndpointSlices and other objects, as the API server keeps
    them, with the API resources it serves for discovery."""

    def __init__(self) -> None:
        self.resource_version = 1000
        self.pods: dict[tuple[str, str], Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self.resource_slices: dict[str, Obj] = {}
        self.services: dict[tuple[str, str], Obj] = {}
        self.endpoint_slices: dict[tuple[str, str], Obj] = {}
        self.objects: dict[tuple[str, str, str, str], Obj] = {}  # (groupVersion, plural, namespace, name)
        self.resources: dict[str, list[Obj]] = copy.deepcopy(BUILTIN_RESOURCES)
        self.history: list[tuple[int, str, Obj]] = []  # (resourceVersion, plural, event): replayed by watches
        self.oldest_resource_version = self.resource_version
        self._watches: set[Watch] = set()

    # ----- resourceVersions and watches
    def _bump(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def _emit(self, kind: str, obj: Obj, plural: str = "pods") -> None:
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self.history.append((int(obj["metadata"]["resourceVersion"]), plural, event))
        for w in self._watches:
            if w.plural == plural:
                w.queue.put_nowait(event)

    def close_watches(self) -> None:
        """End every open watch cleanly (what the server does when ``timeoutSeconds`` runs out)."""
        for w in self._watches:
            w.queue.put_nowait(None)

    # ----- pods
    def add_pod(self, pod: Obj) -> Obj:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if key in self.pods:
            raise ValueError(f"pod {key[0]}/{key[1]} exists")
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = self._bump()
        self.pods[key] = pod
        self._emit("ADDED", pod)
        return pod

    def modify_pod(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        pod = copy.deepcopy(self.pods[(namespace, name)])
        change(pod)
        pod["metadata"]["resourceVersion"] = self._bump()
        self.pods[(namespace, name)] = pod
        self._emit("MODIFIED", pod)
        return pod

    def delete_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.pop((namespace, name))
        pod["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", pod)

    # ----- nodes
    def put_node(self, name: str, labels: Mapping[str, str] | None = None) -> Obj:
        """Add the Node ``name`` (``kubernetes.io/hostname`` among its labels, as the kubelet sets it), or
        replace its labels."""
        full = {"kubernetes.io/hostname": name, **(labels or {})}
        if name in self.nodes:
            return self.modify_node(name, lambda n: n["metadata"].__setitem__("labels", full))
        node: Obj = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": str(uuidlib.uuid4()),
                "labels": full,
                "resourceVersion": self._bump(),
            },
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        self.nodes[name] = node
        self._emit("ADDED", node, "nodes")
        return node

    def modify_node(self, name: str, change: Callable[[Obj], None]) -> Obj:
        node = copy.deepcopy(self.nodes[name])
        change(node)
        node["metadata"]["resourceVersion"] = self._bump()
        self.nodes[name] = node
        self._emit("MODIFIED", node, "nodes")
        return node

    # ----- Services and their EndpointSlices
    def put_service(
        self,
        namespace: str,
        name: str,
        ports: Iterable[tuple[str, int]],
        *,
        type: str = "ClusterIP",
        external_name: str | None = None,
    ) -> Obj:
        """Add or replace the Service ``namespace/name``, its ``ports`` ``(name, port)`` (``""``: unnamed)."""
        spec: Obj = {
            "type": type,
            "ports": [
                {**({"name": n} if n else {}), "port": p, "targetPort": p, "protocol": "TCP"}
                for n, p in ports
            ],
        }
        if external_name is not None:
            spec["externalName"] = external_name
        svc: Obj = {
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuidlib.uuid4()),
                "resourceVersion": self._bump(),
            },
            "spec": spec,
        }
        self.services[(namespace, name)] = svc
        return svc

    def put_endpoint_slice(
        self,
        namespace: str,
        name: str,
        *,
        service: str,
        endpoints: Iterable[tuple[str, bool | None]],
        ports: Iterable[tuple[str, int]],
        address_type: str = "IPv4",
    ) -> Obj:
        """Add or replace the EndpointSlice ``namespace/name`` of Service ``service``: ``endpoints`` are
        ``(address, ready)`` (``None``: no ready condition, which means ready), ``ports`` ``(name, port)``."""
        slice_: Obj = {
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuidlib.uuid4()),
                "labels": {"kubernetes.io/service-name": service},
                "resourceVersion": self._bump(),
            },
            "addressType": address_type,
            "endpoints": [
                {"addresses": [a], "conditions": {} if ready is None else {"ready": ready}}
                for a, ready in endpoints
            ],
            "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports],
        }
        kind = "MODIFIED" if (namespace, name) in self.endpoint_slices else "ADDED"
        self.endpoint_slices[(namespace, name)] = slice_
        self._emit(kind, slice_, "endpointslices")
        return slice_

    # ----- other objects
    def put_object(self, group_version: str, plural: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuidlib.uuid4()))
        meta["resourceVersion"] = self._bump()
        self.objects[(group_version, plural, meta["namespace"], meta["name"])] = obj
        return obj

    def update_object(
        self, group_version: str, plural: str, namespace: str, name: str, change: Callable[[Obj], None]
    ) -> Obj:
        """Change a stored object in place (``change`` edits it) and bump its resourceVersion."""
        obj = self.objects[(group_version, plural, namespace, name)]
        change(obj)
        obj["metadata"]["resourceVersion"] = self._bump()
        return obj

    def put_deployment(
        self, namespace: str, name: str, match_labels: Mapping[str, str], replicas: int = 1
    ) -> Obj:
        return self.put_object(
            "apps/v1",
            "deployments",
            {
                "kind": "Deployment",
                "apiVersion": "apps/v1",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": replicas, "selector": {"matchLabels": dict(match_labels)}},
                "status": {"replicas": replicas},
            },
        )

    def put_scaled_object(
        self,
        namespace: str,
        name: str,
        target: Mapping[str, str],
        triggers: Iterable[Obj] = (),
        *,
        spec: Mapping[str, Any] | None = None,
    ) -> Obj:
        """The ScaledObject ``namespace/name`` scaling ``target``; ``spec``: its other fields
        (``minReplicaCount``, ``advanced``, …)."""
        return self.put_object(
            "keda.sh/v1alpha1",
            "scaledobjects",
            {
                "kind": "ScaledObject",
                "apiVersion": "keda.sh/v1alpha1",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {**(spec or {}), "scaleTargetRef": dict(target), "triggers": list(triggers)},
            },
        )

    def _collection(self, plural: str) -> Mapping[Any, Obj]:
        collections: dict[str, Mapping[Any, Obj]] = {
            "pods": self.pods,
            "nodes": self.nodes,
            "resourceslices": self.resource_slices,
            "endpointslices": self.endpoint_slices,
        }
        return collections[plural]
