"""Failed webhook calls described as Go's net/http, crypto/tls and crypto/x509 describe them."""

from __future__ import annotations

import socket
import ssl
import time
from datetime import UTC, datetime

import httpx
from cryptography import x509

from shipshape.emulator.admission import goerrors
from shipshape.kube import certs

TARGET = goerrors.Target("127.0.0.1", 8443, "hooks.webhooks.svc")
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def _raised(outer: BaseException, *inner: BaseException) -> BaseException:
    """`outer` raised from the chain `inner` (outermost first), as httpx/anyio chain them."""
    current = outer
    for cause in inner:
        current.__cause__ = cause
        current = cause
    return outer


def _serving(dns: list[str], ips: list[str], *, issued: float) -> tuple[x509.Certificate, x509.Certificate]:
    bundle = certs.generate_certificates(dns, ips, now=issued, validity_days=1)
    return x509.load_pem_x509_certificate(bundle.cert_pem), x509.load_pem_x509_certificate(bundle.ca_pem)


def test_refused_dial_names_the_address() -> None:
    refused = _raised(
        httpx.ConnectError("All connection attempts failed"),
        OSError("All connection attempts failed"),
        ConnectionRefusedError(111, "Connect call failed"),
    )
    assert (
        goerrors.describe(refused, TARGET, now=NOW) == "dial tcp 127.0.0.1:8443: connect: connection refused"
    )
    v6 = goerrors.Target("::1", 443, "::1")
    assert goerrors.describe(refused, v6, now=NOW) == "dial tcp [::1]:443: connect: connection refused"


def test_timeouts_lookups_and_hangups() -> None:
    assert goerrors.describe(httpx.ReadTimeout("timed out"), TARGET, now=NOW) == "context deadline exceeded"
    lookup = _raised(httpx.ConnectError("no"), socket.gaierror(-2, "Name or service not known"))
    target = goerrors.Target("hooks.example", 443, "hooks.example")
    assert goerrors.describe(lookup, target, now=NOW) == "dial tcp: lookup hooks.example: no such host"
    hangup = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    assert goerrors.describe(hangup, TARGET, now=NOW) == "EOF"
    plain = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    plain.reason = "WRONG_VERSION_NUMBER"
    assert (
        goerrors.describe(_raised(httpx.ConnectError("x"), plain), TARGET, now=NOW)
        == "http: server gave HTTP response to HTTPS client"
    )


def _verify_error(code: int) -> BaseException:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_code = code
    return _raised(httpx.ConnectError("x"), error)


def test_certificate_checked_in_go_order() -> None:
    issued = NOW.timestamp()
    leaf, ca = _serving(["hooks.webhooks.svc"], ["127.0.0.1"], issued=issued)
    _, other_ca = _serving(["other.svc"], [], issued=issued)
    refused = _verify_error(20)
    prefix = "tls: failed to verify certificate: "
    # Another CA of the same name: Go names the candidate whose signature did not verify.
    assert goerrors.describe(refused, TARGET, now=NOW, peer=leaf, trusted=[other_ca]) == (
        prefix + "x509: certificate signed by unknown authority (possibly because of "
        '"x509: ECDSA verification failure" while trying to verify candidate authority certificate '
        '"shipshape-webhook-ca")'
    )
    assert goerrors.describe(refused, TARGET, now=NOW, peer=None) == (
        prefix + "x509: certificate signed by unknown authority"
    )
    # The name is checked before the chain, whatever OpenSSL reported first.
    elsewhere = goerrors.Target("127.0.0.1", 8443, "hooks.default.svc")
    assert goerrors.describe(refused, elsewhere, now=NOW, peer=leaf, trusted=[ca]) == (
        prefix + "x509: certificate is valid for hooks.webhooks.svc, not hooks.default.svc"
    )
    # The validity period is checked before the name.
    later = datetime.fromtimestamp(issued + 3 * 86400, UTC)
    assert goerrors.describe(_verify_error(10), elsewhere, now=later, peer=leaf) == (
        prefix + "x509: certificate has expired or is not yet valid: current time "
        f"{later:%Y-%m-%dT%H:%M:%SZ} is after {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    )


def test_hostname_errors_read_as_go_prints_them() -> None:
    now = time.time()
    leaf, _ = _serving(["*.webhooks.svc", "hooks.example"], ["10.0.0.1"], issued=now)
    assert goerrors.hostname_error(leaf, "a.webhooks.svc") is None
    assert goerrors.hostname_error(leaf, "HOOKS.example.") is None
    assert goerrors.hostname_error(leaf, "a.b.webhooks.svc") == (
        "x509: certificate is valid for *.webhooks.svc, hooks.example, not a.b.webhooks.svc"
    )
    assert (
        goerrors.hostname_error(leaf, "10.0.0.2") == "x509: certificate is valid for 10.0.0.1, not 10.0.0.2"
    )
    names_only, _ = _serving(["hooks.example"], [], issued=now)
    assert goerrors.hostname_error(names_only, "10.0.0.2") == (
        "x509: cannot validate certificate for 10.0.0.2 because it doesn't contain any IP SANs"
    )
