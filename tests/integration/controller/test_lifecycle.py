"""Leave nothing behind and never fight another replica (issue 10 §2), on the served emulator with the
real kubectl: guard PDBs that expire and go with a stopping leader, the webhook configuration owned by
the leader, uninstall after a reclaim in the middle of a surge, and policy warnings for `kubectl apply`.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shipshape.cli.main import app
from shipshape.contracts.annotations import (
    GUARD_EXPIRES,
    GUARD_OWNER,
    HEADROOM_LABEL,
    PREFIX,
    RESTART_NOTE,
    SURGE_NOTE,
)
from shipshape.controller.guards import guard_name
from shipshape.controller.headroom import PRIORITY_CLASS
from shipshape.controller.loops import LoopSettings
from shipshape.controller.policy import DELETION_COST, ControllerConfig
from shipshape.emulator.resources import (
    DEPLOYMENTS,
    LEASES,
    MUTATING_WEBHOOKS,
    NODES,
    PDBS,
    PRIORITYCLASSES,
)
from shipshape.kube.clock import parse_time, rfc3339_micro
from tests.integration.emulator.served_cluster import (
    SPOT_A,
    SPOT_B,
    ServedCluster,
    ready_pods,
    serve_cluster,
)

from .harness import controller, managed_deployment
from .test_reclaim import MANIFESTS
from .test_single_replica_guard import SOLO, node_of_solo, one_ready_pod

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

Obj = dict[str, Any]
NO_HEADROOM = LoopSettings(headroom_enabled=False)


def guard(cluster: ServedCluster) -> Obj | None:
    return cluster.get(PDBS, "default", guard_name("solo"))


def pool_of(cluster: ServedCluster, node: str) -> str:
    found = cluster.get(NODES, "", node)
    assert found is not None
    return str(found["metadata"]["labels"]["emulator.shipshape.dev/pool"])


def restart_noted(cluster: ServedCluster) -> bool:
    dep = cluster.get(DEPLOYMENTS, "default", "solo")
    return dep is not None and RESTART_NOTE in (dep["metadata"].get("annotations") or {})


def drain(cluster: ServedCluster, node: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(
        "drain", node, "--ignore-daemonsets", "--timeout=30s", "--grace-period=1", ok=False, timeout=60
    )


def test_a_leader_stopped_mid_surge_leaves_no_guard_and_the_node_drains(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        with controller(cluster, tmp_path / "controller", loops=NO_HEADROOM):
            cluster.kubectl("apply", "-f", "-", stdin=SOLO)
            cluster.wait("the single replica ready", lambda: one_ready_pod(cluster, set()), 120)
            found = cluster.wait("the guard PDB", lambda: guard(cluster), 60)
            annotations = found["metadata"]["annotations"]
            assert annotations[GUARD_OWNER] == "controller-0"
            ttl = NO_HEADROOM.guard_ttl_seconds
            assert 0 < parse_time(annotations[GUARD_EXPIRES]) - cluster.now() <= ttl + 1
            node = node_of_solo(cluster)
            cloud, pool = cluster.served.cluster.services["cloud"], pool_of(cluster, node)
            # A long notice: the surge restart is under way when the controller stops.
            cluster.call(lambda: cloud.interrupt(pool=pool, notice=900.0))
            cluster.wait("the surge restart under way", lambda: restart_noted(cluster), 60)
        # A graceful stop took the guard away; nothing holds up a drain of the noticed node.
        assert guard(cluster) is None
        done = drain(cluster, node)
        assert done.returncode == 0, done.stderr


def test_an_expired_guard_is_removed_by_a_replica_that_starts(tmp_path: Path) -> None:
    short = LoopSettings(headroom_enabled=False, guard_ttl_seconds=20.0)
    with serve_cluster(tmp_path) as cluster:
        with controller(cluster, tmp_path / "a", loops=short, release_lease=False) as killed:
            cluster.kubectl("apply", "-f", "-", stdin=SOLO)
            cluster.wait("the single replica ready", lambda: one_ready_pod(cluster, set()), 120)
            cluster.wait("the guard PDB", lambda: guard(cluster), 60)
            killed.stop(release_lease=False)  # as a killed process: the guard stays behind
        found = guard(cluster)
        assert found is not None
        expires = parse_time(found["metadata"]["annotations"][GUARD_EXPIRES])
        # Someone else holds the Lease: the replica that starts now follows, and still clears the guard.
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "shipshape-controller", "namespace": "shipshape-system"},
            "spec": {
                "holderIdentity": "elsewhere",
                "leaseDurationSeconds": 3600,
                "renewTime": rfc3339_micro(cluster.now()),
            },
        }
        cluster.kubectl("replace", "--force", "-f", "-", stdin=json.dumps(lease))
        cluster.wait("the guard past its deadline", lambda: cluster.now() > expires, 60)
        with controller(cluster, tmp_path / "b", identity="controller-1", loops=short) as follower:
            assert not follower.elector.is_leader
            cluster.wait("the expired guard removed", lambda: guard(cluster) is None, 10)
            done = drain(cluster, node_of_solo(cluster))
            assert done.returncode == 0, done.stderr
            assert guard(cluster) is None  # a follower never re-creates it


def hook_urls(cluster: ServedCluster) -> list[str]:
    found = cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement")
    return [] if found is None else [h["clientConfig"].get("url", "") for h in found["webhooks"]]


def test_only_the_leader_owns_the_webhook_configuration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shipshape.controller.webhook")
    # The webhook in this process, for its decision lines to be records here (a webhook process writes
    # them to its own stderr: test_cli.py reads them there).
    with (
        serve_cluster(tmp_path) as cluster,
        controller(cluster, tmp_path / "a", identity="replica-a", webhook_process=False) as a,
    ):
        own = f"https://127.0.0.1:{a.webhook_port}/mutate"
        assert hook_urls(cluster) == [own, own]
        with controller(cluster, tmp_path / "b", identity="replica-b") as b:
            rounds, since = b.scheduler.rounds, cluster.now()
            cluster.wait(
                "the second replica running for a few seconds",
                lambda: b.scheduler.rounds >= rounds + 5 and cluster.now() > since + 10,
                30,
            )
            assert not b.elector.is_leader and b.webhook_owner.writes == 0
            assert hook_urls(cluster) == [own, own]
        assert hook_urls(cluster) == [own, own]

        # Drift (someone edits it) is repaired by the leader within one resync period.
        patch = [
            {"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://127.0.0.1:9/mutate"},
            {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"},
        ]
        cluster.kubectl(
            "patch",
            "mutatingwebhookconfiguration",
            "shipshape-placement",
            "--type=json",
            "-p",
            json.dumps(patch),
        )
        resync = a.settings.webhook_resync_seconds

        def repaired() -> bool:
            found = cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement")
            return (
                found is not None
                and hook_urls(cluster) == [own, own]
                and all(h["failurePolicy"] == "Ignore" for h in found["webhooks"])
            )

        cluster.wait("the configuration repaired", repaired, resync + 5)

        # New pods get decisions, each logged as one structured line.
        cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("fresh", 3))
        cluster.wait(
            "decisions on the new pods",
            lambda: (
                len(pods := cluster.pods(app="fresh")) == 3
                and all("spot.shipshape.dev/decision" in p["metadata"].get("annotations", {}) for p in pods)
            ),
            60,
        )
        logged = [r for r in caplog.records if r.getMessage() == "placement decision"]
        assert len(logged) >= 3
        fields = logged[-1].__dict__
        assert fields["workload"] == "default/fresh" and fields["pod"].startswith("fresh-")
        assert fields["capacity_type"] in ("spot", "on-demand") and fields["reason"]

        # An invalid policy is reported to whoever applies it (the pods' warnings never reach them).
        bad = managed_deployment("bad", 2, {"spot.shipshape.dev/spot-percentage": "150"})
        done = cluster.kubectl("apply", "-f", "-", stdin=bad)
        warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
        assert len(warnings) == 1, done.stderr
        assert "shipshape: Deployment bad: spot.shipshape.dev/spot-percentage='150'" in warnings[0]
        assert "placement left unchanged" in warnings[0]
        good = cluster.kubectl("apply", "-f", "-", stdin=managed_deployment("good", 1))
        assert "Warning:" not in good.stderr

        # The Lease changing hands re-points the configuration at the new leader at once.
        with controller(cluster, tmp_path / "c", identity="replica-c") as c:
            a.stop()
            other = f"https://127.0.0.1:{c.webhook_port}/mutate"
            cluster.wait("the new leader registered", lambda: hook_urls(cluster) == [other, other], 20)


def uninstall(cluster: ServedCluster, *args: str) -> Result:
    command = ["controller", "uninstall", "--kubeconfig", str(cluster.served.kubeconfig), *args]
    return CliRunner().invoke(app, command)


def test_uninstall_after_a_reclaim_mid_surge_leaves_nothing_that_changes_behaviour(tmp_path: Path) -> None:
    with serve_cluster(tmp_path) as cluster:
        with controller(cluster, tmp_path / "controller", loops=LoopSettings(headroom_interval_seconds=5)):
            cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
            cluster.wait(
                "every replica ready",
                lambda: all(
                    len(ready_pods(cluster.pods(app=name))) == n for name, n in (("web", 6), ("api", 4))
                ),
                180,
            )
            cluster.wait(
                "headroom placeholders", lambda: cluster.get(PRIORITYCLASSES, "", PRIORITY_CLASS), 60
            )
            (solo,) = cluster.pods(app="solo")
            pool = pool_of(cluster, solo["spec"]["nodeName"])
            # A node poller's notice taint on a node of another pool: uninstall takes it away too.
            cluster.kubectl("taint", "node", cluster.nodes_of("od-c")[0], f"{PREFIX}test=x:PreferNoSchedule")
            cloud = cluster.served.cluster.services["cloud"]
            cluster.call(lambda: cloud.interrupt(pool=pool, notice=900.0))

            def surging() -> bool:
                deps = [cluster.get(DEPLOYMENTS, "default", name) for name in ("web", "api")]
                return any(
                    d is not None
                    and '"done":false' in d["metadata"].get("annotations", {}).get(SURGE_NOTE, "")
                    for d in deps
                )

            cluster.wait("a surge in flight", surging, 60)
            # While a controller leads, uninstall refuses: the controller would put things back.
            refused = uninstall(cluster)
            assert refused.exit_code == 1
            assert "controller-0 still holds the Lease" in refused.stderr
            assert cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement") is not None
        planned = uninstall(cluster, "--dry-run")
        assert planned.exit_code == 0, planned.stderr
        assert "would delete mutatingwebhookconfiguration/shipshape-placement" in planned.stdout
        assert cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement") is not None  # dry run: unchanged
        done = uninstall(cluster)
        assert done.exit_code == 0, done.stderr
        assert "(surge in flight)" in done.stdout

        assert cluster.get(MUTATING_WEBHOOKS, "", "shipshape-placement") is None
        assert cluster.get(PRIORITYCLASSES, "", PRIORITY_CLASS) is None
        assert not [p for p in cluster.objects(PDBS) if PREFIX + "guard" in p["metadata"].get("labels", {})]
        assert not [
            d for d in cluster.objects(DEPLOYMENTS) if HEADROOM_LABEL in d["metadata"].get("labels", {})
        ]
        for node in cluster.objects(NODES):
            assert not [t for t in node["spec"].get("taints", []) if t["key"].startswith(PREFIX)]
        for name, declared in (("web", 6), ("api", 4), ("solo", 1)):
            dep = cluster.get(DEPLOYMENTS, "default", name)
            assert dep is not None and dep["spec"]["replicas"] == declared
            assert not {SURGE_NOTE, RESTART_NOTE} & set(dep["metadata"].get("annotations", {}))
            for pod in cluster.pods(app=name):
                assert DELETION_COST not in pod["metadata"].get("annotations", {})
        assert cluster.get(LEASES, "shipshape-system", "shipshape-controller") is None

        again = uninstall(cluster)
        assert again.exit_code == 0 and again.stdout.strip() == "nothing to remove", again.stdout


def test_recommend_only_mode_changes_nothing_but_annotations_and_events(tmp_path: Path) -> None:
    config = ControllerConfig(dry_run=True)
    with serve_cluster(tmp_path) as cluster:
        with controller(
            cluster, tmp_path / "c", config=config, loops=LoopSettings(headroom_interval_seconds=5)
        ) as c:
            cluster.kubectl("apply", "-f", "-", stdin=MANIFESTS)
            cluster.wait("the pods decided", lambda: len(cluster.pods(app="web")) == 6, 120)
            for pod in cluster.pods():
                decision = json.loads(pod["metadata"]["annotations"]["spot.shipshape.dev/decision"])
                assert decision["dryRun"] is True
                assert "affinity" not in pod["spec"] and "topologySpreadConstraints" not in pod["spec"]
            cluster.wait("the single replica ready", lambda: one_ready_pod(cluster, set()), 120)
            # Nothing steered the pods: both spot pools are reclaimed, whichever holds them.
            cloud = cluster.served.cluster.services["cloud"]
            cluster.call(lambda: [cloud.interrupt(pool=p, notice=900.0) for p in (SPOT_A, SPOT_B)])
            patches = {"action": "patch", "dry_run": "true"}
            cluster.wait(
                "a recommended response",
                lambda: (c.registry.get_sample_value("shipshape_actions_total", patches) or 0) > 0,
                60,
            )
            events = cluster.core.list_namespaced_event("default").items
            assert any((e.message or "").startswith("dry run, not done: ") for e in events)
        for name, declared in (("web", 6), ("api", 4), ("solo", 1)):
            dep = cluster.get(DEPLOYMENTS, "default", name)
            assert dep is not None and dep["spec"]["replicas"] == declared
            assert not {SURGE_NOTE, RESTART_NOTE} & set(dep["metadata"].get("annotations", {}))
            assert "kubectl.kubernetes.io/restartedAt" not in str(dep["spec"]["template"])
        assert cluster.get(PRIORITYCLASSES, "", PRIORITY_CLASS) is None
        assert not [p for p in cluster.objects(PDBS) if PREFIX + "guard" in p["metadata"].get("labels", {})]
        for pod in cluster.pods():
            assert DELETION_COST not in pod["metadata"].get("annotations", {})
        for node_obj in cluster.objects(NODES):
            assert not [t for t in node_obj["spec"].get("taints", []) if t["key"].startswith(PREFIX)]
