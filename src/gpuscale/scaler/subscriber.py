"""Fan-in: one ``gpuscale.v1.Agent/Watch`` stream per agent, applied to the ``ClusterState``.

``AgentSubscriber`` follows one address: connect → SNAPSHOT → UPDATEs, forever. A stream that ends, fails, or
stays silent for ``silence_intervals`` sampling intervals (agents send a heartbeat every ~3 intervals) is
dropped, the node is marked stale, and the subscriber reconnects with exponential backoff and jitter (reset
after a snapshot arrives). ``AgentPool`` keeps one subscriber per discovered address and forgets nodes that
stay disconnected for ``forget_after_s``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
import grpc.aio

from .._proto import agent_pb2, agent_pb2_grpc
from ..lifecycle import cancel_tasks
from ..tls import ClientTls, channel_credentials, channel_options

__all__ = ["AgentPool", "AgentSubscriber", "StreamCounters", "StreamSink", "SubscriberSettings"]


class StreamSink(Protocol):
    """Where the streams' messages go: the ``ClusterState`` (or, in an ingest worker, the pipe to it)."""

    def apply(self, msg: agent_pb2.NodeUpdate) -> None: ...

    def mark_disconnected(self, node_name: str, agent_id: str) -> None: ...

    def sweep(self, forget_after: float) -> list[str]: ...


class StreamCounters(Protocol):
    """``ScalerMetrics``'s share in the streams (or, in an ingest worker, the pipe to it)."""

    def agent_update(self) -> None: ...

    def agent_reconnect(self, reason: str) -> None: ...

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SubscriberSettings:
    client: str = "gpuscale-scaler"
    history_s: float = 120.0  # sample history asked for in the snapshot
    connect_timeout_s: float = 5.0  # for the first message of a stream
    silence_intervals: float = 6.0  # no message for this many sampling intervals: the agent is gone
    min_silence_s: float = 1.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    forget_after_s: float = 600.0  # a node disconnected this long is forgotten
    max_message_bytes: int = 64 * 1024 * 1024
    # TLS to the agents (paths, so that the settings travel to ingest workers as JSON): the CA that signed
    # their certificate, this scaler's own certificate and key for mutual TLS, the name their certificate has
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_server_name: str | None = None

    def client_tls(self) -> ClientTls | None:
        if self.tls_ca is None:
            return None
        return ClientTls(
            Path(self.tls_ca),
            Path(self.tls_cert) if self.tls_cert else None,
            Path(self.tls_key) if self.tls_key else None,
            self.tls_server_name or None,
        )


class _Silent(Exception):
    pass


class _Protocol(Exception):
    pass


class AgentSubscriber:
    def __init__(
        self,
        address: str,
        state: StreamSink,
        settings: SubscriberSettings,
        metrics: StreamCounters | None = None,
    ) -> None:
        self.address = address
        self.state = state
        self.settings = settings
        self.metrics = metrics
        self.tls = settings.client_tls()
        self.connected = False
        self.node: str | None = None
        self.agent_id = ""
        self.streams = 0  # streams that delivered a snapshot

    async def run(self) -> None:
        s = self.settings
        backoff = s.backoff_initial_s
        while True:
            reason = "ended"
            try:
                await self._stream()
            except grpc.aio.AioRpcError as e:
                reason = e.code().name
                log.log(
                    logging.INFO if self.connected else logging.DEBUG,
                    "agent %s: Watch failed: %s: %s",
                    self.address,
                    e.code().name,
                    e.details(),
                )
            except _Silent as e:
                reason = "silent"
                log.warning("agent %s (node %s): %s; reconnecting", self.address, self.node, e)
            except _Protocol as e:
                reason = "protocol"
                log.warning("agent %s: %s; reconnecting", self.address, e)
            finally:
                if self.connected:
                    log.info(
                        "agent %s (node %s): stream gone; its data is stale until it returns",
                        self.address,
                        self.node,
                    )
                self._disconnected()
            if self.metrics is not None:
                self.metrics.agent_reconnect(reason)
            if self.streams:
                backoff, self.streams = s.backoff_initial_s, 0
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, s.backoff_max_s)

    def _disconnected(self) -> None:
        if self.node is not None:
            self.state.mark_disconnected(self.node, self.agent_id)
        self.connected = False

    async def _stream(self) -> None:
        s = self.settings
        options: list[tuple[str, int | str]] = [
            ("grpc.max_receive_message_length", s.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
        ]
        if self.tls is None:
            channel = grpc.aio.insecure_channel(self.address, options=options)
        else:  # read at every connection: a rotated certificate is picked up at the next one
            try:
                credentials = channel_credentials(self.tls)
            except OSError as e:
                raise _Protocol(f"cannot read the TLS files for the agents: {e}") from e
            options += channel_options(self.tls)
            channel = grpc.aio.secure_channel(self.address, credentials, options=options)
        async with channel:
            request = agent_pb2.WatchRequest(client=s.client, history_seconds=int(s.history_s))
            call = agent_pb2_grpc.AgentStub(channel).Watch(request)
            timeout = s.connect_timeout_s
            first = True
            try:
                while True:
                    try:
                        # not wait_for: on 3.11 it swallows a cancel that races the read's completion
                        async with asyncio.timeout(timeout):
                            msg = await call.read()
                    except TimeoutError:
                        raise _Silent(f"no message for {timeout:.1f}s") from None
                    if msg is grpc.aio.EOF:
                        return
                    assert isinstance(msg, agent_pb2.NodeUpdate)
                    if first:
                        if msg.kind != agent_pb2.NodeUpdate.SNAPSHOT:
                            raise _Protocol("the stream did not start with a SNAPSHOT")
                        first = False
                        self.node, self.agent_id = msg.node_name, msg.agent_id
                        self.connected = True
                        self.streams += 1
                        log.info(
                            "agent %s: following node %s (agent %s, %d GPUs)",
                            self.address,
                            msg.node_name,
                            msg.agent_id,
                            len(msg.gpus),
                        )
                    self.state.apply(msg)
                    if self.metrics is not None:
                        self.metrics.agent_update()
                    interval = msg.interval_seconds if msg.interval_seconds > 0 else 1.0
                    timeout = max(s.min_silence_s, s.silence_intervals * interval)
            finally:
                call.cancel()


class AgentPool:
    """One ``AgentSubscriber`` per address; ``reconcile`` follows what discovery finds."""

    def __init__(
        self,
        state: StreamSink,
        settings: SubscriberSettings | None = None,
        metrics: StreamCounters | None = None,
    ) -> None:
        self.state = state
        self.settings = settings or SubscriberSettings()
        self.metrics = metrics
        self._subs: dict[str, tuple[AgentSubscriber, asyncio.Task[None]]] = {}

    @property
    def addresses(self) -> list[str]:
        return sorted(self._subs)

    @property
    def connected(self) -> int:
        return sum(sub.connected for sub, _ in self._subs.values())

    def subscriber(self, address: str) -> AgentSubscriber | None:
        entry = self._subs.get(address)
        return entry[0] if entry else None

    def reconcile(self, addresses: Iterable[str]) -> None:
        wanted = set(addresses)
        for address in sorted(wanted - self._subs.keys()):
            sub = AgentSubscriber(address, self.state, self.settings, self.metrics)
            log.info("agent %s discovered", address)
            self._subs[address] = (sub, asyncio.create_task(sub.run(), name=f"watch {address}"))
        for address in sorted(self._subs.keys() - wanted):
            sub, task = self._subs.pop(address)
            log.info("agent %s no longer discovered; dropping its stream", address)
            task.cancel()
        self.state.sweep(self.settings.forget_after_s)

    async def close(self) -> None:
        tasks = [task for _, task in self._subs.values()]
        self._subs.clear()
        await cancel_tasks(tasks)
