"""Collect: read every GPU once per interval, off the event loop, each read bounded by a timeout.

A failed read is an error for that GPU only. A read that hangs is abandoned (its GPU reports ``timeout``
until the stuck call returns); the others go on. When every GPU fails with a driver-level error the backend is
re-opened, with backoff, so the agent comes back by itself after a driver reload.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Backend
from ..backends.errors import BackendError, DeviceError
from ..model import DeviceInfo, GpuSample

__all__ = ["RoundResult", "Sampler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoundResult:
    started: float
    duration: float
    samples: dict[str, GpuSample]
    errors: dict[str, DeviceError]
    reopened: bool


class Sampler:
    def __init__(
        self,
        backend: Backend,
        *,
        read_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        max_workers: int = 4,
    ) -> None:
        self.backend = backend
        self._timeout = read_timeout
        self._clock = clock
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="gpu-read"
        )
        self._stuck: dict[str, concurrent.futures.Future[GpuSample]] = {}
        self._reopen_after = 0.0
        self._reopen_backoff = 1.0
        self.devices: tuple[DeviceInfo, ...] = ()

    async def open(self) -> tuple[DeviceInfo, ...]:
        await asyncio.get_running_loop().run_in_executor(self._pool, self.backend.open)
        self.devices = tuple(self.backend.devices())
        return self.devices

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def sample_round(self) -> RoundResult:
        started = self._clock()
        t0 = time.perf_counter()
        samples: dict[str, GpuSample] = {}
        errors: dict[str, DeviceError] = {}
        pending: dict[asyncio.Future[GpuSample], tuple[DeviceInfo, concurrent.futures.Future[GpuSample]]] = {}
        for dev in self.devices:
            stuck = self._stuck.get(dev.uuid)
            if stuck is not None:
                if not stuck.done():
                    errors[dev.uuid] = DeviceError(dev.uuid, "timeout", "a previous read has not returned")
                    continue
                del self._stuck[dev.uuid]
            cf = self._pool.submit(self.backend.sample, dev)
            pending[asyncio.wrap_future(cf)] = (dev, cf)
        if pending:
            done, not_done = await asyncio.wait(pending, timeout=self._timeout)
            for fut in done:
                dev = pending[fut][0]
                exc = fut.exception()
                if exc is None:
                    samples[dev.uuid] = fut.result()
                elif isinstance(exc, DeviceError):
                    errors[dev.uuid] = exc
                else:
                    errors[dev.uuid] = DeviceError(dev.uuid, "unknown", f"{type(exc).__name__}: {exc}")
            for fut in not_done:
                dev, cf = pending[fut]
                errors[dev.uuid] = DeviceError(dev.uuid, "timeout", f"no answer within {self._timeout:g}s")
                self._stuck[dev.uuid] = cf
        reopened = False
        if self.devices and errors and not samples and all(e.recoverable_by_reopen for e in errors.values()):
            reopened = await self._maybe_reopen()
        return RoundResult(started, time.perf_counter() - t0, samples, errors, reopened)

    async def _maybe_reopen(self) -> bool:
        now = self._clock()
        if now < self._reopen_after:
            return False
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._reopen)
        except BackendError as e:
            self._reopen_after = now + self._reopen_backoff
            self._reopen_backoff = min(30.0, self._reopen_backoff * 2)
            log.warning(
                "GPU backend %s still unavailable (%s); retrying in %.0fs",
                self.backend.name,
                e,
                self._reopen_after - now,
            )
            return False
        self._reopen_backoff = 1.0
        self.devices = tuple(self.backend.devices())
        log.info("GPU backend %s re-opened: %d devices", self.backend.name, len(self.devices))
        return True

    def _reopen(self) -> None:
        try:
            self.backend.close()
        except BackendError:
            pass
        self.backend.open()
