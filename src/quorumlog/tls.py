"""Mutual TLS: a private CA and per-member certificates (`quorumlog certs init`), the SSL contexts nodes
and clients use, and the identity a certificate names.

A certificate names its holder in a SAN URI `quorumlog:<id>` (and its CN): a node id for a node, "client"
or "client:<token>" for a client. A node accepts a connection only with a certificate its CA signed, and
refuses a HELLO whose node id is not the one that certificate names; a node or a client connecting to a
node checks that the certificate names a node (the one dialled, when known) and the id its HELLO gives.
So a member's key, not a claim in a message, says who it is. Client certificates are made for client use
only. Without a shared secret, a certificate naming "client" may do everything, one naming
"client:<name>" what the nodes' [[token]] `name` allows, and is refused when there is none.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

URI_PREFIX = "quorumlog:"


def cert_identity(peercert: dict[str, Any] | None) -> str | None:
    """The id a verified peer certificate names (`ssl` getpeercert() form): its quorumlog: SAN URI, else
    its common name; None without a certificate."""
    if not peercert:
        return None
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "URI" and value.startswith(URI_PREFIX):
            return str(value[len(URI_PREFIX):])
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def server_context(cert: str | Path, key: str | Path, ca: str | Path) -> ssl.SSLContext:
    """A node's listening side: its own certificate, and a certificate the CA signed required of everyone."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca: str | Path, cert: str | Path | None = None, key: str | Path | None = None) -> ssl.SSLContext:
    """The connecting side: the node's certificate must be signed by the CA. Host names are not checked:
    nodes are named by the id in their certificate, which the caller compares (see module docstring)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    ctx.check_hostname = False
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key) if key is not None else None)
    return ctx


def init_certs(directory: str | Path, nodes: Sequence[str], clients: Sequence[str] = ("client",),
               hosts: Sequence[str] = ("127.0.0.1", "localhost"), days: int = 825) -> list[Path]:
    """Make a private CA and a certificate and key for each node and client in `directory`: ca.pem (the
    CA's certificate, for everyone), ca.key (keep it away from the nodes), <id>.pem and <id>.key. Keys are
    written readable by their owner only. Returns the files written."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    written: list[Path] = []

    def key_pem(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        written.append(path)

    def cert_pem(cert: x509.Certificate, path: Path) -> None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        written.append(path)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quorumlog CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key_pem(ca_key, d / "ca.key")
    cert_pem(ca, d / "ca.pem")
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    for member in [*nodes, *clients]:
        # A node serves and dials its peers; a client only dials: its certificate cannot serve, so it
        # cannot pose as a node to other clients (their TLS refuses it before any id is compared).
        is_node = member in nodes
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if is_node else \
            [ExtendedKeyUsageOID.CLIENT_AUTH]
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, member)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(
                    [x509.UniformResourceIdentifier(URI_PREFIX + member), *(names if is_node else [])]),
                    critical=False)
                .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .sign(ca_key, hashes.SHA256()))
        file = member.replace(":", "-")  # "client:reader" -> client-reader.pem
        key_pem(key, d / f"{file}.key")
        cert_pem(cert, d / f"{file}.pem")
    return written
