"""Shutdown that cannot hang: every step of a service's ``stop`` gets a deadline.

A stop that waits forever (a task that missed its cancellation, a gRPC server whose handler never returns)
would keep a pod in Terminating until the kubelet kills it, and hang a test suite. Each step is bounded;
one that overruns is logged with its name and left behind, and the next steps still run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable

__all__ = ["cancel_tasks", "within"]

log = logging.getLogger(__name__)


async def within(step: Awaitable[object], seconds: float, what: str) -> bool:
    """Await ``step`` for at most ``seconds``; False (and a warning naming ``what``) when it overran."""
    try:
        async with asyncio.timeout(seconds):
            await step
    except TimeoutError:
        log.warning("%s did not finish within %.1fs during shutdown; going on without it", what, seconds)
        return False
    return True


async def cancel_tasks(tasks: Iterable[asyncio.Task[None]], seconds: float = 5.0) -> None:
    """Cancel ``tasks`` and wait (bounded) for them to end."""
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if not pending:
        return
    _, late = await asyncio.wait(pending, timeout=seconds)
    for t in late:
        log.warning("task %s ignored its cancellation for %.1fs during shutdown", t.get_name(), seconds)
    for t in pending:
        if t.done() and not t.cancelled():
            with contextlib.suppress(Exception):
                t.result()
