"""Fan-in: one ``gpuscale.v1.Agent/Watch`` stream per agent, applied to the ``ClusterState``.

``AgentSubscriber`` follows one address: connect → SNAPSHOT → UPDATEs, forever. A stream that ends, fails, or
stays silent for ``silence_intervals`` sampling intervals (agents send a heartbeat every ~3 intervals) is
dropped, the node is marked stale, and the subscriber reconnects with exponential backoff and jitter (reset
after a snapshot arrives). ``AgentPool`` keeps one subscriber per discovered address and forgets nodes that
stay disconnected for ``forget_after_s``.

An agent that cannot be followed is said at once: the first failed attempt (after start, or after a stream
that had delivered) is a warning naming the address, the gRPC code and, where the error shows it, what is
likely wrong (nothing listening, TLS on one side only, a certificate name, a client certificate); further
failures are summed up at most every ``failure_log_interval_s``. ``last_error`` keeps the newest, for
``/readyz``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
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
    failure_log_interval_s: float = 60.0  # after the first failure is logged, at most one summary this often
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


def why_unreachable(code: str, details: str, *, tls: bool, server_name: str | None = None) -> str:
    """What a failed connection to an agent most likely means, from gRPC's error text ("" when unsure)."""
    if "Connection refused" in details:
        return "nothing listens on that port: is the agent running there, with this --grpc-address port?"
    if "Domain name not found" in details or "hostname lookup" in details or "DNS resolution" in details:
        return "the name does not resolve"
    if tls and "Hostname Verification" in details:
        return (
            f"the agent's certificate does not name {server_name!r} (--agent-tls-server-name)"
            if server_name
            else "the agent's certificate does not name the address dialled: set "
            "--agent-tls-server-name to the name in it"
        )
    if tls and ("CERTIFICATE_VERIFY_FAILED" in details or "certificate verify failed" in details.lower()):
        return "the agent's certificate is not signed by --agent-tls-ca"
    if tls and ("WRONG_VERSION_NUMBER" in details or "handshake failed" in details.lower()):
        return (
            "TLS mismatch: this scaler dials with TLS (--agent-tls-ca) and the handshake failed: the "
            "agent may serve plaintext (no --tls-cert), or --agent-tls-ca did not sign its certificate"
        )
    if "Socket closed" in details or "Connection reset" in details:
        if tls:
            return (
                "the agent closed the connection during TLS: it may require a client certificate (its "
                "--tls-client-ca): give the scaler --agent-tls-cert and --agent-tls-key"
            )
        return (
            "the agent closed the connection: TLS mismatch? this scaler dials without TLS, and an agent "
            "that serves TLS (its --tls-cert; chart agent.tls) closes such connections: give the scaler "
            "--agent-tls-ca"
        )
    if code == "UNIMPLEMENTED":
        return "that address serves gRPC but not gpuscale.v1.Agent: is it an agent's --grpc-address?"
    return ""


class AgentSubscriber:
    def __init__(
        self,
        address: str,
        state: StreamSink,
        settings: SubscriberSettings,
        metrics: StreamCounters | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
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
        self.failures = 0  # failed attempts since the last stream that delivered a snapshot
        self.last_error: str | None = None  # the newest failure, while not connected
        self._clock = clock
        self._failing_since = 0.0
        self._logged_at = 0.0
        self._logged_failures = 0

    def _failed(self, what: str) -> None:
        """Count a failed attempt; log the first at once, then a summary at most every
        ``failure_log_interval_s``."""
        now = self._clock()
        self.failures += 1
        self.last_error = what
        if self.failures == 1:
            self._failing_since = self._logged_at = now
            self._logged_failures = 1
            log.warning(
                "agent %s: cannot follow its Watch stream: %s; retrying with backoff (up to %gs), said again "
                "at most every %gs",
                self.address,
                what,
                self.settings.backoff_max_s,
                self.settings.failure_log_interval_s,
            )
        elif now - self._logged_at >= self.settings.failure_log_interval_s:
            log.warning(
                "agent %s: still cannot follow its Watch stream: %d attempts failed in %.0fs (%d since the "
                "last report), the newest: %s",
                self.address,
                self.failures,
                now - self._failing_since,
                self.failures - self._logged_failures,
                what,
            )
            self._logged_at, self._logged_failures = now, self.failures

    async def run(self) -> None:
        s = self.settings
        backoff = s.backoff_initial_s
        while True:
            reason = "ended"
            try:
                await self._stream()
            except grpc.aio.AioRpcError as e:
                reason = e.code().name
                details = e.details() or ""
                if self.connected:
                    log.info("agent %s: Watch failed: %s: %s", self.address, reason, details)
                else:
                    hint = why_unreachable(
                        reason, details, tls=self.tls is not None, server_name=self.settings.tls_server_name
                    )
                    self._failed(f"{reason}: {details}" + (f" ({hint})" if hint else ""))
            except _Silent as e:
                reason = "silent"
                if self.connected:
                    log.warning("agent %s (node %s): %s; reconnecting", self.address, self.node, e)
                else:
                    self._failed(f"{e} after connecting: is it a gpuscale agent?")
            except _Protocol as e:
                reason = "protocol"
                if self.connected:
                    log.warning("agent %s: %s; reconnecting", self.address, e)
                else:
                    self._failed(str(e))
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
                            "agent %s: following node %s (agent %s, %d GPUs)%s",
                            self.address,
                            msg.node_name,
                            msg.agent_id,
                            len(msg.gpus),
                            f" after {self.failures} failed attempts" if self.failures else "",
                        )
                        self.failures, self.last_error = 0, None
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

    def not_connected(self) -> dict[str, str | None]:
        """Address → the newest failure (``None``: no attempt has failed yet) of each agent not followed."""
        return {a: sub.last_error for a, (sub, _) in sorted(self._subs.items()) if not sub.connected}

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
