"""Collect: read every GPU once per interval, off the event loop, each read bounded by a timeout.

A failed read is an error for that GPU only. A read that hangs is abandoned (its GPU reports ``timeout``
until the stuck call returns); the others go on. When every GPU fails with a driver-level error the backend is
re-opened, with backoff, so the agent comes back by itself after a driver reload.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
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
        self._stuck: dict[str, concurrent.futures.Future[None]] = {}
        self._inflight: set[concurrent.futures.Future[None]] = set()  # rounds a worker thread is running
        self._reopen_after = 0.0
        self._reopen_backoff = 1.0
        self.devices: tuple[DeviceInfo, ...] = ()

    async def open(self) -> tuple[DeviceInfo, ...]:
        await asyncio.get_running_loop().run_in_executor(self._pool, self.backend.open)
        self.devices = tuple(self.backend.devices())
        return self.devices

    def close(self, wait_s: float = 1.0) -> None:
        """Close the backend, unless a read is still running in a worker thread after ``wait_s`` (a hung
        read, or the round a stop interrupted): closing NVML under a read in progress (freeing its GPM
        samples, shutting the library down) can crash the process. Then the backend stays open until the
        process exits."""
        running = [f for f in (*self._inflight, *self._stuck.values()) if not f.done()]
        _, pending = concurrent.futures.wait(running, timeout=wait_s)
        try:
            if pending:
                log.warning(
                    "%d GPU read(s) still running at stop; GPU backend %s left open until the process exits",
                    len(pending),
                    self.backend.name,
                )
            else:
                self.backend.close()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def sample_round(self) -> RoundResult:
        """Read every GPU once. All reads of a round run in one worker thread (one thread hand-off per
        round, not per GPU); if that thread is stuck in one GPU's read past the timeout, that GPU is set
        aside until its read returns and the GPUs after it are read on another thread."""
        started = self._clock()
        t0 = time.perf_counter()
        samples: dict[str, GpuSample] = {}
        errors: dict[str, DeviceError] = {}
        todo: list[DeviceInfo] = []
        for dev in self.devices:
            stuck = self._stuck.get(dev.uuid)
            if stuck is not None:
                if not stuck.done():
                    errors[dev.uuid] = DeviceError(dev.uuid, "timeout", "a previous read has not returned")
                    continue
                del self._stuck[dev.uuid]
            todo.append(dev)
        for _attempt in range(2):
            if not todo:
                break
            job = _RoundJob(self.backend, todo)
            cf = self._pool.submit(job.run)
            self._inflight.add(cf)
            cf.add_done_callback(self._inflight.discard)
            try:
                async with asyncio.timeout(self._timeout):  # not wait_for: see NodeState.wait_changed
                    await asyncio.shield(asyncio.wrap_future(cf))
            except TimeoutError:
                pass
            hung = job.abandon()  # from here on the job records nothing: its results are ours to read
            samples.update(job.samples)
            errors.update(job.errors)
            if hung is None:
                break
            errors[hung.uuid] = DeviceError(hung.uuid, "timeout", f"no answer within {self._timeout:g}s")
            self._stuck[hung.uuid] = cf
            todo = [d for d in todo if d.uuid not in samples and d.uuid not in errors]
        reopened = False
        if self.devices and errors and not samples and all(e.recoverable_by_reopen for e in errors.values()):
            reopened = await self._maybe_reopen()
        return RoundResult(started, time.perf_counter() - t0, samples, errors, reopened)

    async def rediscover(self) -> bool:
        """Close and open the backend to list its devices again (a MIG layout changed under it). Not while
        a read still runs in a worker thread, since closing under it can crash the process: then ``False``,
        and the caller asks again later. ``True`` when the devices were listed again."""
        if any(not f.done() for f in (*self._inflight, *self._stuck.values())):
            return False
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._reopen)
        except BackendError as e:
            log.warning("GPU backend %s could not be opened again (%s); reads retry it", self.backend.name, e)
            return False
        self.devices = tuple(self.backend.devices())
        return True

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


class _RoundJob:
    """The reads of one round, run in a worker thread. ``current`` is the device being read now."""

    def __init__(self, backend: Backend, devices: list[DeviceInfo]) -> None:
        self._backend = backend
        self._devices = devices
        self._abandoned = False
        self._lock = threading.Lock()
        self.current: DeviceInfo | None = None
        self.samples: dict[str, GpuSample] = {}
        self.errors: dict[str, DeviceError] = {}

    def abandon(self) -> DeviceInfo | None:
        """Stop recording (after a finished job, a no-op). Returns the device whose read is still in
        progress, if the job is stuck in one."""
        with self._lock:
            self._abandoned = True
            return self.current

    def run(self) -> None:
        for dev in self._devices:
            with self._lock:
                if self._abandoned:
                    return
                self.current = dev
            try:
                sample = self._backend.sample(dev)
            except DeviceError as e:
                err: DeviceError | None = e
            except Exception as e:  # a backend bug must not stop the other GPUs
                err = DeviceError(dev.uuid, "unknown", f"{type(e).__name__}: {e}")
            else:
                err = None
            with self._lock:
                if self._abandoned:
                    return
                if err is None:
                    self.samples[dev.uuid] = sample
                else:
                    self.errors[dev.uuid] = err
                self.current = None
