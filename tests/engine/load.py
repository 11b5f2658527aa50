"""A load generator that knows what it sent: completions against a real vLLM, each request's send, first
byte and end time recorded, so a test can hold the engine's counters and gauges to the truth.

Each request asks for ``max_tokens`` tokens with ``ignore_eos`` (the tiny model's words are random, so it
never stops early) and streams, so the client sees its first token. ``timeout`` makes a client give up and
disconnect, as a caller behind a gateway does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp

from gpuscale.vllmcpu import MODEL_NAME


@dataclass
class Sent:
    sent: float
    first: float | None = None
    done: float | None = None
    finish_reason: str | None = None
    abandoned: bool = False
    error: str | None = None


@dataclass
class Load:
    base_url: str
    session: aiohttp.ClientSession
    requests: list[Sent] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def _one(self, r: Sent, max_tokens: int, timeout: float | None, prompt: str) -> None:
        body = {
            "model": MODEL_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        try:
            async with asyncio.timeout(timeout):
                async with self.session.post(f"{self.base_url}/v1/completions", json=body) as resp:
                    if resp.status != 200:
                        r.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                        return
                    async for line in resp.content:
                        if not line.startswith(b"data: "):
                            continue
                        if r.first is None:
                            r.first = time.time()
                        if b'"finish_reason":"' in line:
                            r.finish_reason = (
                                line.split(b'"finish_reason":"', 1)[1].split(b'"', 1)[0].decode()
                            )
            r.done = time.time()
        except TimeoutError:
            r.abandoned = True
            r.done = time.time()
        except aiohttp.ClientError as e:
            r.error = f"{type(e).__name__}: {e}"
            r.done = time.time()

    def send(self, max_tokens: int = 64, *, timeout: float | None = None, prompt: str = "gpu scale") -> Sent:
        r = Sent(time.time())
        self.requests.append(r)
        task = asyncio.create_task(self._one(r, max_tokens, timeout, prompt))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return r

    async def at_rate(
        self, rate: float, seconds: float, max_tokens: int = 64, *, timeout: float | None = None
    ) -> None:
        """Send ``rate`` requests per second, evenly spaced, for ``seconds``."""
        start = time.time()
        n = 0
        while (t := time.time() - start) < seconds:
            while n < rate * t:
                self.send(max_tokens, timeout=timeout)
                n += 1
            await asyncio.sleep(min(0.02, 1.0 / rate))

    async def drain(self, timeout: float = 120.0) -> None:
        if self.tasks:
            await asyncio.wait_for(asyncio.gather(*list(self.tasks)), timeout)

    async def cancel(self) -> None:
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

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.requests if r.error]
