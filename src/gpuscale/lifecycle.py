"""Running a service's event loop, and a shutdown that cannot hang: every step of a service's ``stop`` gets a
deadline.

``run`` runs a service on asyncio's own event loop or on uvloop (libuv), which the long-running commands use
by default when it is installed: gRPC's asyncio stack spends most of its time in the loop, and uvloop takes
about a fifth off the cost of each call and each agent message (docs/performance.md).

A stop that waits forever (a task that missed its cancellation, a gRPC server whose handler never returns)
would keep a pod in Terminating until the kubelet kills it, and hang a test suite. Each step is bounded;
one that overruns is logged with its name and left behind, and the next steps still run.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

__all__ = ["EVENT_LOOPS", "cancel_tasks", "event_loop_factory", "run", "unless_stopped", "within"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``name`` (``None``: asyncio's default). ``auto``: uvloop when it is installed.
    Raise ``ValueError`` for an unknown name, or for ``uvloop`` when it is not installed."""
    if name not in EVENT_LOOPS:
        raise ValueError(f'event loop "{name}" is unknown; choose one of {", ".join(EVENT_LOOPS)}')
    if name == "asyncio" or (name == "auto" and importlib.util.find_spec("uvloop") is None):
        return None
    try:
        import uvloop
    except ImportError as e:
        raise ValueError(f'event loop "uvloop" cannot be loaded ({e}); install it or choose asyncio') from e
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T], event_loop: str = "auto") -> _T:
    """``asyncio.run(main)`` on the event loop ``event_loop`` names (see ``event_loop_factory``)."""
    factory = event_loop_factory(event_loop)
    log.info("event loop: %s", "asyncio" if factory is None else "uvloop")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def within(step: Awaitable[object], seconds: float, what: str) -> bool:
    """Await ``step`` for at most ``seconds``; False (and a warning naming ``what``) when it overran."""
    try:
        async with asyncio.timeout(seconds):
            await step
    except TimeoutError:
        log.warning("%s did not finish within %.1fs during shutdown; going on without it", what, seconds)
        return False
    return True


async def unless_stopped(step: Awaitable[object], stop: asyncio.Event, seconds: float = 5.0) -> bool:
    """Await ``step`` until it ends or ``stop`` is set; False when ``stop`` came first (``step`` is then
    cancelled and waited for, at most ``seconds``). A service's start can take long (the scaler spawning its
    ingest workers, an API server that does not answer): a SIGTERM meanwhile acts now, not once it is done.
    The step's own error is raised."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            if not (await asyncio.wait((task,), timeout=seconds))[0]:
                log.warning("start-up ignored its cancellation for %.1fs; going on without it", seconds)
    if not task.done() or task.cancelled():
        return False
    task.result()
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
