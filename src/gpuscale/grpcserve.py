"""The gRPC servers of the agent and the scaler, started the same way: the services given, plus
``grpc.health.v1`` (SERVING for the whole server and for each service) and server reflection, on one
address, over TLS where files are given. The sibling of ``httpserve.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .errors import ListenError
from .netaddr import check_listenable, join_host_port, split_address
from .tls import SERVER_OPTIONS, TlsFiles, add_server_port

__all__ = ["AddService", "serve_grpc"]

AddService = Callable[[grpc.aio.Server], None]


async def serve_grpc(
    address: str,
    services: Sequence[tuple[str, AddService]],
    *,
    tls: TlsFiles | None = None,
    extra: Sequence[AddService] = (),
    flag: str = "--grpc-address",
) -> tuple[grpc.aio.Server, int]:
    """Start a server on ``address`` (``host:port``; port 0: a free one) with each ``(full service name,
    adder)`` of ``services`` reported SERVING, and the ``extra`` adders (services that report their own
    readiness). Returns the started server and the bound port; ``ListenError`` naming ``flag`` when the
    address cannot be listened on."""
    host, wanted = split_address(address)
    try:
        check_listenable(host, wanted)
    except OSError as e:
        raise ListenError(flag, join_host_port(host, wanted), e.strerror or str(e)) from e
    server = grpc.aio.server(options=SERVER_OPTIONS)
    for _, add in services:
        add(server)
    for add in extra:
        add(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [name for name, _ in services]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    port = add_server_port(server, join_host_port(host, wanted), tls, flag=flag)
    try:
        await server.start()
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        for name in names:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    except BaseException:  # cancelled (a signal during start-up): the caller never gets the server to stop
        await server.stop(None)
        raise
    return server, port
