"""A collection of the Kubernetes API kept current by list+watch: the loop of an informer, not its cache.

The loop: list (paged) → watch from the list's resourceVersion with bookmarks → on a clean end, watch again
from the last resourceVersion seen → on ``410 Gone`` (an ERROR event, or the HTTP status), list again → on
any other failure, back off exponentially and retry.

A subclass names the collection (``path``, ``_selector``) and keeps what it needs of each object
(``_replace`` after a complete list, ``_upsert`` and ``_delete`` per event), each returning whether anything
it keeps changed; ``changed`` is then set and ``version`` bumped. Objects are plain JSON: gpuscale reads a few
fields, and kubernetes_asyncio's model classes cost memory on every node.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._http import Json, KubeApi, get_json, iter_lines, open_stream
from .errors import KubeApiError

__all__ = ["ListWatch", "NodeListWatch", "WatchSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    page_size: int = 500
    watch_timeout_s: int = 300  # the server ends a watch after this; the watcher then resumes it
    read_timeout_s: float = 120.0  # no byte for this long (bookmarks come about once a minute): reconnect
    request_timeout_s: float = 30.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


class _Expired(Exception):
    """The resourceVersion we hold is gone (410): list again."""


class ListWatch:
    """List+watch of ``path`` filtered by ``_selector()``. ``await run()`` until cancelled."""

    path: str = ""
    # what goes wrong while the watch fails, for the log: "pod labels may be out of date"
    stale_consequence: str = "data may be out of date"

    def __init__(
        self,
        api: KubeApi,
        settings: WatchSettings | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.settings = settings or WatchSettings()
        self._sleep = sleep
        self.resource_version: str | None = None
        self.version = 0
        self.changed = asyncio.Event()
        self.synced = asyncio.Event()  # set after the first complete list
        self.lists = 0
        self.failures = 0

    # ----- what a subclass says
    def describe(self) -> str:
        """What is watched, for the log: "pods of node n1"."""
        return self.path

    def _selector(self) -> list[tuple[str, str]]:
        return []

    def _replace(self, items: list[Json]) -> bool:
        """The complete list: keep it; True if what is kept changed."""
        raise NotImplementedError

    def _upsert(self, obj: Json) -> bool:
        raise NotImplementedError

    def _delete(self, obj: Json) -> bool:
        raise NotImplementedError

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
                    "%s: resourceVersion %s expired; listing again", self.describe(), self.resource_version
                )
                self.resource_version = None
            except KubeApiError as e:
                self.failures += 1
                log.warning(
                    "%s: %s; %s, retrying in %.1fs", self.describe(), e, self.stale_consequence, backoff
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.settings.backoff_max_s)

    async def _list(self) -> None:
        items: list[Json] = []
        cont = ""
        while True:
            query = [*self._selector(), ("limit", str(self.settings.page_size))]
            if cont:
                query.append(("continue", cont))
            try:
                body = await get_json(self.api, self.path, query, timeout=self.settings.request_timeout_s)
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
        self.lists += 1
        self.resource_version = str(meta.get("resourceVersion") or "") or None
        if self._replace(items):
            self._bump()
        self.synced.set()

    async def _watch(self) -> int:
        query = [
            *self._selector(),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.settings.watch_timeout_s)),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        try:
            response = await open_stream(
                self.api,
                self.path,
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
            async for line in iter_lines(response, self.path):
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
            log.warning("%s: ignoring a malformed watch event (%s): %.200r", self.describe(), e, line)
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise KubeApiError(
                self.path,
                int(obj.get("code") or 0),
                str(obj.get("reason") or ""),
                str(obj.get("message") or "watch ERROR event"),
            )
        if kind in ("ADDED", "MODIFIED"):
            if self._upsert(obj):
                self._bump()
        elif kind == "DELETED" and self._delete(obj):
            self._bump()
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)

    def _bump(self) -> None:
        self.version += 1
        self.changed.set()


class NodeListWatch(ListWatch):
    """A list+watch about one node, ``node_name`` (its pods, its Node object)."""

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        settings: WatchSettings | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(api, settings, sleep=sleep)
        self.node_name = node_name
