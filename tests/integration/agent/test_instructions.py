"""From a finding to a change in the cluster: the agent pushes, the workers recommend spot for an
on-demand Deployment, a user approves through the API, the agent applies it in the emulator and
reports back; and the agent refuses an instruction whose target drifted. `SetReplicas` (the GPU
scale-down advice's instruction) scales a Deployment in the emulator with the same drift, dry-run and
already-applied handling, and is refused for a workload an HPA scales."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from shipshape.agent.instructions import Executor
from shipshape.contracts.instructions import (
    InstructionEnvelope,
    Precondition,
    SetReplicas,
    SetSpotPolicy,
    WorkloadRef,
)
from shipshape.emulator.resources import DEPLOYMENTS
from tests.integration.agent.backend_process import (
    backend_process,
    bootstrap,
    free_port,
    on_demand_only_unless_tolerated,
    running_agent,
)
from tests.integration.deploy.test_agent_manifests import Answer, Recorder
from tests.integration.emulator.served_cluster import ServedCluster, serve_cluster
from tests.manifests import deployment


def _annotations(cluster: ServedCluster, name: str) -> dict[str, str]:
    dep = cluster.get(DEPLOYMENTS, "default", name)
    assert dep is not None
    return dict(dep["metadata"].get("annotations") or {})


@pytest.mark.integration
def test_a_recommendation_approved_is_applied_by_the_agent_and_reported(tmp_path: Path) -> None:
    import yaml

    db = f"sqlite:///{tmp_path / 'backend.db'}"
    key, cluster_id, token = bootstrap(db)
    port = free_port()
    user = {"Authorization": f"Bearer {key}"}
    with serve_cluster(tmp_path, on_demand_only_unless_tolerated()) as cluster:
        web = deployment("web", 3, cpu="500m", memory="512Mi", grace_seconds=2)
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(web))
        with (
            backend_process(port, db, tmp_path, analysis_seconds="0") as url,
            running_agent(cluster, url, token, tmp_path / "spool"),
        ):

            def recommended() -> list[dict[str, Any]]:
                found = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                return [
                    r
                    for r in found
                    if r["kind"] == "spot-adoption" and r["recommendation"]["target"]["name"] == "web"
                ]

            (rec,) = cluster.wait("a spot-adoption recommendation for web", recommended, 120)
            assert rec["status"] == "open" and rec["monthly_savings_usd"] > 0
            assert rec["recommendation"]["instruction"]["annotations"]["spot.shipshape.dev/enabled"] == "true"

            approved = httpx.post(f"{url}/api/v1/recommendations/{rec['id']}/approve", headers=user)
            assert approved.status_code == 200, approved.text
            again = httpx.post(f"{url}/api/v1/recommendations/{rec['id']}/approve", headers=user)
            assert again.status_code == 409

            cluster.wait(
                "web annotated by the agent",
                lambda: _annotations(cluster, "web").get("spot.shipshape.dev/enabled") == "true",
                60,
            )

            def applied() -> dict[str, Any] | None:
                rows = httpx.get(f"{url}/api/v1/clusters/{cluster_id}/recommendations", headers=user).json()
                row = next(r for r in rows if r["id"] == rec["id"])
                return row if row["status"] == "applied" else None

            done = cluster.wait("the recommendation reported applied", applied, 60)
            assert "applied set-spot-policy to Deployment/default/web" in (done["detail"] or "")


@pytest.mark.integration
def test_the_agent_refuses_an_instruction_whose_target_drifted(tmp_path: Path) -> None:
    import yaml

    with serve_cluster(tmp_path) as cluster:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump(deployment("api", 2, cpu="50m", memory="64Mi", grace_seconds=2)),
        )
        before = cluster.get(DEPLOYMENTS, "default", "api")
        assert before is not None
        generation = int(before["metadata"]["generation"])
        cluster.kubectl("scale", "deployment/api", "--replicas=4")  # a new generation
        envelope = InstructionEnvelope(
            id="i1",
            recommendation_id="r1",
            instruction=SetSpotPolicy(
                target=WorkloadRef(kind="Deployment", namespace="default", name="api"),
                precondition=Precondition(generation=generation),
                annotations={"spot.shipshape.dev/enabled": "true"},
            ),
        )
        outcome = Executor(cluster.api_client).execute(envelope)
        assert outcome.status == "refused" and "drifted since the recommendation" in outcome.detail
        assert "spot.shipshape.dev/enabled" not in _annotations(cluster, "api")

        fresh = cluster.get(DEPLOYMENTS, "default", "api")
        assert fresh is not None
        current = envelope.model_copy(
            update={
                "instruction": envelope.instruction.model_copy(
                    update={"precondition": Precondition(generation=int(fresh["metadata"]["generation"]))}
                )
            }
        )
        dry = Executor(cluster.api_client, dry_run=True).execute(current)
        assert dry.status == "dry-run"
        assert "spot.shipshape.dev/enabled" not in _annotations(cluster, "api")
        done = Executor(cluster.api_client).execute(current)
        assert done.status == "applied"
        assert _annotations(cluster, "api")["spot.shipshape.dev/enabled"] == "true"
        # A repeated delivery (the report was lost) finds it in place and changes nothing.
        assert Executor(cluster.api_client).execute(current).detail.endswith("already as instructed")
        gone = envelope.model_copy(
            update={
                "instruction": SetSpotPolicy(
                    target=WorkloadRef(kind="Deployment", namespace="default", name="nope"),
                    precondition=Precondition(generation=1),
                    annotations={"spot.shipshape.dev/enabled": "true"},
                )
            }
        )
        assert Executor(cluster.api_client).execute(gone).status == "refused"


class _ChangesAfterRead(Executor):
    """An executor whose target changes right after its first read, so that its patch meets a 409: its
    metadata (as a controller's status or annotation writes do: no new generation) or its spec
    (someone else's edit: a new generation)."""

    def __init__(self, cluster: ServedCluster, change: str) -> None:
        super().__init__(cluster.api_client)
        self.cluster = cluster
        self.change = change
        self.reads = 0

    def _read(self, target: WorkloadRef) -> dict[str, Any]:
        live = super()._read(target)
        self.reads += 1
        if self.reads == 1:
            if self.change == "metadata":
                self.cluster.kubectl("annotate", "deployment/api", "example.com/touched=yes", "--overwrite")
            else:
                self.cluster.kubectl("scale", "deployment/api", "--replicas=3")
        return live


@pytest.mark.integration
@pytest.mark.parametrize("change", ["metadata", "spec"])
def test_a_conflict_is_read_again_a_spec_change_is_refused(tmp_path: Path, change: str) -> None:
    import yaml

    with serve_cluster(tmp_path) as cluster:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump(deployment("api", 2, cpu="50m", memory="64Mi", grace_seconds=2)),
        )
        before = cluster.get(DEPLOYMENTS, "default", "api")
        assert before is not None
        envelope = InstructionEnvelope(
            id="i1",
            recommendation_id="r1",
            instruction=SetSpotPolicy(
                target=WorkloadRef(kind="Deployment", namespace="default", name="api"),
                precondition=Precondition(generation=int(before["metadata"]["generation"])),
                annotations={"spot.shipshape.dev/enabled": "true"},
            ),
        )
        executor = _ChangesAfterRead(cluster, change)
        outcome = executor.execute(envelope)
        assert executor.reads == 2  # the 409 made it read again
        if change == "metadata":
            # A change that is no new generation (metadata, status) is not drift: applied on the re-read.
            assert outcome.status == "applied", outcome
            assert _annotations(cluster, "api")["spot.shipshape.dev/enabled"] == "true"
        else:
            assert outcome.status == "refused" and "drifted since the recommendation" in outcome.detail
            assert "spot.shipshape.dev/enabled" not in _annotations(cluster, "api")


def _scale(name: str, replicas: int, generation: int) -> InstructionEnvelope:
    return InstructionEnvelope(
        id="s1",
        recommendation_id="r1",
        instruction=SetReplicas(
            target=WorkloadRef(kind="Deployment", namespace="default", name=name),
            precondition=Precondition(generation=generation),
            replicas=replicas,
        ),
    )


@pytest.mark.integration
def test_set_replicas_scales_a_deployment_and_is_refused_when_it_drifted(tmp_path: Path) -> None:
    import yaml

    with serve_cluster(tmp_path) as cluster:
        infer = deployment("infer", 3, cpu="50m", memory="64Mi", grace_seconds=1)
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(infer))

        def replicas() -> int:
            live = cluster.get(DEPLOYMENTS, "default", "infer")
            assert live is not None
            return int(live["spec"]["replicas"])

        def running() -> int:
            return sum(
                1
                for p in cluster.pods("default", app="infer")
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            )

        cluster.wait("three infer pods running", lambda: running() == 3, 60)
        live = cluster.get(DEPLOYMENTS, "default", "infer")
        assert live is not None
        made_at = int(live["metadata"]["generation"])
        cluster.kubectl("annotate", "deployment/infer", "team=ml")  # metadata only: the generation stays
        cluster.kubectl("scale", "deployment/infer", "--replicas=4")  # a new generation: drifted
        drifted = Executor(cluster.api_client).execute(_scale("infer", 1, made_at))
        assert drifted.status == "refused" and "drifted since the recommendation" in drifted.detail
        assert replicas() == 4

        fresh = cluster.get(DEPLOYMENTS, "default", "infer")
        assert fresh is not None
        current = _scale("infer", 1, int(fresh["metadata"]["generation"]))
        dry = Executor(cluster.api_client, dry_run=True).execute(current)
        assert dry.status == "dry-run" and replicas() == 4
        done = Executor(cluster.api_client).execute(current)
        assert done.status == "applied" and done.detail == "applied set-replicas to Deployment/default/infer"
        assert replicas() == 1
        cluster.wait(
            "one infer pod left",
            lambda: running() == 1 and len(cluster.pods("default", app="infer")) == 1,
            60,
        )
        # A repeated delivery finds it in place (whatever the generation now) and changes nothing.
        again = Executor(cluster.api_client).execute(current)
        assert again.status == "applied" and again.detail.endswith("already as instructed")
        gone = Executor(cluster.api_client).execute(_scale("nope", 0, 1))
        assert gone.status == "refused" and "no longer exists" in gone.detail


def test_set_replicas_is_refused_for_a_workload_an_hpa_scales() -> None:
    live = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": "default", "generation": 2, "resourceVersion": "7"},
        "spec": {"replicas": 3},
    }
    hpa = {
        "metadata": {"name": "infer-cpu", "namespace": "default"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"}},
    }
    recorder = Recorder()
    recorder.answers[("GET", "deployments")] = Answer(200, live)
    recorder.answers[("GET", "horizontalpodautoscalers")] = Answer(200, {"items": [hpa]})
    outcome = Executor(recorder).execute(_scale("infer", 1, 2))
    assert outcome.status == "refused" and "HorizontalPodAutoscaler infer-cpu" in outcome.detail
    assert [verb for verb, *_ in recorder.calls] == ["get", "list"]  # read, nothing written
    # An HPA of another workload does not stop it.
    recorder = Recorder()
    recorder.answers[("GET", "deployments")] = Answer(200, live)
    other = {**hpa, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}}}
    recorder.answers[("GET", "horizontalpodautoscalers")] = Answer(200, {"items": [other]})
    assert Executor(recorder).execute(_scale("infer", 1, 2)).status == "applied"
    assert recorder.calls[-1][:3] == ("patch", "apps", "deployments")
