"""Client of a running emulator's cloud control API (`/emulator/v1/...`), found through a kubeconfig.

Used by `shipshape emulator interrupt|shortage`. (The cloud's event queue is SQS, signed: see
`http.sqs_route`.) Every failure
becomes a `ControlError` whose message says what to do (no emulator running, unknown pool, bad
input, ...).
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from shipshape.emulator.cloud.http import CONTROL_PREFIX


class ControlError(Exception):
    """A control request that could not be done, with a message for people."""


@dataclass(frozen=True, slots=True)
class Target:
    server: str
    token: str | None
    verify: ssl.SSLContext | bool


def default_kubeconfig() -> Path:
    """$KUBECONFIG (first entry) or ~/.kube/config, as kubectl picks it."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"


def _named(entries: Any, name: str, what: str, path: Path) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(what)
            if isinstance(body, dict):
                return body
    raise ControlError(f"{path}: no {what} named {name!r}")


def load_target(path: Path, context: str | None = None) -> Target:
    """Server URL, bearer token and TLS trust from a kubeconfig's (current) context."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ControlError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ControlError(f"kubeconfig {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ControlError(f"kubeconfig {path} is not a kubeconfig (expected a mapping)")
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ControlError(f"kubeconfig {path} has no current-context")
    ctx = _named(doc.get("contexts"), ctx_name, "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user", "")), "user", path) if ctx.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ControlError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server URL")
    verify: ssl.SSLContext | bool = True
    if cluster.get("insecure-skip-tls-verify"):
        verify = False
    elif cluster.get("certificate-authority-data"):
        try:
            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            verify = ssl.create_default_context(cadata=pem)
        except (ValueError, ssl.SSLError) as exc:
            raise ControlError(f"kubeconfig {path}: certificate-authority-data is not a CA: {exc}") from None
    elif cluster.get("certificate-authority"):
        ca_path = Path(cluster["certificate-authority"])
        if not ca_path.is_absolute():
            ca_path = path.parent / ca_path
        try:
            verify = ssl.create_default_context(cafile=str(ca_path))
        except (OSError, ssl.SSLError) as exc:
            raise ControlError(f"kubeconfig {path}: cannot load CA file {ca_path}: {exc}") from None
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = Path(user["tokenFile"]).read_text().strip()
        except OSError as exc:
            raise ControlError(f"kubeconfig {path}: cannot read tokenFile: {exc.strerror}") from None
    return Target(server=server.rstrip("/"), token=token or None, verify=verify)


class ControlClient:
    """Calls to `/emulator/v1/...` over an httpx client (a real one, or a test client)."""

    def __init__(self, http: httpx.Client, server: str = "") -> None:
        self.http = http
        self.server = server or str(http.base_url)

    @classmethod
    def connect(cls, target: Target, timeout: float = 10.0) -> ControlClient:
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        http = httpx.Client(base_url=target.server, headers=headers, verify=target.verify, timeout=timeout)
        return cls(http, target.server)

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.http.request(method, f"{CONTROL_PREFIX}/{path}", json=body)
        except httpx.ConnectError:
            raise ControlError(
                f"no emulator answers at {self.server}: start one with `shipshape emulator up` "
                "or pass the kubeconfig it wrote with --kubeconfig"
            ) from None
        except httpx.HTTPError as exc:
            raise ControlError(f"request to {self.server} failed: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            message = data.get("message") if isinstance(data, dict) else None
            if response.status_code == 404 and not message:
                message = f"{self.server} does not serve {CONTROL_PREFIX}/{path}: is it a Shipshape emulator?"
            if response.status_code == 401:
                message = "the emulator refused the token from the kubeconfig (401 Unauthorized)"
            raise ControlError(message or f"{method} {path} answered {response.status_code}")
        if not isinstance(data, dict):
            raise ControlError(f"{method} {path} answered something that is not a JSON object")
        return data

    def interrupt(
        self,
        *,
        node: str | None = None,
        pool: str | None = None,
        zone: str | None = None,
        notice: float = 120.0,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"notice": notice}
        for key, value in (("node", node), ("pool", pool), ("zone", zone)):
            if value:
                body[key] = value
        return self._call("POST", "interrupt", body)

    def shortage(self, *, pool: str, seconds: float) -> dict[str, Any]:
        return self._call("POST", "shortage", {"pool": pool, "for": seconds})

    def cost(self) -> dict[str, Any]:
        return self._call("GET", "cost")

    def pools(self) -> dict[str, Any]:
        return self._call("GET", "pools")
