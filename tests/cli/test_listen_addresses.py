"""Listen addresses: ``[::]:PORT`` (the default) answers on IPv4 and IPv6 alike, for gRPC and for HTTP, on one
port each; ``127.0.0.1:PORT`` only on IPv4. A pod on an IPv6-only cluster is probed and called on its IPv6
address, one on an IPv4 cluster on its IPv4 address: the same default must serve both."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import aiohttp
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuscale.netaddr import join_host_port, parse_host_port, split_address
from gpuscale.scaler.server import Scaler, ScalerSettings


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")


async def _grpc_serving(host: str, port: int) -> bool:
    async with grpc.aio.insecure_channel(join_host_port(host, port)) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=3
            )
        except grpc.aio.AioRpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def _http_ok(host: str, port: int) -> bool:
    url = f"http://{join_host_port(host, port)}/healthz"
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, timeout=aiohttp.ClientTimeout(total=3)) as r,
        ):
            return r.status == 200
    except aiohttp.ClientError:
        return False


@needs_ipv6
async def test_agent_on_every_family(start_agent: Callable[..., Any]) -> None:
    agent = await start_agent(grpc_address="[::]:0", metrics_address="[::]:0")
    for host in ("127.0.0.1", "::1"):
        assert await _grpc_serving(host, agent.grpc_port), host
        assert await _http_ok(host, agent.metrics_port), host


@needs_ipv6
async def test_scaler_on_every_family_and_one_family() -> None:
    scaler = Scaler(ScalerSettings(agents=(), grpc_address="[::]:0", metrics_address="[::]:0"))
    await scaler.start()
    try:
        for host in ("127.0.0.1", "::1"):
            assert await _grpc_serving(host, scaler.grpc_port), host
            assert await _http_ok(host, scaler.metrics_port), host
    finally:
        await scaler.stop()
    v4 = Scaler(ScalerSettings(agents=(), grpc_address="127.0.0.1:0", metrics_address="127.0.0.1:0"))
    await v4.start()
    try:
        assert await _http_ok("127.0.0.1", v4.metrics_port)
        assert not await _http_ok("::1", v4.metrics_port)
    finally:
        await v4.stop()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("[::]:6000", ("::", 6000)), ("0.0.0.0:6000", ("0.0.0.0", 6000)), ("[fd00::1]:7", ("fd00::1", 7))],
)
def test_addresses_round_trip(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text, "--grpc-address") == expected
    assert split_address(text) == expected
    assert join_host_port(*expected) == text


@pytest.mark.parametrize("text", ["fe80::1", "2001:db8::1:6000", "[::]", "[::1:6000", "host:0"])
def test_ambiguous_or_malformed_addresses_are_refused(text: str) -> None:
    from gpuscale.errors import UsageError

    with pytest.raises(UsageError, match=r'--grpc-address ".*" must be HOST:PORT, e.g. \[::\]:6000'):
        parse_host_port(text, "--grpc-address")


def test_the_defaults_listen_on_every_family() -> None:
    from gpuscale.cli import build_parser

    for command in ("agent", "scaler"):
        args = build_parser().parse_args([command])
        assert split_address(args.grpc_address)[0] == "::", command
        assert split_address(args.metrics_address)[0] == "::", command
