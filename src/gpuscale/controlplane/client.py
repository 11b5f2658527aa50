"""A small synchronous client of the real API server, for the launcher, the tests and the benchmark.

Why not ``kubernetes_asyncio`` (which the agent and scaler use): the launcher and the test fixtures are
synchronous and need only a handful of calls; ``urllib`` with an ``ssl`` context does them with no event loop.
``apply`` is server-side apply (``PATCH application/apply-patch+yaml``), the object's resource found through
discovery, so any manifest (a Helm chart's output, KEDA's CRDs) can be applied as ``kubectl apply`` would.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import KubeRequestFailed

__all__ = ["KubeClient", "load_documents"]

Json = dict[str, Any]
T = TypeVar("T")


def load_documents(text: str) -> list[Json]:
    return [d for d in yaml.safe_load_all(text) if d]


class KubeClient:
    def __init__(
        self,
        server: str,
        ca: Path,
        *,
        cert: Path | None = None,
        key: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._ctx = ssl.create_default_context(cafile=str(ca))
        if cert is not None and key is not None:
            self._ctx.load_cert_chain(str(cert), str(key))
        self._token = token
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}  # (apiVersion, kind) -> (plural, ns?)

    # ----- raw requests
    def request(
        self,
        method: str,
        path: str,
        body: Json | str | None = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Json:
        data = None
        if body is not None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                message = str(json.loads(text).get("message", text))
            except ValueError:
                message = text
            raise KubeRequestFailed(method, path, e.code, message.strip()) from e
        except (urllib.error.URLError, OSError) as e:
            raise KubeRequestFailed(method, path, 0, str(e)) from e
        out = json.loads(raw) if raw.strip().startswith(b"{") else {"text": raw.decode(errors="replace")}
        return out if isinstance(out, dict) else {"items": out}

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeRequestFailed as e:
            if e.status == 404:
                return False
            raise
        return True

    def create(self, path: str, obj: Json) -> Json:
        return self.request("POST", path, obj)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", path)
        except KubeRequestFailed as e:
            if not (missing_ok and e.status == 404):
                raise

    def merge_patch(self, path: str, patch: Json) -> Json:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    # ----- objects
    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.get(base).get("resources", []):
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = (r["name"], bool(r["namespaced"]))
        if key not in self._resources:
            raise KubeRequestFailed("GET", f"/apis/{api_version}", 404, f"the API server serves no {kind}")
        return self._resources[key]

    def path_of(
        self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None
    ) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace or 'default'}"
        return f"{base}/{plural}" + (f"/{name}" if name else "")

    def object_path(self, obj: Json) -> str:
        meta = obj.get("metadata", {})
        return self.path_of(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def apply(self, obj: Json, *, field_manager: str = "gpuscale-controlplane") -> Json:
        """Server-side apply of one object (created or updated, conflicts forced)."""
        query = urllib.parse.urlencode({"fieldManager": field_manager, "force": "true"})
        return self.request(
            "PATCH",
            f"{self.object_path(obj)}?{query}",
            json.dumps(obj),
            content_type="application/apply-patch+yaml",
        )

    def apply_all(self, objs: Iterable[Json]) -> None:
        for obj in objs:
            self.apply(obj)


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    interval: float = 0.25,
    *,
    fatal: tuple[type[Exception], ...] = (),
) -> T:
    """``probe()`` until it returns something other than None. Its exceptions count as not yet, except those
    of the ``fatal`` types, which end the wait at once (a process that has exited will not become ready)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = probe()
        except fatal:
            raise
        except Exception as e:  # a probe's failure is "not yet"; the last one is reported
            last, value = e, None
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what}: not within {timeout:g} s" + (f" (last error: {last})" if last else "")
            )
        time.sleep(interval)
