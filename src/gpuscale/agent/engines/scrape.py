"""Scrape engine endpoints: one shared aiohttp session, every endpoint at once, each bounded.

Why bounded: the agent scrapes every engine pod of its node once per sampling interval, and an engine that
hangs, answers a 10 MB page or an HTML error page must cost that pod its engine data and nothing else: not
the round, not the agent's memory, not the GPU sampling.

How:

- **One ``aiohttp.ClientSession`` with keep-alive**: a connection per pod is reused from round to round.
- **A timeout below the interval** (``ScrapeSettings.timeout``) covers connect, headers and body; a round
  is as long as its slowest scrape, at most the timeout.
- **A cap on the body** (``max_body_bytes``, 4 MiB): a ``Content-Length`` above it is refused before the
  body is read, and the body is read in chunks and dropped the moment it passes the cap (a compressed body
  is capped after decompression).
- **Content negotiation** as Prometheus does it: ``Accept`` offers the text format 0.0.4 and OpenMetrics
  1.0 (with ``escaping=allow-utf-8``: prometheus_client 0.26 otherwise rewrites ``vllm:`` sample names to
  ``vllm_`` but not their ``# TYPE`` lines, a body its own parser then refuses); the answer's
  ``Content-Type`` picks the parser. ``Accept-Encoding: identity``: decompressing costs the agent CPU every
  second for a body that crosses one network hop.
- **No redirects**: the agent connects to the pod IP it was given and nowhere else (a 3xx is an
  ``http_error``).

Every outcome is one ``result`` of ``gpuscale_agent_engine_scrapes_total`` (``RESULTS``): ``ok``, ``partial``
(read, but a signal was absent or could not be right: see the sample's notes), ``timeout``, ``too_large``,
``http_error`` (a status other than 200), ``connect_error`` (refused, reset, cut short), ``bad_content_type``
(HTML, JSON, …), ``parse_error``, ``no_metrics`` (no series of a supported engine), and ``no_endpoint`` (the
pod asks to be scraped but its annotations or its missing IP make that impossible). Anything but ``ok`` and
``partial`` is an ``EngineMissing``: the pod's engine data is missing, never 0. aiohttp's exceptions become
results here and nowhere else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from ... import __version__
from ...model import EngineMissing, EngineSample
from .discovery import Endpoint, PodKey
from .errors import ExpositionError
from .mapping import engines_in, map_exposition, selection
from .parse import parse

__all__ = ["ACCEPT", "RESULTS", "Fetched", "ScrapeSettings", "Scraper", "fetch", "read_body", "sample_of"]

ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
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
_CHUNK = 64 * 1024


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


@dataclass(frozen=True, slots=True)
class Fetched:
    """A body as the endpoint sent it: its text and whether it is OpenMetrics."""

    text: str
    openmetrics: bool


class _Refused(Exception):
    """A scrape that cannot be used: ``result`` (one of ``RESULTS``) and one line of ``detail``."""

    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result, self.detail = result, detail


async def read_body(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body, read in chunks; ``_Refused("too_large")`` as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await content.read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _Refused("too_large", f"the body is over {limit} bytes: not read further")
        chunks.append(chunk)


def _format_of(content_type: str) -> bool:
    """Whether the answer is OpenMetrics (else the text format); ``_Refused`` for anything else."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime == "application/openmetrics-text":
        return True
    if mime in ("", "text/plain"):
        return False
    shown = content_type if len(content_type) <= 100 else content_type[:99] + "\u2026"
    raise _Refused("bad_content_type", f'Content-Type "{shown}" is not a metrics exposition')


async def fetch(session: aiohttp.ClientSession, endpoint: Endpoint, settings: ScrapeSettings) -> Fetched:
    """GET the endpoint within ``settings.timeout``. ``_Refused`` with the result when it cannot be used."""
    timeout = aiohttp.ClientTimeout(total=settings.timeout)
    try:
        async with session.get(
            endpoint.url,
            timeout=timeout,
            allow_redirects=False,
            ssl=True if settings.verify_tls else False,
        ) as response:
            if response.status != 200:
                where = response.headers.get("Location")
                redirect = where is not None and 300 <= response.status < 400
                more = f' to "{where}": redirects are not followed' if redirect else ""
                raise _Refused(
                    "http_error", f"HTTP {response.status} {response.reason or ''}".rstrip() + more
                )
            openmetrics = _format_of(response.headers.get("Content-Type", ""))
            length = response.content_length
            if length is not None and length > settings.max_body_bytes:
                raise _Refused(
                    "too_large", f"Content-Length {length} is over {settings.max_body_bytes} bytes"
                )
            body = await read_body(response.content, settings.max_body_bytes)
    except TimeoutError as e:
        raise _Refused("timeout", f"no complete answer within {settings.timeout:g}s") from e
    except aiohttp.ClientPayloadError as e:
        raise _Refused("connect_error", f"the body was cut short ({e})") from e
    except aiohttp.ClientError as e:
        raise _Refused("connect_error", f"{type(e).__name__}: {e}") from e
    except OSError as e:
        raise _Refused("connect_error", f"{type(e).__name__}: {e}") from e
    try:
        return Fetched(body.decode("utf-8"), openmetrics)
    except UnicodeDecodeError as e:
        raise _Refused("parse_error", f"the body is not UTF-8 ({e.reason} at byte {e.start})") from e


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
            connector = aiohttp.TCPConnector(keepalive_timeout=self.settings.keepalive_s, limit=0)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={
                    "Accept": ACCEPT,
                    "Accept-Encoding": "identity",
                    "User-Agent": f"gpuscale-agent/{__version__}",
                },
                auto_decompress=True,
                read_bufsize=_CHUNK,
            )
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
