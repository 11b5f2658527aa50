"""The control plane's certificates, made with ``cryptography``: one cluster CA, the API server's serving
certificate, an admin client certificate (``O=system:masters``), the front-proxy CA and client of the
aggregation layer, the service-account signing key, and KEDA's certificate (the operator's gRPC server, the
metrics adapter's client of it and its serving certificate for the APIService, so SANs for all three).

Everything is written under one directory, PEM, keys unencrypted (a throw-away cluster on loopback).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki", "sign_client", "write_kubeconfig"]

_DAYS = 30


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    front_proxy_ca: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path
    sa_key: Path  # RSA private key: the API server signs service-account tokens with it
    sa_pub: Path
    keda_dir: Path  # ca.crt, tls.crt, tls.key, as KEDA reads them from --cert-dir


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    cn: str,
    *,
    org: str | None = None,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> tuple[bytes, bytes]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return _pem(cert), _pem_key(key)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def sign_client(pki: Pki, cn: str, org: str | None, cert_path: Path, key_path: Path) -> None:
    """A client certificate of the cluster CA for user ``cn`` (group ``org``)."""
    cert, key = _leaf(_load_ca(pki), cn, org=org, client=True)
    _write(cert_path, cert)
    _write(key_path, key)


def make_pki(directory: Path) -> Pki:
    """Generate every certificate the control plane needs into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("gpuscale-controlplane-ca")
    front = _ca("gpuscale-front-proxy-ca")
    d = directory
    _write(d / "ca.crt", _pem(ca[0]))
    _write(d / "ca.key", _pem_key(ca[1]))
    cert, key = _leaf(
        ca,
        "kube-apiserver",
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1",),
        server=True,
    )
    _write(d / "apiserver.crt", cert)
    _write(d / "apiserver.key", key)
    cert, key = _leaf(ca, "admin", org="system:masters", client=True)
    _write(d / "admin.crt", cert)
    _write(d / "admin.key", key)
    _write(d / "front-proxy-ca.crt", _pem(front[0]))
    cert, key = _leaf(front, "front-proxy-client", client=True)
    _write(d / "front-proxy-client.crt", cert)
    _write(d / "front-proxy-client.key", key)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(d / "sa.key", _pem_key(sa))
    _write(
        d / "sa.pub",
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    keda = d / "keda"
    keda.mkdir(exist_ok=True)
    _write(keda / "ca.crt", _pem(ca[0]))
    cert, key = _leaf(
        ca,
        "keda",
        dns=(
            "localhost",
            "keda-metrics-apiserver.keda.svc",
            "keda-operator.keda.svc",
            "keda-operator.keda.svc.cluster.local",
        ),
        ips=("127.0.0.1",),
        server=True,
        client=True,
    )
    _write(keda / "tls.crt", cert)
    _write(keda / "tls.key", key)
    return Pki(
        dir=d,
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        apiserver_cert=d / "apiserver.crt",
        apiserver_key=d / "apiserver.key",
        admin_cert=d / "admin.crt",
        admin_key=d / "admin.key",
        front_proxy_ca=d / "front-proxy-ca.crt",
        front_proxy_client_cert=d / "front-proxy-client.crt",
        front_proxy_client_key=d / "front-proxy-client.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
        keda_dir=keda,
    )


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    *,
    user: str,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> Path:
    """A kubeconfig at ``path`` (mode 0600) for ``user`` against ``server`` with its CA, by client
    certificate or by token."""
    creds: dict[str, Any] = {}
    if cert is not None and key is not None:
        creds = {"client-certificate": str(cert), "client-key": str(key)}
    if token is not None:
        creds["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpuscale", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [
            {"name": user, "context": {"cluster": "gpuscale", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return path
