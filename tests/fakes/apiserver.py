"""The fake Kubernetes API server of the tests: the demo cluster's local API server, with what only tests
need on top.

One implementation (``gpuscale.demo.apiserver``) serves both the demo and the tests; ``FakeApiServer`` adds
fault injection (``fail_next``: HTTP statuses to answer the next requests with; ``fail_pod_lists_until``:
loop time until which every pod list or watch is answered 500; ``gone_as_status``: a watch from a compacted
resourceVersion gets ``410`` as its HTTP status rather than an ERROR event after ``200 OK``), the log of
every request (``requests``), control of the watches (``compact``, ``bookmark``, ``watch_count``),
discovery (``serve_dra_versions``, ``add_resource``) and the writes the demo never makes (``delete_node``,
``put_resource_slice``, ``delete_resource_slice``, ``delete_endpoint_slice``). ``select`` and
``target_pods`` add what a request path's Service of pods has beyond what its ``put_service`` and
``put_endpoint_slice`` write (a selector, the endpoints' ``targetRef``).
"""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from gpuscale.demo._apiobjects import DRA_GROUP, KINDS
from gpuscale.demo.apiserver import (
    LocalApiServer,
    Obj,
    format_label_selector,
    make_pod,
    match_labels,
    write_kubeconfig,
)

__all__ = [
    "FakeApiServer",
    "format_label_selector",
    "make_pod",
    "match_labels",
    "pod_ref",
    "select",
    "target_pods",
    "write_kubeconfig",
]


class FakeApiServer(LocalApiServer):
    """The local API server with the tests' knobs: fault injection, the request log, watch control."""

    def __init__(self, *, token: str | None = "fake-token") -> None:
        super().__init__(token=token)
        self.gone_as_status = False
        self.fail_next: list[int] = []  # HTTP statuses to answer the next requests with
        self.fail_pod_lists_until = 0.0  # loop time until which every pod list or watch is answered 500
        self.requests: list[str] = []  # "GET /path?query" of every request

    def _refuse(self, request: web.Request) -> web.Response | None:
        self.requests.append(f"{request.method} {request.path_qs}")
        refused = super()._refuse(request)
        if refused is not None:
            return refused
        if request.path.endswith("/pods") and asyncio.get_running_loop().time() < self.fail_pod_lists_until:
            return self.status(500, "InternalError", "injected failure: pod lists failing")
        if self.fail_next:
            code = self.fail_next.pop(0)
            return self.status(
                code, "InternalError" if code >= 500 else "BadRequest", f"injected failure {code}"
            )
        return None

    def _expired(self, message: str) -> web.Response | None:
        return self.status(410, "Expired", message) if self.gone_as_status else None

    def compact(self) -> None:
        """Forget the event history (etcd compaction): watches from any older resourceVersion get 410."""
        self.history.clear()
        self.oldest_resource_version = self.resource_version

    def bookmark(self) -> None:
        for w in self._watches:
            if w.bookmarks:
                obj = {
                    "kind": KINDS[w.plural],
                    "apiVersion": self._api_version(w.request, w.plural),
                    "metadata": {"resourceVersion": str(self.resource_version)},
                }
                w.queue.put_nowait({"type": "BOOKMARK", "object": obj})

    def delete_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        node["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", node, "nodes")

    def serve_dra_versions(self, *versions: str) -> None:
        """Serve ``resource.k8s.io`` in these versions, preferred first (none: the group is not served)."""
        for gv in [gv for gv in self.resources if gv.startswith(f"{DRA_GROUP}/")]:
            del self.resources[gv]
        for version in versions:
            self.resources[f"{DRA_GROUP}/{version}"] = [
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
            "apiVersion": f"{DRA_GROUP}/v1",
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

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        slice_ = self.endpoint_slices.pop((namespace, name))
        slice_["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", slice_, "endpointslices")

    @property
    def watch_count(self) -> int:
        return len(self._watches)

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


def select(service: dict[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    """Give a Service ``put_service`` wrote the ``spec.selector`` ``selector`` (read by the next GET)."""
    service["spec"]["selector"] = dict(selector)
    return service


def pod_ref(namespace: str, name: str, kind: str = "Pod") -> dict[str, str]:
    """An endpoint's ``targetRef``, as the EndpointSlice controller writes it for a pod."""
    return {"kind": kind, "namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}"}


def target_pods(slice_: dict[str, Any], targets: Iterable[Mapping[str, str] | None]) -> dict[str, Any]:
    """Give the endpoints of an EndpointSlice ``put_endpoint_slice`` wrote their ``targetRef`` (in order;
    ``None``: none), as the next LIST reads them (a watch already sent it without)."""
    for endpoint, target in zip(slice_["endpoints"], targets, strict=True):
        if target is not None:
            endpoint["targetRef"] = dict(target)
    return slice_
