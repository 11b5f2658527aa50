"""The Kubernetes API from inside a pod, without kubernetes_asyncio.

What gpuscale asks the API for is a few raw JSON GETs and one watch (``_http.py``). In a pod that needs only
the service account: the API server's address from ``KUBERNETES_SERVICE_HOST``/``_PORT``, its CA, and the
bearer token, which the kubelet rotates in place (so it is read again every ``token_refresh_s``). Importing
``kubernetes_asyncio.client`` for that costs about 74 MiB and 1,300 modules (it loads every model class), on
every GPU node for the agent; a kubeconfig (a developer's machine, the tests) still goes through
kubernetes_asyncio, which handles every kind of credential a kubeconfig can hold.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from .errors import KubeConfigError

__all__ = ["SERVICE_ACCOUNT", "InClusterApi"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class InClusterApi:
    """GETs to the API server at ``server`` (``https://host:port``), trusting ``ca_file``, with the bearer
    token in ``token_file``. ``close`` when done."""

    def __init__(
        self, server: str, token_file: Path, ca_file: Path, *, token_refresh_s: float = 60.0
    ) -> None:
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.token_refresh_s = token_refresh_s
        try:
            self._ssl = ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as e:
            raise KubeConfigError(f"cannot load the in-cluster service account: CA {ca_file}: {e}") from e
        self._token = ""
        self._token_read = -float("inf")
        self._read_token()
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_environment(cls, directory: Path = SERVICE_ACCOUNT) -> InClusterApi:
        """From ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` and ``directory``'s ``token`` and
        ``ca.crt``, as a pod sees them. ``KubeConfigError`` when any is missing."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise KubeConfigError(
                "cannot load the in-cluster service account: KUBERNETES_SERVICE_HOST and "
                "KUBERNETES_SERVICE_PORT are not set (not in a pod?); give --kubeconfig"
            )
        if ":" in host:  # IPv6
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", directory / "token", directory / "ca.crt")

    def _read_token(self) -> str:
        now = time.monotonic()
        if now - self._token_read >= self.token_refresh_s:
            try:
                self._token = self.token_file.read_text().strip()
            except OSError as e:
                if not self._token:  # at start: a configuration error; later: keep the last good token
                    raise KubeConfigError(
                        f"cannot load the in-cluster service account: token {self.token_file}: {e}"
                    ) from e
            self._token_read = now
        return self._token

    async def get(
        self, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """``GET path?query``; the caller reads and releases the response (or streams it)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl))
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self._read_token()}"}
        return await self._session.get(
            self.server + path, params=list(query), headers=headers, timeout=timeout
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
