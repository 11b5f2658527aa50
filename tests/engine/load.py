"""A load generator that knows what it sent: completions against a real vLLM, each request's send, first
byte and end time recorded, so a test can hold the engine's counters and gauges to the truth.

Each request asks for ``max_tokens`` tokens with ``ignore_eos`` (the tiny model's words are random, so it
never stops early) and streams, so the client sees its first token; ``stream=False`` asks for the whole
answer at once (no first-token time), which costs the client one JSON body instead of a line per token: on
2 shared cores a client parsing every token of a heavy load falls behind the server and reads its own lag as
the server's. ``timeout`` makes a client give up and disconnect, as a caller behind a gateway does;
``first_token_timeout`` only while it waits for its first token (a streamed answer that has begun is read to
its end), as a gateway's time-to-first-byte limit does: such a client gives up only while its request
waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp

from gpuscale.vllmcpu import MODEL_NAME


def client_session() -> aiohttp.ClientSession:
    """A client session for a load: as many connections at once as requests, none kept alive (the server
    closes an idle one after 5 s, and a request written to it as it closes fails: a client error no load
    should count)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))


@dataclass
class Sent:
    sent: float
    first: float | None = None
    done: float | None = None
    finish_reason: str | None = None
    chunks: int = 0  # streamed chunks with a token received (each holds at least one generated token)
    abandoned: bool = False
    error: str | None = None


@dataclass
class Load:
    base_url: str
    session: aiohttp.ClientSession
    requests: list[Sent] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def _one(
        self,
        r: Sent,
        max_tokens: int,
        timeout: float | None,
        first_token_timeout: float | None,
        prompt: str,
        stream: bool,
    ) -> None:
        body = {
            "model": MODEL_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": stream,
        }
        try:
            async with asyncio.timeout(timeout), asyncio.timeout(first_token_timeout) as first:
                async with self.session.post(f"{self.base_url}/v1/completions", json=body) as resp:
                    if resp.status != 200:
                        r.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                        r.done = time.time()
                        return
                    if not stream:
                        answer = await resp.json()
                        r.finish_reason = answer["choices"][0]["finish_reason"]
                        r.done = time.time()
                        return
                    head = b""
                    async for line in resp.content:
                        if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                            r.first = time.time()
                            first.reschedule(None)
                            head = line
                            break
                    # the rest at once: read line by line, a heavy load costs the client more than the server
                    rest = head + await resp.content.read()
                    r.chunks = rest.count(b"data: ") - rest.count(b"data: [DONE]")
                    if b'"finish_reason":"' in rest:
                        r.finish_reason = rest.rsplit(b'"finish_reason":"', 1)[1].split(b'"', 1)[0].decode()
            r.done = time.time()
        except TimeoutError:
            r.abandoned = True
            r.done = time.time()
        except asyncio.CancelledError:  # ``cancel``: the client hangs up
            r.abandoned = True
            r.done = time.time()
            raise
        except aiohttp.ClientError as e:
            r.error = f"{type(e).__name__}: {e}"
            r.done = time.time()

    def send(
        self,
        max_tokens: int = 64,
        *,
        timeout: float | None = None,
        first_token_timeout: float | None = None,
        prompt: str = "gpu scale",
        stream: bool = True,
    ) -> Sent:
        r = Sent(time.time())
        self.requests.append(r)
        task = asyncio.create_task(self._one(r, max_tokens, timeout, first_token_timeout, prompt, stream))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return r

    async def at_rate(
        self,
        rate: float,
        seconds: float,
        max_tokens: int = 64,
        *,
        timeout: float | None = None,
        first_token_timeout: float | None = None,
        stream: bool = True,
    ) -> None:
        """Send ``rate`` requests per second, evenly spaced, for ``seconds`` (those a busy event loop held
        back go at once)."""
        start = time.time()
        n = 0
        while (t := time.time() - start) < seconds:
            while n < rate * t:
                self.send(max_tokens, timeout=timeout, first_token_timeout=first_token_timeout, stream=stream)
                n += 1
            await asyncio.sleep(min(0.02, 1.0 / rate))

    async def drain(self, timeout: float = 120.0) -> None:
        if self.tasks:
            await asyncio.wait_for(asyncio.gather(*list(self.tasks)), timeout)

    async def cancel(self) -> None:
        """Every request still open hangs up (disconnects), marked abandoned at this instant."""
        for t in list(self.tasks):
            t.cancel()
        for t in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # what the load generator knows at an instant
    def sent_by(self, t: float) -> int:
        return sum(1 for r in self.requests if r.sent <= t)

    def finished_by(self, t: float) -> int:
        """Requests that ended by ``t`` with a finish reason (served to their end)."""
        return sum(1 for r in self.requests if r.done is not None and r.done <= t and r.finish_reason)

    def in_flight(self, t: float) -> int:
        return sum(1 for r in self.requests if r.sent <= t and (r.done is None or r.done > t))

    def in_flight_between(self, a: float, b: float) -> tuple[int, int]:
        """The fewest and the most requests in flight at any instant from ``a`` to ``b``."""
        times = [a] + [t for r in self.requests for t in (r.sent, r.done) if t is not None and a < t <= b]
        counts = [self.in_flight(t) for t in times]
        return min(counts), max(counts)

    def sent_between(self, a: float, b: float) -> int:
        return sum(1 for r in self.requests if a < r.sent <= b)

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.requests if r.error]


class Stalls:
    """When the test's event loop stood still: a 20 ms sleep that overran by more than ``threshold`` seconds
    leaves the interval it covered. On 2 shared cores the test's process is not always run when it is
    ready (``tests.engine.pods.apart`` keeps the worst of it away); what was measured across such a stall
    is not held to a scrape's lag. ``close`` stops it."""

    def __init__(self, threshold: float = 0.25) -> None:
        self.threshold = threshold
        self.intervals: list[tuple[float, float]] = []
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            before = time.time()
            await asyncio.sleep(0.02)
            after = time.time()
            if after - before - 0.02 > self.threshold:
                self.intervals.append((before, after))

    def during(self, a: float, b: float) -> bool:
        """Whether the loop stood still at some instant from ``a`` to ``b``."""
        return any(start < b and end > a for start, end in self.intervals)

    def total(self, a: float, b: float) -> float:
        """Seconds the loop stood still from ``a`` to ``b``."""
        return sum(max(0.0, min(end, b) - max(start, a)) for start, end in self.intervals)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
