"""Finding the agents: a fixed list (``--agents HOST:PORT,...``) or the DNS name of their headless Service
(``--agents-dns NAME:PORT``), resolved again every few seconds as nodes come and go.

A failed DNS lookup keeps the addresses found before (a DNS hiccup must not drop every node); an empty answer
is taken as it is. A headless Service with no ready pod has no records, and cluster DNS then answers NXDOMAIN
(the Kubernetes DNS specification): ``EAI_NONAME`` / ``EAI_NODATA`` mean "no agent", not a failed lookup, or a
scaler started before any GPU node is up would never learn that there is nothing to follow.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from ..netaddr import join_host_port, parse_host_port

__all__ = ["Discovery", "DnsDiscovery", "StaticDiscovery", "follow"]

log = logging.getLogger(__name__)

Resolver = Callable[..., Awaitable[list[tuple[Any, ...]]]]
# getaddrinfo's answers for a name that resolves to no address (NXDOMAIN, or no A/AAAA record)
_SAY_AGAIN_S = 300.0
_NO_ADDRESS = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)


class Discovery(Protocol):
    @property
    def note(self) -> str | None:
        """Why the last answer was empty, where a user can act on it (a DNS name with no address)."""

    async def addresses(self) -> set[str] | None:
        """The agents' ``host:port`` now, or ``None`` when the lookup failed (keep the previous set)."""


class StaticDiscovery:
    note: str | None = None

    def __init__(self, addresses: Iterable[str]) -> None:
        self._addresses = {join_host_port(*parse_host_port(a, "--agents")) for a in addresses if a.strip()}

    async def addresses(self) -> set[str] | None:
        return set(self._addresses)


class DnsDiscovery:
    """Every A/AAAA record of ``name`` (a headless Service has one per ready pod), with ``port``."""

    def __init__(self, name: str, port: int, *, resolver: Resolver | None = None) -> None:
        self.name = name
        self.port = port
        self._resolver = resolver
        self._said_none_at = -math.inf
        self.note: str | None = None

    async def addresses(self) -> set[str] | None:
        resolve = self._resolver or asyncio.get_running_loop().getaddrinfo
        try:
            infos = await resolve(self.name, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            if e.errno in _NO_ADDRESS:
                self.note = (
                    f"the agents' DNS name {self.name} has no address: no agent pod is ready, or the name is "
                    "wrong"
                )
                now = time.monotonic()
                if now - self._said_none_at >= _SAY_AGAIN_S:  # not every few seconds while it lasts
                    log.warning("%s (%s)", self.note, e)
                    self._said_none_at = now
                return set()
            log.warning("cannot resolve agents' name %s (%s); keeping the agents found before", self.name, e)
            return None
        except (OSError, UnicodeError) as e:
            log.warning("cannot resolve agents' name %s (%s); keeping the agents found before", self.name, e)
            return None
        self._said_none_at, self.note = -math.inf, None
        return {join_host_port(str(info[4][0]), self.port) for info in infos}


async def follow(discovery: Discovery, apply: Callable[[set[str]], None], interval_s: float) -> None:
    """Resolve every ``interval_s`` seconds and ``apply`` each answer, forever."""
    while True:
        found = await discovery.addresses()
        if found is not None:
            apply(found)
        await asyncio.sleep(interval_s)
