"""Throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost, a client certificate, and
two certificates for a Service name only (server and client use, as one cert-manager Certificate gives the
agents and the scaler), to dial by IP with a server-name override and to rotate one into the other."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here
    service_cert: Path  # DNS name SERVICE_NAME only; server and client auth
    service_key: Path
    service_cert_2: Path  # the same name, another key and serial: a renewal
    service_key_2: Path


SERVICE_NAME = "gpuscale-agent.gpuscale.svc"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    cn: str,
    server: bool,
    *,
    names: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if names
                else [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    ca, ca_key = _ca("gpuscale test CA")
    other, _ = _ca("another CA")
    server, server_key = _leaf(ca, ca_key, "gpuscale-scaler", server=True)
    client, client_key = _leaf(ca, ca_key, "keda-operator", server=False)
    service = [
        _leaf(ca, ca_key, "gpuscale", server=True, names=[x509.DNSName(SERVICE_NAME)]) for _ in range(2)
    ]
    files = {
        "service.pem": service[0][0].public_bytes(serialization.Encoding.PEM),
        "service-key.pem": _pem_key(service[0][1]),
        "service-2.pem": service[1][0].public_bytes(serialization.Encoding.PEM),
        "service-key-2.pem": _pem_key(service[1][1]),
        "ca.pem": ca.public_bytes(serialization.Encoding.PEM),
        "other-ca.pem": other.public_bytes(serialization.Encoding.PEM),
        "server.pem": server.public_bytes(serialization.Encoding.PEM),
        "server-key.pem": _pem_key(server_key),
        "client.pem": client.public_bytes(serialization.Encoding.PEM),
        "client-key.pem": _pem_key(client_key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    d = directory
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        d / "server-key.pem",
        d / "client.pem",
        d / "client-key.pem",
        d / "other-ca.pem",
        d / "service.pem",
        d / "service-key.pem",
        d / "service-2.pem",
        d / "service-key-2.pem",
    )
