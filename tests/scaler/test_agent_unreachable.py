"""An agent the scaler cannot follow is said at once, then at a bounded rate: a dead address, plaintext against
a TLS agent and TLS against a plaintext one each log a warning naming the address, the gRPC code and what is
likely wrong; ``/readyz`` names the agents not connected, with their newest failure."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from pathlib import Path

import aiohttp
import pytest

from gpuscale.scaler.server import Scaler
from gpuscale.scaler.subscriber import SubscriberSettings
from gpuscale.tls import TlsFiles
from tests.poll import until

from .conftest import Cluster

LOGGER = "gpuscale.scaler.subscriber"


def _dead_address() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _fast(**kw: object) -> SubscriberSettings:
    return SubscriberSettings(backoff_initial_s=0.02, backoff_max_s=0.05, min_silence_s=0.5, **kw)  # type: ignore[arg-type]


def _warnings(caplog: pytest.LogCaptureFixture, address: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and address in r.getMessage()
    ]


async def _readyz(scaler: Scaler) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{scaler.metrics_port}/readyz") as r,
    ):
        return r.status, await r.text()


async def _failures(scaler: Scaler, address: str, at_least: int) -> None:
    async def enough() -> bool:
        sub = scaler.pool.subscriber(address)  # type: ignore[union-attr]
        return sub is not None and sub.failures >= at_least

    await until(enough, what=f"{at_least} failed attempts on {address}")


async def test_a_dead_address_is_logged_once_at_once_and_named_by_readyz(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    dead = _dead_address()
    live = await cluster.node("node-a", "constant:40", gpus=1)
    scaler = await cluster.scaler(
        kube=False,
        agents=(live.address, dead),
        ready_grace_s=0.2,
        subscriber=_fast(failure_log_interval_s=3600),
    )
    await _failures(scaler, dead, 5)
    (warning,) = _warnings(caplog, dead)  # the first failure, at once; the next four within the hour: not
    assert warning == (
        f"agent {dead}: cannot follow its Watch stream: UNAVAILABLE: failed to connect to all addresses; last "
        f"error: UNKNOWN: ipv4:{dead}: Failed to connect to remote host: Connection refused (nothing listens on "
        "that port: is the agent running there, with this --grpc-address port?); retrying with backoff (up to "
        "0.05s), said again at most every 3600s"
    )

    async def lists_the_dead_agent() -> bool:
        status, body = await _readyz(scaler)
        return status == 200 and "1 of 2 agents connected; not connected:" in body

    await until(lists_the_dead_agent, what="/readyz names the agent not connected")
    status, body = await _readyz(scaler)
    assert status == 200  # one agent down does not take this replica out of KEDA's rotation
    lines = body.splitlines()
    assert lines[:2] == ["ok", "1 of 2 agents connected; not connected:"]
    assert lines[2].startswith(f"  {dead}: UNAVAILABLE: failed to connect to all addresses")
    assert lines[2].endswith(
        "Connection refused (nothing listens on that port: is the agent running there, "
        "with this --grpc-address port?)"
    )
    assert len(lines) == 3  # the live agent is not listed

    # The agent comes up on that port: it is followed, said so, and /readyz lists nobody.
    port = int(dead.rsplit(":", 1)[1])
    await cluster.node("node-b", "constant:60", gpus=1, grpc_address=f"127.0.0.1:{port}")

    async def all_connected() -> bool:
        return (await _readyz(scaler))[1] == "ok\n2 of 2 agents connected\n"

    await until(all_connected, what="both agents followed")
    followed = [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and dead in r.getMessage() and "following node node-b" in r.getMessage()
    ]
    assert len(followed) == 1 and " after " in followed[0] and followed[0].endswith(" failed attempts")


async def test_further_failures_are_summed_up_at_most_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The subscriber's clock advances 10 s per failed attempt; the summary interval is 30 s."""
    from gpuscale.scaler.subscriber import AgentSubscriber

    class Sink:
        def apply(self, msg: object) -> None: ...
        def mark_disconnected(self, node_name: str, agent_id: str) -> None: ...
        def sweep(self, forget_after: float) -> list[str]:
            return []

    caplog.set_level(logging.INFO, logger=LOGGER)
    dead = _dead_address()
    ticks = itertools.count(0, 10)
    sub = AgentSubscriber(dead, Sink(), _fast(failure_log_interval_s=30), clock=lambda: float(next(ticks)))
    task = asyncio.create_task(sub.run())
    try:
        await until(lambda: sub.failures >= 10, what="ten failed attempts")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    messages = _warnings(caplog, dead)
    assert messages[0].startswith(f"agent {dead}: cannot follow its Watch stream: UNAVAILABLE: ")
    # attempts 1 (t=0), 4 (t=30), 7 (t=60), 10 (t=90)
    assert [
        m.split(": still cannot follow its Watch stream: ")[1].split(", the newest")[0] for m in messages[1:4]
    ] == [
        "4 attempts failed in 30s (3 since the last report)",
        "7 attempts failed in 60s (3 since the last report)",
        "10 attempts failed in 90s (3 since the last report)",
    ]


async def test_plaintext_against_a_tls_agent_says_tls_mismatch(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    pytest.importorskip("cryptography")
    from .certs import make_pki

    caplog.set_level(logging.INFO, logger=LOGGER)
    pki = make_pki(tmp_path)
    node = await cluster.node(
        "node-a", "constant:40", gpus=1, tls=TlsFiles(pki.service_cert, pki.service_key, client_ca=pki.ca)
    )
    scaler = await cluster.scaler(kube=False, ready_grace_s=0.2, subscriber=_fast())
    await _failures(scaler, node.address, 1)
    (warning,) = _warnings(caplog, node.address)[:1]
    assert warning.startswith(f"agent {node.address}: cannot follow its Watch stream: UNAVAILABLE: ")
    assert (
        "(the agent closed the connection: TLS mismatch? this scaler dials without TLS, and an agent that "
        "serves TLS (its --tls-cert; chart agent.tls) closes such connections: give the scaler "
        "--agent-tls-ca)"
    ) in warning

    async def named() -> bool:
        return "TLS mismatch? this scaler dials without TLS" in (await _readyz(scaler))[1]

    await until(named, what="/readyz says why")


async def test_tls_against_a_plaintext_agent_says_tls_mismatch(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    pytest.importorskip("cryptography")
    from .certs import SERVICE_NAME, make_pki

    caplog.set_level(logging.INFO, logger=LOGGER)
    pki = make_pki(tmp_path)
    node = await cluster.node("node-a", "constant:40", gpus=1)
    tls = _fast(
        tls_ca=str(pki.ca),
        tls_cert=str(pki.service_cert),
        tls_key=str(pki.service_key),
        tls_server_name=SERVICE_NAME,
    )
    scaler = await cluster.scaler(kube=False, subscriber=tls)
    await _failures(scaler, node.address, 1)
    warning = _warnings(caplog, node.address)[0]
    assert (
        "(TLS mismatch: this scaler dials with TLS (--agent-tls-ca) and the handshake failed: the agent "
        "may serve plaintext (no --tls-cert), or --agent-tls-ca did not sign its certificate)"
    ) in warning
