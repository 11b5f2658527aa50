"""Waiting in tests for what another task, thread or process brings about: ``until`` on the event loop,
``until_sync`` where a test blocks (a thread, a subprocess).

Both call ``check`` every ``interval`` seconds until ``ok`` (default: truthiness) accepts what it returned, and
return that value. ``check`` may be a plain function or, for ``until``, a coroutine function. An exception
from ``check`` ends the wait at once: an ``assert`` inside it is a precondition, not a "not yet". After
``timeout`` seconds the wait fails with an ``AssertionError`` that names what was awaited (``what``, else the
check's name) and the last value ``check`` gave.

Prefer an event or a fake clock where the code under test offers one; poll only what has no such hook.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["until", "until_sync"]

T = TypeVar("T")

_SHOWN = 2000  # characters of the last value a failure shows


# Without ``ok``, what is returned is truthy: never the ``None`` of an "Optional" check.
@overload
async def until(
    check: Callable[[], Awaitable[T | None]], timeout: float = ..., what: str = ..., *, interval: float = ...
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None], timeout: float = ..., what: str = ..., *, interval: float = ...
) -> T: ...


@overload
async def until(
    check: Callable[[], Awaitable[T]],
    timeout: float = ...,
    what: str = ...,
    *,
    interval: float = ...,
    ok: Callable[[T], object],
) -> T: ...


@overload
async def until(
    check: Callable[[], T],
    timeout: float = ...,
    what: str = ...,
    *,
    interval: float = ...,
    ok: Callable[[T], object],
) -> T: ...


async def until(
    check: Callable[[], Any],
    timeout: float = 8.0,
    what: str = "",
    *,
    interval: float = 0.02,
    ok: Callable[[Any], object] = bool,
) -> Any:
    """Await ``check()`` until ``ok`` accepts its value; return that value (see the module's docstring)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if ok(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_not_reached(check, timeout, what, value))
        await asyncio.sleep(interval)


@overload
def until_sync(
    check: Callable[[], T | None], timeout: float = ..., what: str = ..., *, interval: float = ...
) -> T: ...


@overload
def until_sync(
    check: Callable[[], T],
    timeout: float = ...,
    what: str = ...,
    *,
    interval: float = ...,
    ok: Callable[[T], object],
) -> T: ...


def until_sync(
    check: Callable[[], Any],
    timeout: float = 8.0,
    what: str = "",
    *,
    interval: float = 0.05,
    ok: Callable[[Any], object] = bool,
) -> Any:
    """``until`` for a test that blocks: ``check`` is a plain function, the pause a ``time.sleep``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if ok(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_not_reached(check, timeout, what, value))
        time.sleep(interval)


def _not_reached(check: Callable[[], object], timeout: float, what: str, last: object) -> str:
    shown = repr(last)
    if len(shown) > _SHOWN:
        shown = shown[:_SHOWN] + f"... ({len(shown)} characters)"
    name = what or getattr(check, "__qualname__", repr(check))
    return f"not reached within {timeout:g} s: {name}; the last value seen: {shown}"
