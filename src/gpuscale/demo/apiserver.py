"""A local Kubernetes API server: an in-process aiohttp app that answers the few requests gpuscale makes, with
the real server's wire format. The demo cluster runs on it; the tests use it as their fake API server
(``tests/fakes/apiserver.py`` re-exports it).

* ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods`` and ``/api/v1/nodes``: lists (``fieldSelector``,
  ``labelSelector``, ``limit``/``continue``, ``metadata.resourceVersion``) and watches (``watch=true``,
  ``resourceVersion``, ``allowWatchBookmarks``, ``timeoutSeconds``): chunked JSON lines of
  ADDED/MODIFIED/DELETED/BOOKMARK events.
  A watch from a resourceVersion older than the retained history gets a ``410 Gone``: as an ERROR event after
  ``200 OK`` (what the real server does) or, with ``gone_as_status``, as the HTTP status.
* ``GET /apis/resource.k8s.io/{version}/resourceslices``: the same, for DRA ResourceSlices, stored in the
  ``v1`` form and served in each version of ``dra_versions`` (``v1beta1`` puts a device's attributes under
  ``basic``); ``GET /apis/resource.k8s.io`` is the group's discovery (404 when ``dra_versions`` is empty).
* ``GET /api/v1/nodes/{name}``; ``GET /apis/{group}/{version}/namespaces/{ns}/{plural}/{name}`` and
  ``.../{name}/scale`` for stored objects
  (ScaledObjects, Deployments, StatefulSets, custom resources); the Scale's ``status.selector`` is built from
  ``spec.selector`` the way the API server formats a label selector. ``PATCH`` (merge patch) and ``PUT`` of
  ``.../scale`` set ``spec.replicas`` and call every ``on_scale`` callback (the demo's deployment controller).
* ``GET /api/v1/namespaces/{ns}/services/{name}``, and ``GET
  /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices`` lists and watches (a request path's Service
  and its endpoints: ``put_service``, ``put_endpoint_slice``, ``delete_endpoint_slice``).
* Discovery: ``GET /api/v1`` and ``GET /apis/{group}/{version}``.
* ``Authorization: Bearer <token>`` is checked; errors are ``Status`` objects.

Mutations (``add_pod``, ``modify_pod``, ``delete_pod``; ``put_node``, ``modify_node``, ``delete_node``;
``put_resource_slice``, ``delete_resource_slice``) bump the resourceVersion and reach open watches;
``compact()`` forgets history so older resourceVersions are gone; ``bookmark()`` sends a BOOKMARK.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import re
import ssl
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from ..scaling.selector import LabelSelector, parse_selector

__all__ = ["LocalApiServer", "format_label_selector", "make_pod", "match_labels", "write_kubeconfig"]

Obj = dict[str, Any]

_BUILTIN_RESOURCES: dict[str, list[Obj]] = {
    "v1": [
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get", "list", "watch"],
        },
        {
            "name": "nodes",
            "singularName": "node",
            "namespaced": False,
            "kind": "Node",
            "verbs": ["get", "list", "watch"],
        },
    ],
    "apps/v1": [
        {"name": p, "singularName": p[:-1], "namespaced": True, "kind": k, "verbs": ["get", "list", "watch"]}
        for p, k in (
            ("deployments", "Deployment"),
            ("statefulsets", "StatefulSet"),
            ("replicasets", "ReplicaSet"),
        )
    ]
    + [
        {
            "name": f"{p}/scale",
            "singularName": "",
            "namespaced": True,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }
        for p in ("deployments", "statefulsets", "replicasets")
    ],
    "keda.sh/v1alpha1": [
        {
            "name": "scaledobjects",
            "singularName": "scaledobject",
            "namespaced": True,
            "kind": "ScaledObject",
            "verbs": ["get", "list", "watch"],
        },
    ],
}


def make_pod(
    namespace: str,
    name: str,
    *,
    node: str,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    containers: Mapping[str, str | None] | None = None,
    phase: str = "Running",
    ready: bool | None = None,
    limits: Mapping[str, str] | None = None,
    resource_claims: Iterable[str] = (),
    annotations: Mapping[str, str] | None = None,
    ip: str | None = None,
    created_at: float | None = None,
    scheduled_at: float | None = None,
    ready_at: float | None = None,
) -> Obj:
    """A Pod as the API server returns it. ``containers`` maps names to ``containerID`` (``containerd://…``;
    ``None``: not started yet, so no id). ``ready`` (default: every container started) sets the containers'
    ``ready`` and the pod's ``Ready`` condition. ``limits`` (``{"nvidia.com/gpu": "1"}``) go on every
    container; ``resource_claims`` name the pod's ResourceClaims (DRA); ``annotations`` and ``ip``
    (``status.podIP``) are what an engine scrape is found by. ``created_at``, ``scheduled_at`` and
    ``ready_at`` (Unix seconds) are its ``creationTimestamp`` (default 2025-01-01T00:00:00Z) and the
    ``lastTransitionTime`` of its ``PodScheduled`` and ``Ready`` conditions (default: its creation): what its
    cold start is read from."""
    containers = {"main": None} if containers is None else containers
    created = _rfc3339(created_at) if created_at is not None else "2025-01-01T00:00:00Z"
    statuses = []
    for cname, cid in containers.items():
        started = ready if ready is not None else cid is not None
        status: Obj = {"name": cname, "ready": started, "restartCount": 0, "image": "busybox"}
        if cid is not None:
            status["containerID"] = cid
            status["state"] = {"running": {"startedAt": "2025-01-01T00:00:00Z"}}
        else:
            status["state"] = {"waiting": {"reason": "ContainerCreating"}}
        statuses.append(status)
    all_ready = bool(statuses) and all(st["ready"] for st in statuses)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuidlib.uuid4()),
            "labels": dict(labels or {}),
            **({"annotations": dict(annotations)} if annotations else {}),
            "creationTimestamp": created,
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": c, "image": "busybox", **({"resources": {"limits": dict(limits)}} if limits else {})}
                for c in containers
            ],
            **(
                {"resourceClaims": [{"name": n, "resourceClaimName": n} for n in resource_claims]}
                if resource_claims
                else {}
            ),
        },
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": _rfc3339(scheduled_at) if scheduled_at is not None else created,
                },
                {
                    "type": "Ready",
                    "status": "True" if all_ready else "False",
                    "lastTransitionTime": _rfc3339(ready_at) if ready_at is not None else created,
                },
            ],
            "containerStatuses": statuses,
            **({"podIP": ip} if ip else {}),
        },
    }


def _rfc3339(seconds: float) -> str:
    """Unix seconds as the API writes a time: RFC 3339 in UTC, whole seconds."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_field_selector(text: str) -> list[tuple[str, str, bool]]:
    out = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key, value, False))
        else:
            key, value = re.split(r"==?", term, maxsplit=1)
            out.append((key, value, True))
    return out


def _field(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part, "") if isinstance(cur, dict) else ""
    return str(cur)


def match_labels(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a ``labelSelector`` string, by ``gpuscale.scaling.selector`` (the scaler's own
    parser: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``); empty matches all.
    ``SelectorError`` for a selector the API server would refuse."""
    return not selector.strip() or _selector(selector).matches(labels)


@functools.lru_cache(maxsize=256)
def _selector(text: str) -> LabelSelector:
    return parse_selector(text)


def format_label_selector(selector: Obj) -> str:
    """``metav1.LabelSelector`` → its string form, requirements sorted by key (as ``selector.String()``)."""
    reqs: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        text = {
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }[op]
        reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs))


def write_kubeconfig(
    path: Path, server: str, token: str | None = None, *, namespace: str = "default"
) -> Path:
    """A kubeconfig with one cluster/user/context pointing at ``server`` (JSON is valid YAML)."""
    user: Obj = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [
            {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
        ],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config, indent=2))
    return path


_KINDS = {  # lists and watches
    "pods": "Pod",
    "nodes": "Node",
    "resourceslices": "ResourceSlice",
    "endpointslices": "EndpointSlice",
}
_DRA_GROUP = "resource.k8s.io"


def _dra_version_of(obj: Obj, version: str) -> Obj:
    """A ResourceSlice stored in the ``v1`` form, as ``resource.k8s.io/<version>`` serves it."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{_DRA_GROUP}/{version}"
    if version == "v1beta1":
        spec = out.get("spec") or {}
        spec["devices"] = [
            {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
            for d in spec.get("devices") or []
        ]
    return out


class _Watch:
    def __init__(self, request: web.Request, plural: str, bookmarks: bool) -> None:
        self.request = request
        self.plural = plural
        self.bookmarks = bookmarks
        self.queue: asyncio.Queue[Obj | None] = asyncio.Queue()


class LocalApiServer:
    def __init__(self, *, token: str | None = "fake-token") -> None:
        self.token = token
        self.resource_version = 1000
        self.pods: dict[tuple[str, str], Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self.resource_slices: dict[str, Obj] = {}
        self.services: dict[tuple[str, str], Obj] = {}
        self.endpoint_slices: dict[tuple[str, str], Obj] = {}
        self.objects: dict[tuple[str, str, str, str], Obj] = {}  # (groupVersion, plural, namespace, name)
        self.resources: dict[str, list[Obj]] = copy.deepcopy(_BUILTIN_RESOURCES)
        self.serve_dra_versions("v1")
        self.history: list[tuple[int, str, Obj]] = []  # (resourceVersion, plural, event): pods and nodes
        self.oldest_resource_version = self.resource_version
        self.gone_as_status = False
        self.fail_next: list[int] = []  # HTTP statuses to answer the next requests with
        self.fail_pod_lists_until = 0.0  # loop time until which every pod list or watch is answered 500
        self.requests: list[str] = []  # "GET /path?query" of every request
        self._watches: set[_Watch] = set()
        # called with (groupVersion, plural, namespace, name, replicas) after a write to ``/scale``
        self.on_scale: list[Callable[[str, str, str, str, int], None]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ----- lifecycle
    async def start(self, ssl_context: ssl.SSLContext | None = None) -> str:
        """Serve on a free loopback port, over TLS with ``ssl_context``; return the URL."""
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/api/v1", self._discovery_core)
        app.router.add_get("/apis/{group}", self._discovery_api_group)
        app.router.add_get("/apis/{group}/{version}", self._discovery_group)
        app.router.add_get(f"/apis/{_DRA_GROUP}/{{version}}/resourceslices", self._resource_slices)
        app.router.add_get("/api/v1/pods", self._pods)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._pods)
        app.router.add_get("/api/v1/nodes", self._nodes)
        app.router.add_get("/api/v1/nodes/{name}", self._get_node)
        app.router.add_get("/api/v1/namespaces/{namespace}/services/{name}", self._get_service)
        app.router.add_get(
            "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", self._endpoint_slices
        )
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", self._get_object)
        app.router.add_get(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/scale", self._get_scale
        )
        for method in ("PATCH", "PUT"):
            app.router.add_route(
                method,
                "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/scale",
                self._set_scale,
            )
        self._runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ----- pods
    def _bump(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)

    def _emit(self, kind: str, obj: Obj, plural: str = "pods") -> None:
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self.history.append((int(obj["metadata"]["resourceVersion"]), plural, event))
        for w in self._watches:
            if w.plural == plural:
                w.queue.put_nowait(event)

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

    def delete_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        node["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", node, "nodes")

    # ----- DRA ResourceSlices
    def serve_dra_versions(self, *versions: str) -> None:
        """Serve ``resource.k8s.io`` in these versions, preferred first (none: the group is not served)."""
        for gv in [gv for gv in self.resources if gv.startswith(f"{_DRA_GROUP}/")]:
            del self.resources[gv]
        for version in versions:
            self.resources[f"{_DRA_GROUP}/{version}"] = [
                {
                    "name": "resourceslices",
                    "singularName": "resourceslice",
                    "namespaced": False,
                    "kind": "ResourceSlice",
                    "verbs": ["get", "list", "watch"],
                }
            ]

    def put_resource_slice(
        self,
        name: str,
        *,
        node: str,
        driver: str,
        devices: Mapping[str, Mapping[str, Obj]],
        pool: str | None = None,
        generation: int = 1,
    ) -> Obj:
        """Add or replace the ResourceSlice ``name`` of ``node``: ``devices`` maps each device name to its
        attributes (``{"uuid": {"string": "GPU-…"}}``); the pool is named after the node unless given."""
        slice_: Obj = {
            "kind": "ResourceSlice",
            "apiVersion": f"{_DRA_GROUP}/v1",
            "metadata": {"name": name, "uid": str(uuidlib.uuid4()), "resourceVersion": self._bump()},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
                "devices": [{"name": d, "attributes": dict(a)} for d, a in devices.items()],
            },
        }
        kind = "MODIFIED" if name in self.resource_slices else "ADDED"
        self.resource_slices[name] = slice_
        self._emit(kind, slice_, "resourceslices")
        return slice_

    def delete_resource_slice(self, name: str) -> None:
        slice_ = self.resource_slices.pop(name)
        slice_["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", slice_, "resourceslices")

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

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        slice_ = self.endpoint_slices.pop((namespace, name))
        slice_["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", slice_, "endpointslices")

    def compact(self) -> None:
        """Forget the event history (etcd compaction): watches from any older resourceVersion get 410."""
        self.history.clear()
        self.oldest_resource_version = self.resource_version

    def bookmark(self) -> None:
        for w in self._watches:
            if w.bookmarks:
                obj = {
                    "kind": _KINDS[w.plural],
                    "apiVersion": self._api_version(w.request, w.plural),
                    "metadata": {"resourceVersion": str(self.resource_version)},
                }
                w.queue.put_nowait({"type": "BOOKMARK", "object": obj})

    def close_watches(self) -> None:
        """End every open watch cleanly (what the server does when ``timeoutSeconds`` runs out)."""
        for w in self._watches:
            w.queue.put_nowait(None)

    @property
    def watch_count(self) -> int:
        return len(self._watches)

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

    def add_resource(self, group_version: str, plural: str, kind: str, *, scalable: bool = True) -> None:
        """Register a custom resource for discovery (and its ``/scale`` subresource)."""
        entries = self.resources.setdefault(group_version, [])
        entries.append(
            {
                "name": plural,
                "singularName": plural[:-1],
                "namespaced": True,
                "kind": kind,
                "verbs": ["get", "list", "watch"],
            }
        )
        if scalable:
            entries.append(
                {
                    "name": f"{plural}/scale",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Scale",
                    "group": "autoscaling",
                    "version": "v1",
                    "verbs": ["get", "patch", "update"],
                }
            )

    # ----- HTTP
    @staticmethod
    def status(code: int, reason: str, message: str, details: Obj | None = None) -> web.Response:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details or {},
            "code": code,
        }
        return web.json_response(body, status=code)

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.status(401, "Unauthorized", "Unauthorized")
        if request.path.endswith("/pods") and asyncio.get_running_loop().time() < self.fail_pod_lists_until:
            return self.status(500, "InternalError", "injected failure: pod lists failing")
        if self.fail_next:
            code = self.fail_next.pop(0)
            return self.status(
                code, "InternalError" if code >= 500 else "BadRequest", f"injected failure {code}"
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def _discovery_core(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "APIResourceList", "groupVersion": "v1", "resources": self.resources["v1"]}
        )

    async def _discovery_api_group(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        versions = [gv.split("/", 1)[1] for gv in self.resources if gv.startswith(f"{group}/")]
        if not versions:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return web.json_response(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": group,
                "versions": entries,
                "preferredVersion": entries[0],
            }
        )

    async def _discovery_group(self, request: web.Request) -> web.Response:
        gv = f"{request.match_info['group']}/{request.match_info['version']}"
        if gv not in self.resources:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": gv,
                "resources": self.resources[gv],
            }
        )

    def _selected(self, request: web.Request, obj: Obj) -> bool:
        ns = request.match_info.get("namespace")
        if ns is not None and obj["metadata"].get("namespace") != ns:
            return False
        for key, value, equal in _parse_field_selector(request.query.get("fieldSelector", "")):
            if (_field(obj, key) == value) != equal:
                return False
        return match_labels(request.query.get("labelSelector", ""), obj["metadata"].get("labels") or {})

    def _collection(self, plural: str) -> Mapping[Any, Obj]:
        collections: dict[str, Mapping[Any, Obj]] = {
            "pods": self.pods,
            "nodes": self.nodes,
            "resourceslices": self.resource_slices,
            "endpointslices": self.endpoint_slices,
        }
        return collections[plural]

    @staticmethod
    def _api_version(request: web.Request, plural: str) -> str:
        if plural == "endpointslices":
            return "discovery.k8s.io/v1"
        return f"{_DRA_GROUP}/{request.match_info['version']}" if plural == "resourceslices" else "v1"

    def _render(self, request: web.Request, plural: str, obj: Obj) -> Obj:
        """``obj`` in the version ``request`` asked for."""
        return _dra_version_of(obj, request.match_info["version"]) if plural == "resourceslices" else obj

    async def _resource_slices(self, request: web.Request) -> web.StreamResponse:
        if f"{_DRA_GROUP}/{request.match_info['version']}" not in self.resources:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        return await self._list(request, "resourceslices")

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        return await self._list(request, "pods")

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        return await self._list(request, "nodes")

    async def _endpoint_slices(self, request: web.Request) -> web.StreamResponse:
        return await self._list(request, "endpointslices")

    async def _get_service(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        svc = self.services.get((namespace, name))
        if svc is None:
            return self.status(
                404, "NotFound", f'services "{name}" not found', {"name": name, "kind": "services"}
            )
        return web.json_response(svc)

    async def _get_node(self, request: web.Request) -> web.Response:
        node = self.nodes.get(request.match_info["name"])
        if node is None:
            name = request.match_info["name"]
            return self.status(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
        return web.json_response(node)

    async def _list(self, request: web.Request, plural: str) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request, plural)
        pods = sorted(
            ((k, p) for k, p in self._collection(plural).items() if self._selected(request, p)),
            key=lambda kp: kp[0],
        )
        list_rv, start = self.resource_version, 0
        if cont := request.query.get("continue"):
            rv_text, start_text = cont.split(":", 1)
            list_rv, start = int(rv_text), int(start_text)
            if list_rv < self.oldest_resource_version:
                return self.status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a new list without the continue parameter.",
                )
        limit = int(request.query.get("limit", "0") or 0)
        end = start + limit if limit else len(pods)
        metadata: Obj = {"resourceVersion": str(list_rv)}
        if end < len(pods):
            metadata["continue"] = f"{list_rv}:{end}"
            metadata["remainingItemCount"] = len(pods) - end
        items = [self._render(request, plural, p) for _, p in pods[start:end]]
        return web.json_response(
            {
                "kind": f"{_KINDS[plural]}List",
                "apiVersion": self._api_version(request, plural),
                "metadata": metadata,
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, plural: str) -> web.StreamResponse:
        rv_text = request.query.get("resourceVersion", "")
        since = int(rv_text) if rv_text not in ("", "0") else None
        gone = since is not None and since < self.oldest_resource_version
        gone_message = f"too old resource version: {since} ({self.oldest_resource_version})"
        if gone and self.gone_as_status:
            return self.status(410, "Expired", gone_message)
        watch = _Watch(request, plural, request.query.get("allowWatchBookmarks") == "true")
        if gone:
            watch.queue.put_nowait(
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": gone_message,
                        "reason": "Expired",
                        "code": 410,
                    },
                }
            )
            watch.queue.put_nowait(None)
        elif since is None:  # "0" / unset: synthetic ADDED for the current state, then changes
            for obj in self._collection(plural).values():
                watch.queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(obj)})
        else:
            for rv, kind, event in self.history:
                if rv > since and kind == plural:
                    watch.queue.put_nowait(event)
        self._watches.add(watch)  # no await since the replay: no event can fall between
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        timeout = float(request.query.get("timeoutSeconds", "0") or 0) or None
        try:
            await response.prepare(request)
            async with asyncio.timeout(timeout):
                while (item := await watch.queue.get()) is not None:
                    if item["type"] in ("ERROR", "BOOKMARK"):
                        await response.write(json.dumps(item).encode() + b"\n")
                    elif self._selected(request, item["object"]):
                        event = {**item, "object": self._render(request, plural, item["object"])}
                        await response.write(json.dumps(event).encode() + b"\n")
        except TimeoutError:
            pass
        except ConnectionResetError:  # the client went away
            return response
        finally:
            self._watches.discard(watch)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _lookup(self, request: web.Request) -> tuple[Obj | None, web.Response | None]:
        m = request.match_info
        gv = f"{m['group']}/{m['version']}"
        obj = self.objects.get((gv, m["plural"], m["namespace"], m["name"]))
        if obj is None:
            group = m["group"]
            return None, self.status(
                404,
                "NotFound",
                f'{m["plural"]}.{group} "{m["name"]}" not found',
                {"name": m["name"], "group": group, "kind": m["plural"]},
            )
        return obj, None

    async def _get_object(self, request: web.Request) -> web.Response:
        obj, error = self._lookup(request)
        return error or web.json_response(obj)

    async def _get_scale(self, request: web.Request) -> web.Response:
        obj, error = self._scalable(request)
        if error is not None or obj is None:
            return error or self.status(500, "InternalError", "unreachable")
        return web.json_response(self._scale_of(obj))

    def _scalable(self, request: web.Request) -> tuple[Obj | None, web.Response | None]:
        m = request.match_info
        gv = f"{m['group']}/{m['version']}"
        if not any(r["name"] == f"{m['plural']}/scale" for r in self.resources.get(gv, [])):
            return None, self.status(404, "NotFound", "the server could not find the requested resource")
        return self._lookup(request)

    async def _set_scale(self, request: web.Request) -> web.Response:
        """``PATCH`` (a merge patch) or ``PUT`` of a Scale: only ``spec.replicas`` is read."""
        obj, error = self._scalable(request)
        if error is not None or obj is None:
            return error or self.status(500, "InternalError", "unreachable")
        try:
            body = await request.json()
            replicas = body["spec"]["replicas"]
        except (ValueError, KeyError, TypeError):
            return self.status(400, "BadRequest", "the body must be a Scale with spec.replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            return self.status(
                422,
                "Invalid",
                f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0",
            )
        obj.setdefault("spec", {})["replicas"] = replicas
        obj["metadata"]["resourceVersion"] = self._bump()
        m = request.match_info
        for callback in self.on_scale:
            callback(f"{m['group']}/{m['version']}", m["plural"], m["namespace"], m["name"], replicas)
        return web.json_response(self._scale_of(obj))

    def _scale_of(self, obj: Obj) -> Obj:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if isinstance(status.get("selector"), str):
            selector = status["selector"]
        elif isinstance(spec.get("selector"), dict):
            selector = format_label_selector(spec["selector"])
        else:
            selector = ""
        scale_status: Obj = {"replicas": status.get("replicas", 0)}
        if selector:
            scale_status["selector"] = selector
        scale: Obj = {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
            "spec": {"replicas": spec.get("replicas", 1)},
            "status": scale_status,
        }
        return scale

    # convenience for tests
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
