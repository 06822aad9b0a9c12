"""How the API process serves: HTTPS from its own certificate (`--ssl-certfile`/`--ssl-keyfile`, for
the single-machine mode), and settings that are refused before anything starts."""

from __future__ import annotations

import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from shipshape.backend.queue import QueueError, open_queue
from shipshape.kube import certs
from tests.integration.backend.processes import COMMAND, GRACEFUL, admin, start_backend

pytestmark = pytest.mark.integration


def test_https_with_its_own_certificate(tmp_path: Path) -> None:
    bundle = certs.generate_certificates(["localhost"], ["127.0.0.1"], now=time.time())
    ca, cert, key = certs.write_bundle(bundle, tmp_path / "tls")
    db = f"sqlite:///{tmp_path / 'backend.db'}"
    org = admin(tmp_path, "create-org", "acme", "--db", db)
    api = start_backend(
        "api", tmp_path, "--db", db, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), ca=ca
    )
    try:
        assert api.url is not None and api.url.startswith("https://")
        listed = httpx.get(
            f"{api.url}/api/v1/clusters",
            headers={"Authorization": f"Bearer {org['api_key']}"},
            verify=ssl.create_default_context(cafile=ca),
        )
        assert listed.status_code == 200
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served
            httpx.get(api.url.replace("https://", "http://") + "/healthz", timeout=2)
    finally:
        assert api.stop() in GRACEFUL


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*COMMAND, "backend", "--ssl-certfile", str(tmp_path / "missing.crt")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "ssl_certfile and ssl_keyfile go together" in done.stderr and "Traceback" not in done.stderr


async def test_queue_urls_are_checked_before_connecting() -> None:
    with pytest.raises(QueueError, match="replicas"):
        await open_queue("nats://127.0.0.1:1?stream=S&replicas=7")
    with pytest.raises(QueueError, match=r"kafka://u:\*\*\*@h:1"):
        await open_queue("kafka://u:secret@h:1")  # the password is not repeated
