"""TLS between the scaler and the agents: the agent serves its Watch over TLS (mutual, with a client CA), the
scaler dials agents by IP and checks their certificate against the Service name it was issued for, and a
renewed certificate is served from the next handshake on, without a restart."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuscale.scaler.subscriber import SubscriberSettings
from gpuscale.tls import TlsFiles
from tests.poll import until

from .conftest import Cluster, KedaClient

pytest.importorskip("cryptography")  # a dev dependency; certificates are made in the test

from .certs import SERVICE_NAME, Pki, make_pki

POOL = {"scope": "pool", "nodeSelector": "kubernetes.io/hostname=node-a", "targetValue": "50", "window": "0"}


def to_agents(
    pki: Pki, *, client_cert: bool = True, server_name: str | None = SERVICE_NAME
) -> SubscriberSettings:
    return SubscriberSettings(
        backoff_initial_s=0.05,
        backoff_max_s=0.3,
        min_silence_s=0.5,
        tls_ca=str(pki.ca),
        tls_cert=str(pki.service_cert) if client_cert else None,
        tls_key=str(pki.service_key) if client_cert else None,
        tls_server_name=server_name,
    )


async def agent_over_tls(cluster: Cluster, pki: Pki) -> None:
    tls = TlsFiles(pki.service_cert, pki.service_key, client_ca=pki.ca)
    await cluster.node("node-a", "constant:40", gpus=2, tls=tls)


@pytest.mark.parametrize("ingest_workers", [0, 1], ids=["in-process", "ingest-worker"])
async def test_scaler_follows_agents_over_mutual_tls(
    cluster: Cluster, keda: Callable[[int], KedaClient], tmp_path: Path, ingest_workers: int
) -> None:
    pki = make_pki(tmp_path)
    await agent_over_tls(cluster, pki)
    scaler = await cluster.scaler(kube=False, subscriber=to_agents(pki), ingest_workers=ingest_workers)
    client = keda(scaler.grpc_port)

    async def answers() -> bool:
        return (await client.code_of(client.metrics(POOL)))[0].name == "OK"

    await until(answers, what="the scaler follows the agent over TLS")
    assert await client.value(POOL) == pytest.approx(40)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("plaintext", "the agent only speaks TLS"),
        ("no client certificate", "the agent requires one (mutual TLS)"),
        ("no server name", "the certificate names the Service, not the IP dialled"),
        ("another CA", "the agent's certificate is not trusted"),
    ],
)
async def test_scaler_without_the_right_credentials_never_follows(
    cluster: Cluster, tmp_path: Path, case: str, expected: str
) -> None:
    pki = make_pki(tmp_path)
    await agent_over_tls(cluster, pki)
    subscriber = {
        "plaintext": SubscriberSettings(backoff_initial_s=0.05, backoff_max_s=0.3),
        "no client certificate": to_agents(pki, client_cert=False),
        "no server name": to_agents(pki, server_name=None),
        "another CA": SubscriberSettings(
            backoff_initial_s=0.05, backoff_max_s=0.3, tls_ca=str(pki.other_ca), tls_server_name=SERVICE_NAME
        ),
    }[case]
    scaler = await cluster.scaler(kube=False, subscriber=subscriber)
    # A few attempts, each refused (the positive case above connects within one): never a node.

    def refusals() -> float:
        value = scaler.registry.get_sample_value(
            "gpuscale_scaler_agent_reconnects_total", {"reason": "UNAVAILABLE"}
        )
        return value or 0.0

    await until(lambda: refusals() >= 3, what=f"refused: {expected}")
    assert scaler.state.node_count() == 0, expected
    assert scaler.pool.connected == 0


def _served_certificate(port: int, pki: Pki) -> bytes:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.service_cert), str(pki.service_key))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=SERVICE_NAME) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_a_renewed_certificate_is_served_without_a_restart(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    live = tmp_path / "live"  # what the Secret's volume holds; renewed in place
    live.mkdir()
    cert, key = live / "tls.crt", live / "tls.key"
    shutil.copy(pki.service_cert, cert)
    shutil.copy(pki.service_key, key)
    node = await cluster.node("node-a", "constant:40", gpus=1, tls=TlsFiles(cert, key, client_ca=pki.ca))
    port = node.agent.grpc_port
    first = await asyncio.to_thread(_served_certificate, port, pki)
    assert first == ssl.PEM_cert_to_DER_cert(pki.service_cert.read_text())

    scaler = await cluster.scaler(kube=False, subscriber=to_agents(pki))
    await until(lambda: scaler.pool.connected == 1, what="followed over TLS")

    key.write_bytes(pki.service_key_2.read_bytes())  # the renewal: key first, then certificate, as files land
    cert.write_bytes(pki.service_cert_2.read_bytes())
    renewed = await asyncio.to_thread(_served_certificate, port, pki)
    assert renewed == ssl.PEM_cert_to_DER_cert(pki.service_cert_2.read_text())
    assert scaler.pool.connected == 1  # the open stream goes on
