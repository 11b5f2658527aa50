"""Scrape engine endpoints: one shared aiohttp session, every endpoint at once, each bounded.

Why bounded: the agent scrapes every engine pod of its node once per sampling interval, and an engine that
hangs, answers a 10 MB page or an HTML error page must cost that pod its engine data and nothing else: not
the round, not the agent's memory, not the GPU sampling.

How: ``gpuscale.httpfetch`` (shared with the scaler's request path) does the bounded GET: one
``aiohttp.ClientSession`` with keep-alive, a timeout below the interval (``ScrapeSettings.timeout``; a round
is as long as its slowest scrape, at most the timeout), a cap on the body (``max_body_bytes``, 4 MiB),
Prometheus' content negotiation, ``Accept-Encoding: identity``, and no redirects (the agent connects to the
pod IP it was given and nowhere else).

Every outcome is one ``result`` of ``gpuscale_agent_engine_scrapes_total`` (``RESULTS``): ``ok``, ``partial``
(read, but a signal was absent or could not be right: see the sample's notes), ``timeout``, ``too_large``,
``http_error`` (a status other than 200), ``connect_error`` (refused, reset, cut short), ``bad_content_type``
(HTML, JSON, …), ``parse_error``, ``no_metrics`` (no series of a supported engine), and ``no_endpoint`` (the
pod asks to be scraped but its annotations or its missing IP make that impossible). Anything but ``ok`` and
``partial`` is an ``EngineMissing``: the pod's engine data is missing, never 0. aiohttp's exceptions become
results in ``gpuscale.httpfetch`` and nowhere else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from ... import __version__, httpfetch
from ...errors import ExpositionError
from ...exposition import parse
from ...httpfetch import ACCEPT, Fetched, open_session, read_body
from ...httpfetch import FetchRefused as _Refused
from ...model import EngineMissing, EngineSample
from .discovery import Endpoint, PodKey
from .mapping import engines_in, map_exposition, selection

__all__ = ["ACCEPT", "RESULTS", "Fetched", "ScrapeSettings", "Scraper", "fetch", "read_body", "sample_of"]

RESULTS = (
    "ok",
    "partial",
    "timeout",
    "too_large",
    "http_error",
    "connect_error",
    "bad_content_type",
    "parse_error",
    "no_metrics",
    "no_endpoint",
)


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    """``timeout``: seconds for one scrape, connect to last byte (keep it below the sampling interval);
    ``max_body_bytes``: the largest body read; ``verify_tls``: check an https endpoint's certificate (off:
    a pod IP is in no certificate)."""

    timeout: float = 0.8
    max_body_bytes: int = 4 * 1024 * 1024
    verify_tls: bool = False
    keepalive_s: float = 60.0

    @classmethod
    def for_interval(cls, interval: float) -> ScrapeSettings:
        """A timeout of 80 % of the sampling interval (at most 10 s), so a round ends before the next."""
        return cls(timeout=min(10.0, 0.8 * interval))


async def fetch(session: aiohttp.ClientSession, endpoint: Endpoint, settings: ScrapeSettings) -> Fetched:
    """GET the endpoint within ``settings.timeout``. ``_Refused`` with the result when it cannot be used."""
    return await httpfetch.fetch(
        session,
        endpoint.url,
        timeout=settings.timeout,
        max_body_bytes=settings.max_body_bytes,
        verify_tls=settings.verify_tls,
    )


def sample_of(fetched: Fetched, timestamp: float) -> EngineSample:
    """Parse and map a body. ``_Refused`` (``parse_error``, ``no_metrics``) when it gives no sample."""
    specs = []
    for spec in engines_in(fetched.text):
        specs.append(spec)
        try:
            expo = parse(fetched.text, selection(spec), openmetrics=fetched.openmetrics)
        except ExpositionError as e:
            raise _Refused("parse_error", str(e)) from e
        sample = map_exposition(spec, expo, timestamp)
        if sample is not None:
            return sample
    names = ", ".join(m for spec in specs for m in spec.markers) or "none"
    raise _Refused(
        "no_metrics", f"no series of a supported engine (vLLM, SGLang, TGI, Triton); prefixes seen: {names}"
    )


class Scraper:
    """Scrapes endpoints and counts each result in ``gpuscale_agent_engine_scrapes_total{result}`` on
    ``registry``. ``close`` ends its session."""

    def __init__(
        self,
        settings: ScrapeSettings,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self.scrapes = Counter(
            "gpuscale_agent_engine_scrapes",
            "Scrapes of inference engines' metrics endpoints by result: ok, partial (a signal absent or not "
            "right), timeout, too_large, http_error, connect_error, bad_content_type, parse_error, "
            "no_metrics, no_endpoint.",
            ["result"],
            registry=registry,
        )
        for result in RESULTS:
            self.scrapes.labels(result)  # every result from the start: rate() sees the first failure

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = open_session(f"gpuscale-agent/{__version__}", self.settings.keepalive_s)
        return self._session

    def count(self, result: str) -> None:
        self.scrapes.labels(result).inc()

    async def scrape(self, endpoint: Endpoint) -> EngineSample | EngineMissing:
        """One endpoint: its sample, or why there is none. Counted."""
        started = self._clock()
        try:
            fetched = await fetch(self._open(), endpoint, self.settings)
            sample = sample_of(fetched, started)
        except _Refused as e:
            self.count(e.result)
            return EngineMissing(started, e.result, e.detail)
        self.count("partial" if sample.notes else "ok")
        return sample

    async def scrape_all(
        self, endpoints: Mapping[PodKey, Endpoint]
    ) -> dict[PodKey, EngineSample | EngineMissing]:
        """Every endpoint at once; as long as the slowest, at most ``settings.timeout`` (and the parse)."""
        keys = list(endpoints)
        results = await asyncio.gather(*(self.scrape(endpoints[k]) for k in keys))
        return dict(zip(keys, results, strict=True))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
