"""`shipshape analyze --snapshot` on a cluster with GPUs: the GPU section of `--json`, where an idle
GPU Deployment's scale-down advice carries the `SetReplicas` instruction the agent executes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from shipshape.cli.main import app

HOUR = 3600.0


def _snapshot(utilization: bool) -> dict[str, Any]:
    node = {
        "metadata": {
            "name": "gpu-1",
            "labels": {
                "node.kubernetes.io/instance-type": "g5.12xlarge",
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/capacity": "on-demand",
            },
        },
        "status": {"allocatable": {"cpu": "48", "memory": "192Gi", "nvidia.com/gpu": "4"}},
    }
    pods = [
        {
            "metadata": {
                "name": f"infer-5f6d7-{i}",
                "namespace": "ml",
                "labels": {"pod-template-hash": "5f6d7"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "infer-5f6d7", "controller": True}],
            },
            "spec": {
                "nodeName": "gpu-1",
                "containers": [
                    {
                        "name": "server",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2"}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
        for i in range(2)
    ]
    deployment = {
        "metadata": {"name": "infer", "namespace": "ml", "generation": 4, "resourceVersion": "812"},
        "spec": {"replicas": 2},
    }
    body: dict[str, Any] = {
        "nodes": [node],
        "pods": pods,
        "deployments": [deployment],
        "usage": {"start": 0, "step": 300, "steps": 1, "containers": [], "nodes": []},
    }
    if utilization:
        times = [60.0 * m for m in range(60)]
        body["gpuUtilization"] = {
            "windowStart": 0.0,
            "windowEnd": HOUR,
            "stepSeconds": 60,
            "series": [
                {
                    "node": "gpu-1",
                    "gpu": str(i),
                    "pod": f"ml/infer-5f6d7-{i}",
                    "timestamps": times,
                    "values": [0.0] * 60,
                }
                for i in range(2)
            ],
        }
    return body


def _run(path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["analyze", "--snapshot", str(path), *args], env={"COLUMNS": "240"})


def test_idle_gpu_deployment_gets_a_set_replicas_instruction(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(_snapshot(utilization=True)))
    result = _run(path, "--json")
    assert result.exit_code == 0, result.output
    gpu = json.loads(result.stdout)["gpu"]
    assert (gpu["gpus"], gpu["allocated"], gpu["idleGpus"]) == (4, 2.0, 2.0)
    (scale,) = [a for a in gpu["advice"] if a["kind"] == "scale-down"]
    assert scale["target"] == "deployment/ml/infer"
    assert scale["instruction"] == "kubectl scale deployment/infer -n ml --replicas=0"
    assert scale["apply"] == {
        "type": "set-replicas",
        "target": {"kind": "Deployment", "namespace": "ml", "name": "infer"},
        "precondition": {"generation": 4, "resource_version": None},
        "replicas": 0,
    }
    table = _run(path)
    assert table.exit_code == 0, table.output
    assert "GPU advice" in table.output and "the agent can apply it" in table.output


def test_without_utilisation_the_gpu_section_says_what_it_lacked(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(_snapshot(utilization=False)))
    result = _run(path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert not [a for a in report["gpu"]["advice"] if a["kind"] == "scale-down"]
    assert any("no GPU utilisation (dcgm-exporter) series" in line for line in report["lacking"])
    broken = _snapshot(utilization=True)
    broken["gpuUtilization"]["series"][0]["metric"] = "GPU_TEMP"
    path.write_text(json.dumps(broken))
    bad = _run(path, "--json")
    assert bad.exit_code == 2 and "metric must be one of" in bad.output
