"""One request-path source read about every second: a Service's ready endpoints, each fetched, parsed and
summed into ``scaling.requestpath.PathReading``s.

Why the scaler reads it itself: at zero replicas, and while every pod of a wake loads, the workload's own pods
cannot say its demand; the gateway in front of it counts every request the moment it arrives. Read from
memory like the rest of the answer, so no KEDA call ever waits on an HTTP fetch.

How, each ``interval_s``:

- **Where.** The Service's ready endpoints that are its pods (``kube.services.resolve_endpoints``: a
  Service without a selector only with ``PathSettings.manual_endpoints``), found again every
  ``resolve_every_s`` (sooner, at most every ``_RETRY_RESOLVE_S``, while the source is missing), in the
  background of the reads, so a gateway's replicas are followed as they come and go and a slow API delays
  no read. An API that does not answer keeps the endpoints known before.
- **Read.** Every endpoint at once, each bounded (``gpuscale.httpfetch``: a timeout, a body cap, no
  redirects, one keep-alive session), parsed for the format's families only (``gateways.selection``) and
  read (``gateways.read``: the workload's arrivals counter and held gauge).
- **Summed.** ``held`` is the sum over the endpoints. ``arrived`` is a counter of the poller's own: the sum
  of each endpoint's increase since its previous read (an endpoint's counter that went back restarted:
  its value is its increase, as Prometheus' ``rate`` counts it; a new endpoint counts from its first read).
  So a gateway replica that comes or goes is no burst and no reset of the sum.
- **Missing, never 0.** No ready endpoint, a failed or unparsable fetch of any endpoint, or no series of the
  workload on any endpoint (``GatewayError``) makes the source missing with one line saying why (one
  endpoint without a series, beside others that have one, has counted none: most gateways make a series at
  the workload's first request through them); the readings before stay
  (``demand`` ages them out). One warning when it goes missing, one line when it reads again.

Every endpoint read is one ``result`` of ``gpuscale_scaler_request_path_reads_total`` (``RESULTS``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass

import aiohttp

from ..errors import ExpositionError
from ..exposition import parse
from ..httpfetch import FetchRefused, fetch
from ..kube._http import KubeApi
from ..kube.errors import ServiceResolutionError
from ..kube.services import resolve_endpoints
from ..scaling.requestpath import PathReading, RequestPath
from . import gateways
from .errors import GatewayError, NoSeries
from .metrics import PATH_RESULTS as RESULTS

__all__ = ["RESULTS", "PathPoller", "PathSettings", "SourceKey"]

log = logging.getLogger(__name__)

_RETRY_RESOLVE_S = 5.0  # while the source is missing, its endpoints are looked up again at most this often
_RESOLVE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PathSettings:
    """How request paths are read: every ``interval_s``, each endpoint within ``timeout_s`` and
    ``max_body_bytes``; ``history_s`` of readings kept; endpoints looked up every ``resolve_every_s``; a
    source no ScaledObject asked about for ``idle_after_s`` stops; at most ``max_sources`` at once;
    ``namespaces``: those whose Services a ScaledObject of another namespace may name
    (``--request-path-namespaces``); ``manual_endpoints``: a Service without a selector (EndpointSlices
    written by hand, any address) is read too (``--request-path-manual-endpoints``), else refused."""

    interval_s: float = 1.0
    timeout_s: float = 0.8
    max_body_bytes: int = 4 * 1024 * 1024
    history_s: float = 120.0
    resolve_every_s: float = 15.0
    idle_after_s: float = 300.0
    max_sources: int = 1024
    namespaces: frozenset[str] = frozenset()
    manual_endpoints: bool = False


@dataclass(frozen=True, slots=True)
class SourceKey:
    """One source: a Service's port and path, read in one format for one match (``None``: every series)."""

    namespace: str
    service: str
    port: int | str
    path: str
    format: str
    match: str | None

    def __str__(self) -> str:
        match = f", {self.match}" if self.match is not None else ""
        return f"Service {self.namespace}/{self.service}:{self.port}{self.path} ({self.format}{match})"


class PathPoller:
    """Reads ``key`` every ``settings.interval_s`` until idle (``run``). ``path()``: what it holds now;
    ``wait()``: until its next read. ``count(result)`` counts each endpoint read."""

    def __init__(
        self,
        key: SourceKey,
        settings: PathSettings,
        api: KubeApi,
        session: Callable[[], aiohttp.ClientSession],
        *,
        count: Callable[[str], None] = lambda result: None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.key = key
        self.settings = settings
        self._api = api
        self._session = session
        self._count = count
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self.endpoints: tuple[str, ...] = ()
        self.missing: str | None = "not read yet"
        self.used_at = monotonic()
        self._readings: collections.deque[PathReading] = collections.deque()
        self._path = RequestPath((), self.missing, str(key))
        self._resolved_at = -math.inf
        self._counts: dict[str, float] = {}  # each endpoint's arrivals counter at its last read
        self._arrived: float | None = None
        self._warned = False
        self._tick = asyncio.Event()
        self._resolving: asyncio.Task[None] | None = None
        self._problem: str | None = None  # why the endpoints cannot be found

    def path(self) -> RequestPath:
        """The readings and why the source is missing (``None``: it reads), and mark it used."""
        self.used_at = self._monotonic()
        return self._path

    async def wait(self) -> None:
        """Return after the next read (or when the poller ends)."""
        await self._tick.wait()

    async def run(self) -> None:
        """Read every ``interval_s`` until no one has asked for ``path()`` for ``idle_after_s``."""
        try:
            while self._monotonic() - self.used_at < self.settings.idle_after_s:
                started = self._monotonic()
                try:
                    await self.read_once()
                except Exception as e:  # a bug: say so, keep the source missing, go on
                    log.error("request path %s: reading failed unexpectedly", self.key, exc_info=e)
                    self._set(None, f"internal error: {type(e).__name__}: {e}")
                await self._sleep(max(0.0, self.settings.interval_s - (self._monotonic() - started)))
        finally:
            self._tick.set()
            if self._resolving is not None and not self._resolving.done():
                self._resolving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._resolving

    async def read_once(self) -> None:
        """One round: look the endpoints up when due, read each, keep the sum or say why not."""
        now = self._clock()
        since = self._monotonic() - self._resolved_at
        due = since >= self.settings.resolve_every_s or (self.missing and since >= _RETRY_RESOLVE_S)
        if due and (self._resolving is None or self._resolving.done()):
            # in the background: a slow API delays no read of the endpoints known
            self._resolved_at = self._monotonic()
            self._resolving = asyncio.create_task(self._resolve(), name=f"endpoints of {self.key}")
        if not self.endpoints and self._resolving is not None and not self._resolving.done():
            await self._resolving  # nothing to read before they are known
        if self._problem is not None:
            self._count("no_endpoint")
            self._set(None, self._problem)
            return
        if not self.endpoints:
            self._count("no_endpoint")
            self._set(None, "no ready endpoint (the Service's EndpointSlices list none Ready on the port)")
            return
        read = await asyncio.gather(*(self._read(address) for address in self.endpoints))
        failed = [(address, why) for address, why, value in read if why is not None and value is None]
        unseen = {address for address, why, value in read if why is not None and value is not None}
        if not failed and len(unseen) == len(read):
            failed = [(address, why) for address, why, _ in read if why is not None]  # no series anywhere
        if failed:
            address, why = failed[0]
            more = f" (and {len(failed) - 1} more endpoints failing)" if len(failed) > 1 else ""
            self._set(None, f"endpoint {address}: {why}{more}")
            return
        values = {address: value for address, _, value in read if value is not None}
        arrived = self._fold({a: v[0] for a, v in values.items()}, unseen)
        helds = [v[1] for v in values.values() if v[1] is not None]
        self._set(PathReading(now, arrived, sum(helds) if helds else None), None)

    async def _resolve(self) -> None:
        """Look the endpoints up into ``endpoints``, and what is wrong into ``_problem`` (the API failing
        keeps those known before)."""
        k = self.key
        try:
            found = await resolve_endpoints(
                self._api,
                k.namespace,
                k.service,
                k.port,
                manual_endpoints=self.settings.manual_endpoints,
                timeout=_RESOLVE_TIMEOUT_S,
            )
        except ServiceResolutionError as e:
            if e.transient and self.endpoints:
                log.debug("request path %s: %s; keeping the endpoints known before", k, e)
                return
            self.endpoints, self._problem = (), str(e)
            return
        except Exception as e:  # a bug: say so, the source missing (a background task: never unretrieved)
            log.error("request path %s: finding its endpoints failed unexpectedly", k, exc_info=e)
            self.endpoints, self._problem = (), f"internal error: {type(e).__name__}: {e}"
            return
        if found.addresses != self.endpoints:
            log.debug("request path %s: endpoints %s", k, ", ".join(found.addresses) or "none")
        self.endpoints, self._problem = found.addresses, None
        if not found.addresses and found.left_out:
            n = found.left_out
            were = "1 endpoint was" if n == 1 else f"{n} endpoints were"
            they = "it is" if n == 1 else "they are"
            self._problem = (
                f"no ready endpoint: {were} left out because {they} not the Service's pods (Pods of "
                f"namespace {k.namespace} that its selector selects, at their own IPs)"
            )

    async def _read(self, address: str) -> tuple[str, str | None, tuple[float | None, float | None] | None]:
        """``(address, why it failed or None, (arrived, held))``; counted."""
        s, k = self.settings, self.key
        try:
            fetched = await fetch(
                self._session(),
                f"http://{address}{k.path}",
                timeout=s.timeout_s,
                max_body_bytes=s.max_body_bytes,
            )
            exposition = parse(fetched.text, gateways.selection(k.format), openmetrics=fetched.openmetrics)
            arrived, held = gateways.read(exposition, k.format, k.match)
        except FetchRefused as e:
            result = "parse_error" if e.result == "bad_content_type" else e.result
            self._count(result)
            return address, e.detail, None
        except ExpositionError as e:
            self._count("parse_error")
            return address, f"not a valid exposition: {e}", None
        except NoSeries as e:
            # an endpoint that has not served the workload since it started has no series of it yet (most
            # gateways make a series at its first request): it counted none, while another endpoint does
            self._count("no_series")
            return address, str(e), (None, None)
        except GatewayError as e:  # a value that cannot be right: the source is missing
            self._count("parse_error")
            return address, str(e), None
        self._count("ok")
        return address, None, (arrived, held)

    def _fold(self, counts: dict[str, float | None], unseen: Set[str] = frozenset()) -> float | None:
        """The poller's arrivals counter after this read of each endpoint's (see the module's docstring).
        ``unseen``: endpoints read with no series of the workload yet: when their series appears, all of its
        count is new (it started at 0 after this read)."""
        known = {a: v for a, v in counts.items() if v is not None and math.isfinite(v)}
        if not known:
            self._counts = {a: self._counts.get(a, 0.0) for a in unseen}
            return self._arrived
        if self._arrived is None:
            self._arrived = sum(known.values())
        else:
            for address, value in known.items():
                before = self._counts.get(address)
                if before is not None:
                    self._arrived += value - before if value >= before else value
        # an endpoint read before keeps its last count; only one never counted before starts at 0
        self._counts = known | {a: self._counts.get(a, 0.0) for a in unseen}
        return self._arrived

    def _set(self, reading: PathReading | None, missing: str | None) -> None:
        """Keep ``reading`` (trimmed to ``history_s``) or note ``missing``; log a change; wake waiters."""
        if reading is not None and self._readings and reading.timestamp <= self._readings[-1].timestamp:
            reading = None  # the clock stepped back: readings stay in order (their rates need it)
        if reading is not None:
            self._readings.append(reading)
            while (
                self._readings and self._readings[0].timestamp < reading.timestamp - self.settings.history_s
            ):
                self._readings.popleft()
        if missing is not None and not self._warned:
            log.warning(
                "request path %s is missing: %s; its demand is not counted until it reads again (never as 0)",
                self.key,
                missing,
            )
            self._warned = True
        elif missing is None and self._warned:
            log.info("request path %s reads again", self.key)
            self._warned = False
        self.missing = missing
        self._path = RequestPath(tuple(self._readings), missing, str(self.key))
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()
