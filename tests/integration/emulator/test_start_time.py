"""`emulator up --start`: a fast clock that begins in the past keeps kubectl's ages valid."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shipshape.kube.clock import parse_time

from .served_cluster import Kubectl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

SCENARIO = """
name: lab
pools:
  - name: spot-a
    instanceType: m5.large
    zone: us-east-1a
    capacityType: spot
    cpu: "2"
    memory: 8Gi
"""


def _age_column(kubectl: Kubectl, *args: str) -> str:
    return str(kubectl("get", *args, "--no-headers").stdout.split()[-1])


def test_up_with_a_start_in_the_past_keeps_ages_valid(tmp_path: Path) -> None:
    scenario = tmp_path / "lab.yaml"
    scenario.write_text(SCENARIO)
    kubeconfig = tmp_path / "lab.kubeconfig"
    shipshape = str(Path(sys.executable).parent / "shipshape")
    command = [shipshape, "emulator", "up", "--scenario", str(scenario), "--port", "0"]
    command += ["--kubeconfig", str(kubeconfig), "--speed", "10", "--start", "1h"]
    began = time.time()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            assert proc.stdout.readline().strip() == f"ready {kubeconfig}"
            kubectl = Kubectl(kubeconfig, tmp_path / "cache")
            created = kubectl(
                "get", "namespace", "default", "-o", "jsonpath={.metadata.creationTimestamp}"
            ).stdout
            # Emulated time began an hour back and has run 10x since: still well behind this clock.
            elapsed = time.time() - began
            assert began - 3600 - 1 <= parse_time(created) <= began - 3600 + 10 * elapsed + 1
            # `kubectl get` ages come from the server, on the emulated clock: the namespace is young.
            assert re.fullmatch(r"\d+s", _age_column(kubectl, "namespace", "default"))
            # `kubectl describe` computes Event ages on this machine's clock: about an hour (the gap),
            # where a clock ahead of this one would print <invalid>.
            kubectl("run", "web", "--image=nginx:1.27")
            described = ""
            for _ in range(100):
                described = kubectl("describe", "pod", "web").stdout
                if "FailedScheduling" in described:
                    break
                time.sleep(0.1)
            events = described.split("Events:", 1)[1].strip().splitlines()[2:]
            ages = [line.split()[2] for line in events]
            assert ages and all(re.fullmatch(r"(59|60)m", age) for age in ages), described
        finally:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        note = proc.stderr.read()
    assert re.search(
        r"emulated time starts at \S+Z, 1h behind this machine's clock, and catches up with it in "
        r"6m4\ds \(--speed 10\); after that kubectl shows <invalid> ages",
        note,
    ), note
