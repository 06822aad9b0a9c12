"""A throw-away certificate authority and serving certificate, and the kubeconfig that trusts them."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from shipshape.kube import certs


@dataclass(frozen=True, slots=True)
class Credentials:
    ca_path: Path
    cert_path: Path
    key_path: Path

    @property
    def ca_pem(self) -> bytes:
        return self.ca_path.read_bytes()


def generate(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")) -> Credentials:
    """Write ca.crt, server.crt and server.key valid for `hosts` into `directory`."""
    dns, ips = certs.split_hosts(hosts)
    bundle = certs.generate_certificates(
        dns, ips, now=time.time(), common_name="shipshape-emulator-apiserver"
    )
    ca, cert, key = certs.write_bundle(bundle, directory)
    return Credentials(ca, cert, key)


def kubeconfig(server: str, ca_pem: bytes, token: str, name: str, namespace: str = "default") -> str:
    """A kubeconfig with one cluster, one token user and one context, all named after `name`."""
    user = f"{name}-admin"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_kubeconfig(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
