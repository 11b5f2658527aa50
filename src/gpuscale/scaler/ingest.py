"""Agent streams read in worker processes: ``gpuscale scaler --ingest-workers N``.

Why: reading a Watch stream costs gRPC's asyncio machinery about 150-250 µs of the event loop per message,
before a sample is applied. With 1,000 agents at a 1 s interval that is a quarter of a core, on the same loop
that answers KEDA, and it grows with the cluster. Measured (docs/performance.md): at 1,000 nodes the scaler
answered half the GetMetrics calls per second it answers with no streams at all.

How: each worker is a child process (``python -m gpuscale.scaler.ingest``) that runs the very same
``AgentPool``/``AgentSubscriber`` (connect, snapshot check, silence timeout, backoff) for its shard of the
agent addresses (a stable hash of the address). What the subscribers would apply to the ``ClusterState``
the worker writes to its stdout as frames; the scaler reads them, decodes each message and applies it. So the
state, the answers and the failure semantics are those of in-process streams; only the reading moved. A
frame is one type byte, a 4-byte big-endian length and the payload:

* ``U``: one Watch message (a serialized ``NodeUpdate``);
* ``D``: an agent's stream ended: node name, NUL, agent id (``ClusterState.mark_disconnected``);
* ``R``: a stream is being retried, for ``gpuscale_scaler_agent_reconnects``: the reason.

Frames are written in batches every 10 ms, so that the scaler's loop wakes once per batch rather than once
per message; a sample reaches the scaler at most 10 ms later than it would in-process.

The scaler writes each worker its whole shard, as one JSON line on the worker's stdin, whenever discovery
changes; a worker exits when its stdin closes. A worker that dies is restarted with backoff; meanwhile the
nodes it followed are stale (their calls answer ``UNAVAILABLE``), as if their agents' streams had dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence

from .._proto import agent_pb2
from ..lifecycle import cancel_tasks, within
from ..logs import configure_logging
from .metrics import ScalerMetrics
from .state import ClusterState
from .subscriber import AgentPool, SubscriberSettings

__all__ = ["MAX_WORKERS", "FrameWriter", "WorkerPool", "shard_of"]

log = logging.getLogger(__name__)

_UPDATE, _DISCONNECTED, _RECONNECT = b"U", b"D", b"R"
_RESTART_INITIAL_S = 0.5
_RESTART_MAX_S = 10.0
_CLOSE_GRACE_S = 1.0  # for the workers to end their streams once their stdin closes; then they are killed
MAX_WORKERS = 64  # the most workers a scaler runs (a CPU each; the chart's schema says the same)


def shard_of(address: str, workers: int) -> int:
    """The worker that follows ``address``: stable across restarts and scaler replicas."""
    return zlib.crc32(address.encode()) % workers


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


# -- the scaler's side ------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.shard: list[str] = []
        self.nodes: dict[str, str] = {}  # node → agent id, of the snapshots this worker delivered

    def send_shard(self) -> None:
        proc = self.proc
        if proc is not None and proc.stdin is not None and proc.returncode is None:
            proc.stdin.write(json.dumps({"agents": self.shard}).encode() + b"\n")


class WorkerPool:
    """``AgentPool``'s interface (``reconcile``, ``addresses``, ``connected``, ``close``) over ``workers``
    ingest processes. ``start`` spawns them; each is supervised and restarted if it dies."""

    def __init__(
        self,
        state: ClusterState,
        settings: SubscriberSettings,
        metrics: ScalerMetrics | None,
        *,
        workers: int,
        event_loop: str = "auto",
        log_level: str = "info",
        log_format: str = "text",
    ) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be from 1 to {MAX_WORKERS}, not {workers}")
        self.state = state
        self.settings = settings
        self.metrics = metrics
        self.event_loop = event_loop
        self.log_level = log_level
        self.log_format = log_format
        self.workers = [_Worker(k) for k in range(workers)]
        self.restarts = 0
        self._addresses: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._started = False

    @property
    def addresses(self) -> list[str]:
        return list(self._addresses)

    @property
    def connected(self) -> int:
        """Nodes whose stream is up (one agent per node)."""
        followed = {n for w in self.workers for n in w.nodes}
        return sum(1 for n in self.state.nodes() if n.connected and n.name in followed)

    def reconcile(self, addresses: Iterable[str]) -> None:
        self._addresses = sorted(set(addresses))
        shards: list[list[str]] = [[] for _ in self.workers]
        for a in self._addresses:
            shards[shard_of(a, len(self.workers))].append(a)
        for worker, shard in zip(self.workers, shards, strict=True):
            if shard != worker.shard:
                worker.shard = shard
                worker.send_shard()
        self.state.sweep(self.settings.forget_after_s)

    async def start(self) -> None:
        """Spawn the workers (before the scaler's gRPC server starts: gRPC logs a warning about a fork while
        its threads are busy) and supervise them. Cancelled midway (a SIGTERM during start-up), the workers
        spawned so far are ``close``'s to kill; the one being spawned is killed by asyncio."""
        for w in self.workers:
            await self._spawn(w)
        self._tasks = [
            asyncio.create_task(self._supervise(w), name=f"ingest worker {w.index}") for w in self.workers
        ]
        self._started = True

    async def close(self) -> None:
        """Stop every worker: close its stdin (its signal to end its streams), wait for them all together
        for ``_CLOSE_GRACE_S``, kill the rest and reap them. After a start that did not finish, kill at once:
        a worker still importing would take seconds to read its stdin. No worker outlives the scaler."""
        self._closing = True
        await cancel_tasks(self._tasks)  # the supervisors first: none may spawn a worker again
        self._tasks = []
        procs = [w.proc for w in self.workers if w.proc is not None and w.proc.returncode is None]
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        waits = [asyncio.ensure_future(proc.wait()) for proc in procs]
        if waits and self._started:
            await asyncio.wait(waits, timeout=_CLOSE_GRACE_S)
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        if waits:
            await within(asyncio.gather(*waits), 2.0, f"reaping {len(waits)} ingest workers")

    async def _supervise(self, worker: _Worker) -> None:
        backoff = _RESTART_INITIAL_S
        while not self._closing:
            if worker.proc is None or worker.proc.returncode is not None:
                await self._spawn(worker)
            assert worker.proc is not None
            delivered = 0
            try:
                assert worker.proc.stdout is not None
                delivered = await self._read(worker, worker.proc.stdout)
            except Exception:  # a frame that cannot be applied: the worker is restarted, the scaler goes on
                log.exception("ingest worker %d: bad frame; restarting it", worker.index)
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
            finally:
                code = await worker.proc.wait() if not self._closing else None
                for node, agent_id in worker.nodes.items():  # its streams are gone with it
                    self.state.mark_disconnected(node, agent_id)
            if self._closing:
                return
            self.restarts += 1
            backoff = _RESTART_INITIAL_S if delivered else min(backoff * 2, _RESTART_MAX_S)
            log.error(
                "ingest worker %d exited (code %s) after %d messages; its %d nodes are stale; restarting in "
                "%.1fs",
                worker.index,
                code,
                delivered,
                len(worker.nodes),
                backoff,
            )
            await asyncio.sleep(backoff)

    async def _spawn(self, worker: _Worker) -> None:
        worker.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            "--settings",
            json.dumps(dataclasses.asdict(self.settings)),
            "--event-loop",
            self.event_loop,
            "--log-level",
            self.log_level,
            "--log-format",
            self.log_format,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        worker.send_shard()

    async def _read(self, worker: _Worker, stdout: asyncio.StreamReader) -> int:
        """Apply the worker's frames until it exits; return how many messages it delivered."""
        state, metrics = self.state, self.metrics
        delivered = 0
        while True:
            try:
                header = await stdout.readexactly(5)
                payload = await stdout.readexactly(int.from_bytes(header[1:], "big"))
            except asyncio.IncompleteReadError:
                return delivered
            kind = header[:1]
            if kind == _UPDATE:
                update = state.read(agent_pb2.NodeUpdate.FromString(payload))
                if update.snapshot:
                    worker.nodes[update.node_name] = update.agent_id
                state.apply_update(update)
                delivered += 1
                if metrics is not None:
                    metrics.agent_update()
            elif kind == _DISCONNECTED:
                node, _, agent_id = payload.decode().partition("\0")
                state.mark_disconnected(node, agent_id)
            elif kind == _RECONNECT and metrics is not None:
                metrics.agent_reconnect(payload.decode())


# -- the worker's side ---------------------------------------------------------------------------------------
class FrameWriter:
    """The worker's ``StreamSink`` and ``StreamCounters``: everything goes to stdout as frames, written
    together every ``flush_s`` (so the scaler wakes once per batch, not once per message: its loop's cost per
    message is what the worker is there to save), or at once past ``max_bytes``.

    A scaler that stops reading leaves the frames in the pipe's buffer. Past ``max_backlog`` bytes the worker
    gives up (``on_backlog``, by default: exit): dropping messages would leave the scaler's view wrong in
    ways it cannot see, while a worker restarted by the scaler starts over from fresh snapshots, its nodes
    stale (``UNAVAILABLE``) meanwhile."""

    def __init__(
        self,
        transport: asyncio.WriteTransport,
        flush_s: float = 0.01,
        max_bytes: int = 1 << 20,
        *,
        max_backlog: int = 256 << 20,
        on_backlog: Callable[[int], None] | None = None,
    ) -> None:
        self._transport = transport
        self._flush_s = flush_s
        self._max_bytes = max_bytes
        self._max_backlog = max_backlog
        self._on_backlog = on_backlog or _exit_on_backlog
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None

    def apply(self, msg: agent_pb2.NodeUpdate) -> None:
        self._write(_frame(_UPDATE, msg.SerializeToString()))

    def mark_disconnected(self, node_name: str, agent_id: str) -> None:
        self._write(_frame(_DISCONNECTED, f"{node_name}\0{agent_id}".encode()))

    def sweep(self, forget_after: float) -> list[str]:
        return []  # the scaler's state forgets nodes, not the worker

    def agent_update(self) -> None:
        pass  # counted by the scaler as it applies the message

    def agent_reconnect(self, reason: str) -> None:
        self._write(_frame(_RECONNECT, reason.encode()))

    def _write(self, frame: bytes) -> None:
        self._buffer += frame
        if len(self._buffer) >= self._max_bytes:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer and not self._transport.is_closing():
            self._transport.write(bytes(self._buffer))
        self._buffer.clear()
        backlog = self._transport.get_write_buffer_size()
        if backlog > self._max_backlog:
            self._on_backlog(backlog)


def _exit_on_backlog(backlog: int) -> None:
    log.error(
        "the scaler has not read %d MiB of this worker's messages; exiting so that it restarts the worker "
        "and starts over from fresh snapshots",
        backlog >> 20,
    )
    logging.shutdown()
    os._exit(3)  # from a loop callback: nothing to unwind that the scaler needs


async def _work(settings: SubscriberSettings) -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    commands = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin.buffer)
    pipe = FrameWriter(transport)
    pool = AgentPool(pipe, settings, pipe)
    try:
        while line := await commands.readline():
            pool.reconcile(json.loads(line)["agents"])
    finally:
        await pool.close()
        pipe.flush()
        transport.close()


def main(argv: Sequence[str] | None = None) -> int:
    from ..lifecycle import run

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the scaler decides
    ap = argparse.ArgumentParser(prog="python -m gpuscale.scaler.ingest", description=__doc__.splitlines()[0])
    ap.add_argument("--settings", required=True, help="SubscriberSettings as JSON")
    ap.add_argument("--event-loop", default="auto")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--log-format", default="text")
    args = ap.parse_args(argv)
    configure_logging(args.log_level, args.log_format, process="ingest")
    run(_work(SubscriberSettings(**json.loads(args.settings))), args.event_loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
