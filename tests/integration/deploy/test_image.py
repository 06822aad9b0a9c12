"""The container image: the Dockerfile's shape always; a real build only where a builder answers
(`docker info` succeeds), else skipped with the reason."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid

import pytest

from .chart import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def stages() -> list[list[str]]:
    """The Dockerfile's instructions per stage (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_dockerfile_is_multi_stage_non_root_and_tool_free() -> None:
    build, final = stages()
    assert build[0].endswith(" AS build") and "pip wheel" in " ".join(build)
    assert final[0] == "FROM ${PYTHON_IMAGE}"
    joined = "\n".join(final)
    # Only the virtual environment comes over: no wheels, no source, no build tools, no dev extras.
    assert re.findall(r"^COPY .*", joined, flags=re.M) == ["COPY --from=build /opt/shipshape /opt/shipshape"]
    assert "RUN" not in [line.split()[0] for line in final]
    assert "[dev]" not in DOCKERFILE.read_text()
    assert "USER 65532:65532" in final and 'ENTRYPOINT ["shipshape"]' in final
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[1] == "*" and "!src/" in ignore and "!pyproject.toml" in ignore


def builder() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30)
    return docker if probe.returncode == 0 else None


DOCKER = builder()


@pytest.mark.integration
@pytest.mark.timeout(1200)
@pytest.mark.skipif(DOCKER is None, reason="no image builder: `docker info` fails or docker is not installed")
def test_image_builds_runs_as_non_root_on_a_read_only_root() -> None:
    assert DOCKER is not None
    tag = f"shipshape-test:{uuid.uuid4().hex[:12]}"
    built = subprocess.run(
        [DOCKER, "build", "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=1100
    )
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        inspected = json.loads(
            subprocess.run(
                [DOCKER, "image", "inspect", tag], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        assert inspected["Config"]["User"] == "65532:65532"
        assert inspected["Config"]["Entrypoint"] == ["shipshape"]
        size_mb = inspected["Size"] / 1e6
        print(f"image {tag}: {size_mb:.0f} MB")
        assert size_mb < 600
        ran = subprocess.run(
            [DOCKER, "run", "--rm", "--read-only", "--tmpfs", "/tmp", tag, "controller", "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0 and "--webhook-service" in ran.stdout, ran.stderr
        tools = subprocess.run(
            [DOCKER, "run", "--rm", "--entrypoint", "sh", tag, "-c", "command -v gcc cc c++ make; id -u"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert tools.stdout.split() == ["65532"], tools.stdout
    finally:
        subprocess.run([DOCKER, "image", "rm", "-f", tag], capture_output=True, timeout=120)
