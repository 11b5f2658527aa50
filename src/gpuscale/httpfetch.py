"""A bounded HTTP GET of a metrics exposition: what the agent's engine scrape and the scaler's request path
both read with.

Why bounded: both read, every second, an endpoint they do not control (an inference engine's pod, a
gateway's replica). One that hangs, answers a 10 MB page or an HTML error page must cost that reading and
nothing else: not the round, not the process's memory, not the event loop that answers KEDA.

How:

- **One ``aiohttp.ClientSession`` with keep-alive** per reader (``open_session``): a connection per endpoint
  is reused from round to round.
- **A timeout** (``timeout``) covers connect, headers and body.
- **A cap on the body** (``max_body_bytes``): a ``Content-Length`` above it is refused before the body is
  read, and the body is read in chunks and dropped the moment it passes the cap (a compressed body is
  capped after decompression).
- **Content negotiation** as Prometheus does it: ``Accept`` offers the text format 0.0.4 and OpenMetrics
  1.0 (with ``escaping=allow-utf-8``: prometheus_client 0.26 otherwise rewrites ``vllm:`` sample names to
  ``vllm_`` but not their ``# TYPE`` lines, a body its own parser then refuses); the answer's
  ``Content-Type`` picks the parser. ``Accept-Encoding: identity``: decompressing costs CPU every second for
  a body that crosses one network hop.
- **No redirects**: the reader connects to the address it was given and nowhere else (a 3xx is an
  ``http_error``).

Every failure is a ``FetchRefused`` whose ``result`` is one of ``RESULTS``: ``timeout``, ``too_large``,
``http_error`` (a status other than 200), ``connect_error`` (refused, reset, cut short),
``bad_content_type`` (HTML, JSON, …), ``parse_error`` (not UTF-8). aiohttp's exceptions become
``FetchRefused`` here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from .errors import GpuscaleError

__all__ = [
    "ACCEPT",
    "CHUNK",
    "RESULTS",
    "FetchRefused",
    "Fetched",
    "fetch",
    "open_session",
    "read_body",
]

ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
RESULTS = ("timeout", "too_large", "http_error", "connect_error", "bad_content_type", "parse_error")
CHUNK = 64 * 1024


class FetchRefused(GpuscaleError):
    """A fetch that cannot be used: ``result`` (one of ``RESULTS``) and one line of ``detail``."""

    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result, self.detail = result, detail


@dataclass(frozen=True, slots=True)
class Fetched:
    """A body as the endpoint sent it: its text and whether it is OpenMetrics."""

    text: str
    openmetrics: bool


def open_session(user_agent: str, keepalive_s: float = 60.0) -> aiohttp.ClientSession:
    """A session for ``fetch``: keep-alive, no connection limit, the ``Accept`` headers above."""
    connector = aiohttp.TCPConnector(keepalive_timeout=keepalive_s, limit=0)
    return aiohttp.ClientSession(
        connector=connector,
        headers={"Accept": ACCEPT, "Accept-Encoding": "identity", "User-Agent": user_agent},
        auto_decompress=True,
        read_bufsize=CHUNK,
    )


async def read_body(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body, read in chunks; ``FetchRefused("too_large")`` as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await content.read(CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise FetchRefused("too_large", f"the body is over {limit} bytes: not read further")
        chunks.append(chunk)


def _format_of(content_type: str) -> bool:
    """Whether the answer is OpenMetrics (else the text format); ``FetchRefused`` for anything else."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime == "application/openmetrics-text":
        return True
    if mime in ("", "text/plain"):
        return False
    shown = content_type if len(content_type) <= 100 else content_type[:99] + "\u2026"
    raise FetchRefused("bad_content_type", f'Content-Type "{shown}" is not a metrics exposition')


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    max_body_bytes: int,
    verify_tls: bool = False,
) -> Fetched:
    """GET ``url`` within ``timeout`` seconds. ``FetchRefused`` with the result when it cannot be used."""
    try:
        async with session.get(
            url,
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
            ssl=True if verify_tls else False,
        ) as response:
            if response.status != 200:
                where = response.headers.get("Location")
                redirect = where is not None and 300 <= response.status < 400
                more = f' to "{where}": redirects are not followed' if redirect else ""
                raise FetchRefused(
                    "http_error", f"HTTP {response.status} {response.reason or ''}".rstrip() + more
                )
            openmetrics = _format_of(response.headers.get("Content-Type", ""))
            length = response.content_length
            if length is not None and length > max_body_bytes:
                raise FetchRefused("too_large", f"Content-Length {length} is over {max_body_bytes} bytes")
            body = await read_body(response.content, max_body_bytes)
    except TimeoutError as e:
        raise FetchRefused("timeout", f"no complete answer within {timeout:g}s") from e
    except aiohttp.ClientPayloadError as e:
        raise FetchRefused("connect_error", f"the body was cut short ({e})") from e
    except aiohttp.ClientError as e:
        raise FetchRefused("connect_error", f"{type(e).__name__}: {e}") from e
    except OSError as e:
        raise FetchRefused("connect_error", f"{type(e).__name__}: {e}") from e
    try:
        return Fetched(body.decode("utf-8"), openmetrics)
    except UnicodeDecodeError as e:
        raise FetchRefused("parse_error", f"the body is not UTF-8 ({e.reason} at byte {e.start})") from e
