"""TLS between KEDA and the scaler: server TLS, and mutual TLS with a client CA."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio
import pytest

from gpuscale.scaler.server import TlsFiles

from .conftest import Cluster, KedaClient

pytest.importorskip("cryptography")  # a dev dependency; certificates are made in the test

from .certs import Pki, make_pki

MD = {"podSelector": "app=llm", "targetValue": "60"}


async def spec_over(port: int, pki: Pki, *, ca: Path | None = None, client_cert: bool = False) -> str:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(ca or pki.ca).read_bytes(),
        private_key=pki.client_key.read_bytes() if client_cert else None,
        certificate_chain=pki.client_cert.read_bytes() if client_cert else None,
    )
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        code, _ = await KedaClient(ch).code_of(KedaClient(ch).spec(MD))
        if code != grpc.StatusCode.OK:
            return code.name
        return (await KedaClient(ch).spec(MD)).metricSpecs[0].metricName


async def test_server_tls(cluster: Cluster, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    scaler = await cluster.scaler(kube=False, agents=(), tls=TlsFiles(pki.server_cert, pki.server_key))
    assert await spec_over(scaler.grpc_port, pki) == "gpuscale-gpu-utilization-avg"
    assert await spec_over(scaler.grpc_port, pki, ca=pki.other_ca) == "UNAVAILABLE"  # untrusted server
    async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.grpc_port}") as ch:  # plaintext is refused
        code, _ = await KedaClient(ch).code_of(KedaClient(ch).spec(MD))
        assert code == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls(cluster: Cluster, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = TlsFiles(pki.server_cert, pki.server_key, client_ca=pki.ca)
    scaler = await cluster.scaler(kube=False, agents=(), tls=tls)
    assert await spec_over(scaler.grpc_port, pki, client_cert=True) == "gpuscale-gpu-utilization-avg"
    assert await spec_over(scaler.grpc_port, pki, client_cert=False) == "UNAVAILABLE"
