"""The request paths the scaler reads: one ``PathPoller`` per distinct source, started by the first
ScaledObject that names it, stopped once none has asked for it for a while.

Why a registry: ScaledObjects are only known from KEDA's calls, so a source is started by a call and kept
alive by the calls that follow (a ``StreamIsActive`` evaluates on every reading, ``GetMetrics`` every poll).
Two ScaledObjects that name the same Service, port, path, format and match share one poller. The calls never
wait on a fetch: the first one starts the poller and answers with the source not read yet.

Where a ScaledObject may point: a Service of its own namespace, or of one the operator lists
(``--request-path-namespaces``); anything else is ``INVALID_ARGUMENT`` on every call, naming the key, the
value and the flag. Without the Kubernetes API no Service can be found: ``FAILED_PRECONDITION``. Neither
touches another ScaledObject's answers. At most ``max_sources`` sources are read; one more is missing,
saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from .. import __version__
from ..httpfetch import open_session
from ..kube._http import KubeApi
from ..lifecycle import cancel_tasks
from ..scaling.keys import show
from ..scaling.metadata import TriggerMetadata
from ..scaling.requestpath import RequestPath, demand
from .errors import MetadataError
from .metrics import ScalerMetrics
from .pathpoller import RESULTS, PathPoller, PathSettings, SourceKey
from .status import RequestPathNeedsApi

__all__ = ["PathSettings", "RequestPaths", "SourceKey", "either"]

log = logging.getLogger(__name__)

_FULL_LOG_EVERY_S = 60.0


class RequestPaths:
    """The pollers of every source in use. ``api``: the Kubernetes API (``None``: none, every ``requestPath``
    is ``FAILED_PRECONDITION``). ``close`` stops them all."""

    def __init__(
        self,
        settings: PathSettings,
        api: KubeApi | None,
        *,
        metrics: ScalerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._api = api
        self._metrics = metrics
        self._clock = clock
        self._monotonic = monotonic
        self._pollers: dict[SourceKey, PathPoller] = {}
        self._tasks: dict[SourceKey, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._full_logged = -_FULL_LOG_EVERY_S
        self._closing = False

    def __len__(self) -> int:
        return len(self._pollers)

    # -- what a call asks ----------------------------------------------------------------------------------
    def key(self, namespace: str, md: TriggerMetadata, written: str | None = None) -> SourceKey:
        """The source ``md`` names for a ScaledObject of ``namespace``; ``MetadataError`` where it may not
        point (another namespace, not allowed) or cannot (no namespace). ``written``: the value as the
        metadata gave it, for the message."""
        ref = md.request_path
        assert ref is not None and md.request_path_format is not None
        text = show(written if written is not None else str(ref))
        where = ref.namespace or namespace
        if not where:
            raise MetadataError(
                (
                    f'parameter "requestPath" value {text} names a Service of the ScaledObject\'s namespace, '
                    "and the ScaledObjectRef has no namespace",
                )
            )
        if where != namespace and where not in self.settings.namespaces:
            allowed = ", ".join(sorted(self.settings.namespaces)) or "none"
            raise MetadataError(
                (
                    f'parameter "requestPath" value {text} names a Service of namespace "{where}", which '
                    f"is not the ScaledObject's (\"{namespace}\") nor one the scaler's "
                    f"--request-path-namespaces allows (allowed: {allowed})",
                )
            )
        return SourceKey(
            where, ref.service, ref.port, ref.path, md.request_path_format, md.request_path_match
        )

    def path(self, namespace: str, md: TriggerMetadata, written: str | None = None) -> RequestPath:
        """What is held of ``md``'s request path now, starting its poller on first use. Never waits."""
        key = self.key(namespace, md, written)
        if self._api is None:
            raise RequestPathNeedsApi(
                f'parameter "requestPath" value {show(str(md.request_path))}: the request path is a Service, '
                "found through the Kubernetes API, and the scaler has none (start it with --kubeconfig or in "
                "a cluster)"
            )
        poller = self._pollers.get(key)
        if poller is None:
            poller = self._start(key)
            if poller is None:
                return RequestPath(
                    (),
                    f"not read: the scaler reads at most {self.settings.max_sources} request paths at once, "
                    "and that many are in use",
                    str(key),
                )
        return poller.path()

    async def wait(self, namespace: str, md: TriggerMetadata) -> None:
        """Until ``md``'s source has read again (a pause of one interval where it has no poller)."""
        poller = self._pollers.get(self.key(namespace, md))
        if poller is None:
            await asyncio.sleep(self.settings.interval_s)
        else:
            await poller.wait()

    def describe(self, namespace: str, md: TriggerMetadata) -> dict[str, object]:
        """For ``explain``: the source, its endpoints, the newest reading and its age, its rate, held count
        and demand (``scaling.requestpath.demand``), and why it is missing."""
        key = self.key(namespace, md)
        out: dict[str, object] = {"source": str(key)}
        path = self.path(namespace, md)
        poller = self._pollers.get(key)
        out["endpoints"] = list(poller.endpoints) if poller is not None else []
        now = self._clock()
        newest = path.readings[-1] if path.readings else None
        out["lastReadingAge"] = None if newest is None else round(now - newest.timestamp, 3)
        out["arrived"] = None if newest is None else newest.arrived
        out["held"] = None if newest is None else newest.held
        pd = demand(path, now, md.request_path_drain_seconds)
        out["rate"] = None if pd is None else pd.rate
        out["demand"] = None if pd is None else pd.demand
        out["missing"] = path.missing
        return out

    # -- pollers -------------------------------------------------------------------------------------------
    def _start(self, key: SourceKey) -> PathPoller | None:
        if len(self._pollers) >= self.settings.max_sources:
            now = self._monotonic()
            if now - self._full_logged >= _FULL_LOG_EVERY_S:
                self._full_logged = now
                log.warning(
                    "request path %s is not read: the scaler reads at most %d at once, and that many are in "
                    "use (sources no ScaledObject asks about stop after %g s)",
                    key,
                    self.settings.max_sources,
                    self.settings.idle_after_s,
                )
            return None
        assert self._api is not None
        metrics = self._metrics
        if metrics is not None:
            for result in RESULTS:  # every result from the start: rate() sees the first failure
                metrics.request_path_reads.labels(key.namespace, key.service, result)

        def count(result: str) -> None:
            if metrics is not None:
                metrics.count_path_read(key.namespace, key.service, result)

        poller = PathPoller(
            key,
            self.settings,
            self._api,
            self._open,
            count=count,
            clock=self._clock,
            monotonic=self._monotonic,
        )
        self._pollers[key] = poller
        task = asyncio.create_task(poller.run(), name=f"request path {key}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._ended(key, poller))
        log.info("reading request path %s every %g s", key, self.settings.interval_s)
        return poller

    def _ended(self, key: SourceKey, poller: PathPoller) -> None:
        if self._closing or self._pollers.get(key) is not poller:
            return
        del self._pollers[key]
        self._tasks.pop(key, None)
        log.info("stopped reading request path %s: no ScaledObject asked about it for a while", key)
        if self._metrics is not None and not any(
            (k.namespace, k.service) == (key.namespace, key.service) for k in self._pollers
        ):
            self._metrics.forget_path_source(key.namespace, key.service)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = open_session(f"gpuscale-scaler/{__version__}")
        return self._session

    async def close(self) -> None:
        """Stop every poller and close the HTTP session."""
        self._closing = True
        await cancel_tasks(list(self._tasks.values()), 3.0)
        self._tasks.clear()
        self._pollers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None


async def either(*waits: Awaitable[None]) -> None:
    """Return when the first of ``waits`` does; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
