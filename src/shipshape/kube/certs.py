"""Throw-away certificate authorities and serving certificates for HTTPS endpoints.

Used by the placement webhook (its CA is the `caBundle` of the MutatingWebhookConfiguration, so
the controller needs no cert-manager) and by the emulator's API server (its CA goes into the
kubeconfig). ECDSA P-256 keys: small and fast to handshake.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificates are valid from slightly in the past, for clocks a little behind ours.
BACKDATE = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class CertificateBundle:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service-backed webhook."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_certificates(
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    now: float,
    validity_days: int = 365,
    common_name: str = "shipshape-webhook",
) -> CertificateBundle:
    """A fresh CA and a serving certificate for `dns_names` and `ip_addresses`, signed by it."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    start = datetime.fromtimestamp(now, UTC) - BACKDATE
    end = start + BACKDATE + timedelta(days=validity_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    subject = dns_names[0] if dns_names else ip_addresses[0]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return CertificateBundle(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_pem_key(key),
    )


def split_hosts(hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate DNS names from IP addresses ("localhost", "127.0.0.1", "::1")."""
    dns: list[str] = []
    ips: list[str] = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            dns.append(host)
        else:
            ips.append(host)
    return dns, ips


def write_bundle(bundle: CertificateBundle, directory: Path) -> tuple[Path, Path, Path]:
    """Write ca.crt, tls.crt and tls.key (key readable by the owner only); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, cert, key = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    ca.write_bytes(bundle.ca_pem)
    cert.write_bytes(bundle.cert_pem)
    key.touch(mode=0o600, exist_ok=True)
    key.chmod(0o600)
    key.write_bytes(bundle.key_pem)
    return ca, cert, key


def certificate_expires(cert_pem: bytes) -> float:
    """POSIX time at which the (first) certificate in `cert_pem` stops being valid."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.timestamp()


def first_certificate(pem: bytes) -> bytes:
    """The first PEM certificate of a bundle (a CA bundle may hold the previous CA as well)."""
    end = b"-----END CERTIFICATE-----"
    index = pem.find(end)
    return pem if index < 0 else pem[: index + len(end)] + b"\n"
