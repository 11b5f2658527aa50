"""A local Kubernetes API server: an in-process aiohttp app that answers the few requests gpuscale makes, with
the real server's wire format. The demo cluster runs on it, and so do the tests (``tests/fakes/apiserver.py``
adds their fault injection and the writes only they make).

* ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods`` and ``/api/v1/nodes``: lists (``fieldSelector``,
  ``labelSelector``, ``limit``/``continue``, ``metadata.resourceVersion``) and watches (``watch=true``,
  ``resourceVersion``, ``allowWatchBookmarks``, ``timeoutSeconds``): chunked JSON lines of
  ADDED/MODIFIED/DELETED/BOOKMARK events.
  A watch from a resourceVersion older than the retained history gets a ``410 Gone`` as an ERROR event after
  ``200 OK`` (what the real server does).
* ``GET /apis/resource.k8s.io/{version}/resourceslices``: the same, for DRA ResourceSlices, stored in the
  ``v1`` form and served in each version registered in ``resources`` (``v1``; ``v1beta1`` puts a device's
  attributes under ``basic``); ``GET /apis/resource.k8s.io`` is the group's discovery (404 when none is).
* ``GET /api/v1/nodes/{name}``; ``GET /apis/{group}/{version}/namespaces/{ns}/{plural}/{name}`` and
  ``.../{name}/scale`` for stored objects
  (ScaledObjects, Deployments, StatefulSets, custom resources); the Scale's ``status.selector`` is built from
  ``spec.selector`` the way the API server formats a label selector. ``PATCH`` (merge patch) and ``PUT`` of
  ``.../scale`` set ``spec.replicas`` and call every ``on_scale`` callback (the demo's deployment controller).
* ``GET /api/v1/namespaces/{ns}/services/{name}``, and ``GET
  /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices`` lists and watches (a request path's Service
  and its endpoints: ``put_service``, ``put_endpoint_slice``).
* Discovery: ``GET /api/v1`` and ``GET /apis/{group}/{version}``.
* ``Authorization: Bearer <token>`` is checked; errors are ``Status`` objects.

The objects and their history are ``ApiStore``'s (``_apistore``): mutations (``add_pod``, ``modify_pod``,
``delete_pod``; ``put_node``, ``modify_node``; ``put_service``, ``put_endpoint_slice``; ``put_object``,
``update_object``) bump the resourceVersion and reach open watches. The objects as the API writes them and
the selectors are ``_apiobjects``'s; ``make_pod``, ``write_kubeconfig``, ``format_label_selector`` and
``match_labels`` are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ._apiobjects import (
    DRA_GROUP,
    KINDS,
    Obj,
    dra_version_of,
    field_of,
    format_label_selector,
    make_pod,
    match_labels,
    parse_field_selector,
    scale_of,
    write_kubeconfig,
)
from ._apistore import ApiStore, Watch

__all__ = [
    "LocalApiServer",
    "Obj",
    "format_label_selector",
    "make_pod",
    "match_labels",
    "write_kubeconfig",
]


class LocalApiServer(ApiStore):
    """The store served over HTTP on a free loopback port (``start``), until ``stop``."""

    def __init__(self, *, token: str | None = "fake-token") -> None:
        super().__init__()
        self.token = token
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
        app.router.add_get(f"/apis/{DRA_GROUP}/{{version}}/resourceslices", self._resource_slices)
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
        refused = self._refuse(request)
        if refused is not None:
            return refused
        response: web.StreamResponse = await handler(request)
        return response

    def _refuse(self, request: web.Request) -> web.Response | None:
        """The answer to a request turned away before its handler runs (401 without the token); None to
        serve it."""
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.status(401, "Unauthorized", "Unauthorized")
        return None

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
        for key, value, equal in parse_field_selector(request.query.get("fieldSelector", "")):
            if (field_of(obj, key) == value) != equal:
                return False
        return match_labels(request.query.get("labelSelector", ""), obj["metadata"].get("labels") or {})

    @staticmethod
    def _api_version(request: web.Request, plural: str) -> str:
        if plural == "endpointslices":
            return "discovery.k8s.io/v1"
        return f"{DRA_GROUP}/{request.match_info['version']}" if plural == "resourceslices" else "v1"

    def _render(self, request: web.Request, plural: str, obj: Obj) -> Obj:
        """``obj`` in the version ``request`` asked for."""
        return dra_version_of(obj, request.match_info["version"]) if plural == "resourceslices" else obj

    async def _resource_slices(self, request: web.Request) -> web.StreamResponse:
        if f"{DRA_GROUP}/{request.match_info['version']}" not in self.resources:
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
                "kind": f"{KINDS[plural]}List",
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
        if gone and (expired := self._expired(gone_message)) is not None:
            return expired
        watch = Watch(request, plural, request.query.get("allowWatchBookmarks") == "true")
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

    def _expired(self, message: str) -> web.Response | None:
        """The answer to a watch from a resourceVersion older than the history, instead of ``200 OK`` and an
        ERROR event (what the real server does: None)."""
        return None

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
        return web.json_response(scale_of(obj))

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
        return web.json_response(scale_of(obj))
