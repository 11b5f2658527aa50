"""``HOST:PORT`` addresses, parsed and bound the same way by the agent, the scaler and the CLI.

``[::]:PORT`` listens on every address family, IPv4 and IPv6 (the default: a pod on an IPv6-only or
dual-stack cluster is probed on its IPv6 address); ``0.0.0.0:PORT`` on IPv4 only; ``[::1]:PORT`` or
``127.0.0.1:PORT`` on one address. gRPC reads ``[::]`` that way itself (it falls back to IPv4 where IPv6 is
off); asyncio binds ``::`` IPv6-only, so the HTTP server binds its own dual-stack socket for it.
"""

from __future__ import annotations

import socket

from .errors import UsageError

__all__ = ["any_address_socket", "check_listenable", "join_host_port", "parse_host_port", "split_address"]


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); raise ``UsageError`` naming ``what``."""
    host, sep, port = text.strip().rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host.strip("[]")
    unbracketed_v6 = ":" in host and not bracketed  # fe80::1:6000 is ambiguous: [fe80::1]:6000
    if not sep or not host or unbracketed_v6 or not port.isdigit() or not 0 < int(port) <= 65535:
        raise UsageError(
            f'{what} "{text}" must be HOST:PORT, e.g. [::]:6000, 0.0.0.0:6000 or gpuscale-agent.gpuscale:6000'
        )
    return host, int(port)


def split_address(address: str) -> tuple[str, int]:
    """A listen address already checked by ``parse_host_port`` (or built in code, port 0 allowed) →
    (host, port); an empty host is every address, ``::``."""
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]") or "::", int(port)


def join_host_port(host: str, port: int) -> str:
    """The inverse of ``parse_host_port``: IPv6 literals in brackets, as gRPC and URLs want them."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def any_address_socket(port: int) -> socket.socket:
    """A listening TCP socket on every address: IPv6 with IPv4 mapped (``IPV6_V6ONLY`` off), or IPv4 alone
    where the kernel has no IPv6. What ``[::]`` means to gRPC, for the HTTP server (asyncio would bind
    ``::`` IPv6-only)."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:  # IPv6 disabled in the kernel
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address: tuple[str, int] = ("0.0.0.0", port)
    else:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address = ("::", port)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def check_listenable(host: str, port: int) -> None:
    """Raise ``OSError`` (its ``strerror`` says why) unless a TCP socket can listen on ``host:port`` now, as
    gRPC binds it: on every address for ``::`` (``any_address_socket``), else on one at least of the
    addresses ``host`` resolves to. gRPC's C core logs its own failure to bind on stderr, a line before ours
    and in its own format; checked first, the one line said is gpuscale's ``ListenError``."""
    if host in ("", "::"):
        any_address_socket(port).close()
        return
    first: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
                sock.listen(1)
        except OSError as e:
            first = first or e
        else:
            return
    raise first or OSError(f"{host} resolves to no address")
