"""TLS for gpuscale's gRPC servers (the scaler's, for KEDA; the agent's, for the scaler) and for the scaler's
connections to the agents, from PEM files that may be replaced while running.

Certificates in Kubernetes rotate (cert-manager renews them in their Secret, the kubelet updates the mounted
files): a server reads its files again at a handshake after they changed (gRPC's dynamic server credentials,
asking ``_Reloader`` at each new connection; a ``stat`` of three files), and the scaler builds its client
credentials again at every connection to an agent. Nothing needs a restart.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc
import grpc.aio

from .errors import ListenError

__all__ = [
    "SERVER_OPTIONS",
    "ClientTls",
    "TlsFiles",
    "add_server_port",
    "channel_credentials",
    "channel_options",
    "server_credentials",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A server's PEM certificate and key; with ``client_ca``, clients must present a certificate it signed
    (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True, slots=True)
class ClientTls:
    """How a client checks a server (``ca``), proves itself (``cert`` and ``key``, for mutual TLS), and which
    name it expects in the server's certificate (``server_name``; default: the host it dials). The scaler
    dials agents by pod IP, so their certificate names the agents' Service, and ``server_name`` says it."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None


class _Reloader:
    """The certificate configuration of a server, read again when a file's modification time or size
    changes. A read that fails (a file half-written, or gone during the kubelet's symlink swap) keeps the
    configuration in use and is tried again at the next handshake."""

    def __init__(self, tls: TlsFiles) -> None:
        self.tls = tls
        self._seen = self._signature()
        self.initial = self._configuration()

    def _files(self) -> list[Path]:
        return [p for p in (self.tls.cert, self.tls.key, self.tls.client_ca) if p is not None]

    def _signature(self) -> tuple[tuple[int, int], ...]:
        out = []
        for p in self._files():
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        ca = self.tls.client_ca.read_bytes() if self.tls.client_ca is not None else None
        return grpc.ssl_server_certificate_configuration(
            [(self.tls.key.read_bytes(), self.tls.cert.read_bytes())], root_certificates=ca
        )

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            signature = self._signature()
            if signature == self._seen:
                return None
            configuration = self._configuration()
        except (OSError, ValueError, RuntimeError) as e:
            log.warning("TLS files of %s changed, unreadable (%s); keeping those in use", self.tls.cert, e)
            return None
        self._seen = signature
        log.info("TLS files of %s changed: offered to gRPC for new connections", self.tls.cert)
        return configuration


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """Credentials for ``add_secure_port`` that follow the files as they are replaced."""
    reloader = _Reloader(tls)
    fetch = cast(Callable[[], grpc.ServerCertificateConfiguration], reloader)  # None: no change (gRPC's API)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial, fetch, require_client_authentication=tls.client_ca is not None
    )


# gRPC sets SO_REUSEPORT by default: a second server on a port another one holds would bind too, and the two
# would split the connections. Off, the second one's bind fails (ListenError).
SERVER_OPTIONS = [("grpc.so_reuseport", 0)]


def add_server_port(
    server: grpc.aio.Server, address: str, tls: TlsFiles | None, *, flag: str = "--grpc-address"
) -> int:
    """Listen on ``address`` (over TLS with ``tls``); the port bound. ``ListenError`` (naming ``flag``) when
    gRPC cannot bind it: gRPC says only "Failed to bind"."""
    try:
        if tls is not None:
            return server.add_secure_port(address, server_credentials(tls))
        return server.add_insecure_port(address)
    except RuntimeError as e:
        raise ListenError(flag, address, "gRPC could not bind it") from e


def channel_credentials(tls: ClientTls) -> grpc.ChannelCredentials:
    """Credentials read from the files now (call it at each connection to follow a rotation)."""
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca.read_bytes(),
        private_key=tls.key.read_bytes() if tls.key is not None else None,
        certificate_chain=tls.cert.read_bytes() if tls.cert is not None else None,
    )


def channel_options(tls: ClientTls | None) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", tls.server_name)] if tls and tls.server_name else []
