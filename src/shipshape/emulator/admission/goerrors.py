"""A failed webhook call described in the words of Go's net, net/http, crypto/tls and crypto/x509,
as kube-apiserver reports it after `failed to call webhook: Post "<url>": `.

The HTTP client raises its own exceptions (httpx over anyio and OpenSSL); `describe` walks their
chain to the root cause and prints what Go would have printed for the same failure: a refused dial,
a lookup failure, the request context's deadline, or the certificate check. Go checks a server
certificate in another order than OpenSSL (the leaf's validity period, then the name, then the
chain), so when the peer's certificate is at hand the checks are redone in Go's order. Pure.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

CONTEXT_DEADLINE = "context deadline exceeded"
TLS_VERIFY = "tls: failed to verify certificate: "
UNKNOWN_AUTHORITY = "x509: certificate signed by unknown authority"


@dataclass(frozen=True, slots=True)
class Target:
    """Where the call went: the dialled host and port, and the name the certificate must carry."""

    host: str
    port: int
    server_name: str

    @property
    def address(self) -> str:
        """Go's `net.JoinHostPort`: an IPv6 host in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what it was raised from, outermost first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _errno_text(code: int) -> str:
    """A syscall errno as Go's `syscall.Errno` prints it (glibc's text, lower-cased first letter)."""
    text = os.strerror(code)
    return text[:1].lower() + text[1:]


def describe(
    exc: BaseException,
    target: Target,
    *,
    now: datetime,
    peer: x509.Certificate | None = None,
    trusted: Sequence[x509.Certificate] = (),
) -> str:
    """Go's text for a failed call; `peer` is the server's certificate when TLS verification failed."""
    chain = list(causes(exc))
    if any(isinstance(e, httpx.TimeoutException | TimeoutError) for e in chain):
        return CONTEXT_DEADLINE
    for error in chain:
        if isinstance(error, ssl.SSLCertVerificationError):
            return TLS_VERIFY + certificate_error(
                error.verify_code, target, now=now, peer=peer, trusted=trusted
            )
        if isinstance(error, ssl.SSLError):
            if error.reason == "WRONG_VERSION_NUMBER":
                return "http: server gave HTTP response to HTTPS client"
            return str(error)  # other handshake failures in OpenSSL's words
        if isinstance(error, socket.gaierror):
            return f"dial tcp: lookup {target.host}: no such host"
    if any(isinstance(e, httpx.RemoteProtocolError) for e in chain):
        return "EOF"  # the server closed the connection without answering
    if isinstance(exc, httpx.ConnectError):
        refused = next((e for e in chain if isinstance(e, OSError) and e.errno), None)
        if refused is not None and refused.errno is not None:
            return f"dial tcp {target.address}: connect: {_errno_text(refused.errno)}"
    root = chain[-1]
    return str(root) or type(root).__name__


# ---- certificates --------------------------------------------------------------------------------


def certificate_error(
    verify_code: int,
    target: Target,
    *,
    now: datetime,
    peer: x509.Certificate | None,
    trusted: Sequence[x509.Certificate],
) -> str:
    """crypto/x509's error for a certificate OpenSSL refused (`verify_code`), checked in Go's order."""
    if peer is not None:
        expired = "x509: certificate has expired or is not yet valid: current time"
        if now > peer.not_valid_after_utc:
            return f"{expired} {_rfc3339(now)} is after {_rfc3339(peer.not_valid_after_utc)}"
        if now < peer.not_valid_before_utc:
            return f"{expired} {_rfc3339(now)} is before {_rfc3339(peer.not_valid_before_utc)}"
        mismatch = hostname_error(peer, target.server_name)
        if mismatch is not None:
            return mismatch
    elif verify_code in (9, 10):  # X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED
        return "x509: certificate has expired or is not yet valid"
    return unknown_authority(peer, trusted)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return names.get_values_for_type(x509.DNSName), [
        str(ip) for ip in names.get_values_for_type(x509.IPAddress)
    ]


def _matches_name(pattern: str, host: str) -> bool:
    """Go's `matchHostnames`: case-insensitive, a wildcard only as the whole leftmost label."""
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern == host:
        return True
    pattern_labels, host_labels = pattern.split("."), host.split(".")
    return (
        len(pattern_labels) == len(host_labels)
        and pattern_labels[0] == "*"
        and pattern_labels[1:] == host_labels[1:]
        and len(host_labels) > 1
    )


def hostname_error(cert: x509.Certificate, host: str) -> str | None:
    """Go's `x509.HostnameError` text when `cert` is not valid for `host`, else None."""
    dns_names, ips = _sans(cert)
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        ip = None
    if ip is not None:
        if str(ip) in ips:
            return None
        if not ips:
            return f"x509: cannot validate certificate for {host} because it doesn't contain any IP SANs"
        valid = ", ".join(ips)
    else:
        if any(_matches_name(name, host) for name in dns_names):
            return None
        valid = ", ".join(dns_names)
    if not valid:
        return f"x509: certificate is not valid for any names, but wanted to match {host}"
    return f"x509: certificate is valid for {valid}, not {host}"


def _signature_error(cert: x509.Certificate, candidate: x509.Certificate) -> str | None:
    """Go's `CheckSignatureFrom` error for a candidate issuer whose key did not sign `cert`."""
    try:
        cert.verify_directly_issued_by(candidate)
    except InvalidSignature:
        key = candidate.public_key()
        if isinstance(key, rsa.RSAPublicKey):
            return "crypto/rsa: verification error"
        if isinstance(key, ec.EllipticCurvePublicKey):
            return "x509: ECDSA verification failure"
        if isinstance(key, ed25519.Ed25519PublicKey):
            return "x509: Ed25519 verification failure"
        return "x509: invalid signature"
    except (ValueError, TypeError):
        return None
    return None


def _certificate_name(cert: x509.Certificate) -> str:
    for oid in (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME):
        values = cert.subject.get_attributes_for_oid(oid)
        if values and values[0].value:
            return str(values[0].value)
    return f"serial:{cert.serial_number}"


def unknown_authority(peer: x509.Certificate | None, trusted: Sequence[x509.Certificate]) -> str:
    """`x509.UnknownAuthorityError`, with Go's hint when a trusted CA of the issuer's name did not sign."""
    if peer is not None:
        for candidate in trusted:
            if candidate.subject != peer.issuer:
                continue
            hint = _signature_error(peer, candidate)
            if hint is not None:
                return (
                    f'{UNKNOWN_AUTHORITY} (possibly because of "{hint}" while trying to verify '
                    f'candidate authority certificate "{_certificate_name(candidate)}")'
                )
    return UNKNOWN_AUTHORITY
