"""The Deployment controller: ReplicaSets per template, rolling/recreate rollouts, revisions, status."""

from __future__ import annotations

import functools
import logging
from typing import Any

from shipshape.emulator.controllers import deploymentutil as du
from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.controllers.claims import OrphanIndex, claim
from shipshape.emulator.controllers.replicaset import selector_of
from shipshape.emulator.resources import DEPLOYMENTS, PODS, REPLICASETS
from shipshape.emulator.store import DELETED, Obj, WatchEvent, clone
from shipshape.kube import errors
from shipshape.kube.clock import parse_time, rfc3339

log = logging.getLogger(__name__)

Key = tuple[str, str]


class DeploymentController(Controller):
    name = "deployment-controller"
    watches = (DEPLOYMENTS, REPLICASETS, PODS)

    def __init__(self) -> None:
        super().__init__()
        self._orphans = OrphanIndex(REPLICASETS)
        # Per template owner uid: the template object last seen and its `du.template_key`. Stored
        # objects are replaced, never changed, so the same template object has the same key; every
        # sync compares the Deployment's template with each of its ReplicaSets'.
        self._template_keys: dict[str, tuple[Obj, Any]] = {}

    # ---- events -> keys ---------------------------------------------------------------------
    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        self._orphans.observe(event)
        if event.type == DELETED and event.resource is not PODS:
            self._template_keys.pop(str(podutil.meta(obj).get("uid", "")), None)
        if event.resource is DEPLOYMENTS:
            return [(ns, name)]
        if event.resource is REPLICASETS:
            ref = podutil.controller_ref(obj)
            if ref is not None:
                return [(ns, str(ref["name"]))] if ref.get("kind") == "Deployment" else []
            if event.type == DELETED:
                return []
            labels = podutil.meta(obj).get("labels")
            return [
                podutil.key_of(d)
                for d in self.store.list(DEPLOYMENTS, ns)
                if (sel := selector_of(d)) is not None and not sel.empty and sel.matches(labels)
            ]
        # Pods matter only to Recreate, which waits for every old pod to be gone.
        if event.type != DELETED:
            return []
        rs_ref = podutil.controller_ref(obj)
        if rs_ref is None or rs_ref.get("kind") != "ReplicaSet":
            return []
        rs = self.store.get(REPLICASETS, ns, str(rs_ref["name"]))
        d_ref = podutil.controller_ref(rs) if rs is not None else None
        if d_ref is None or d_ref.get("kind") != "Deployment":
            return []
        d = self.store.get(DEPLOYMENTS, ns, str(d_ref["name"]))
        return [(ns, str(d_ref["name"]))] if d is not None and not du.is_rolling(d) else []

    # ---- sync -------------------------------------------------------------------------------
    def reconcile(self, key: Key) -> None:
        ns, name = key
        d = self.store.get(DEPLOYMENTS, ns, name)
        if d is None:
            return
        selector = selector_of(d)
        if selector is None or selector.empty:
            self.event(
                d,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
                type="Warning",
            )
            status = clone(d.get("status") or {})
            status["observedGeneration"] = d["metadata"].get("generation", 1)
            self.write_status(DEPLOYMENTS, d, status)
            return
        candidates = sorted(self._orphans.candidates(self.store, d), key=podutil.key_of)
        rss = claim(self.store, REPLICASETS, d, candidates, selector)
        if podutil.is_terminating(d):
            self._sync_status_only(d, rss)
            return
        d = self._check_paused_conditions(d)
        if d["spec"].get("paused"):
            self._sync(d, rss)
            return
        if self._is_scaling_event(d, rss):
            self._sync(d, rss)
            return
        if du.is_rolling(d):
            self._rollout_rolling(d, rss)
        else:
            self._rollout_recreate(d, rss)

    # ---- writes -----------------------------------------------------------------------------
    def _now_text(self) -> str:
        return rfc3339(self.now())

    def _reload(self, d: Obj) -> Obj:
        ns, name = podutil.key_of(d)
        return self.store.get(DEPLOYMENTS, ns, name) or d

    def _write_deployment_status(self, d: Obj, status: Obj) -> Obj:
        written = self.write_status(DEPLOYMENTS, d, status)
        return written if written is not None else d

    def _set_deployment_revision(self, d: Obj, revision: str) -> Obj:
        if (d["metadata"].get("annotations") or {}).get(du.REVISION) == revision:
            return d

        def change(new: Obj) -> None:
            new["metadata"].setdefault("annotations", {})[du.REVISION] = revision

        ns, name = podutil.key_of(d)
        return self.store.mutate(DEPLOYMENTS, ns, name, change) or d

    def _scale_rs(self, rs: Obj, new_scale: int, d: Obj, operation: str) -> tuple[bool, Obj]:
        """Upstream `scaleReplicaSet`: size and replica annotations in one write, an Event if resized."""
        old_scale = du.replicas(rs)
        size_changes = old_scale != new_scale
        desired, max_total = du.replicas(d), du.replicas(d) + du.max_surge(d)
        if not size_changes and not du.replicas_annotations_need_update(rs, desired, max_total):
            return False, rs

        def change(new: Obj) -> None:
            new["spec"]["replicas"] = new_scale
            du.set_replicas_annotations(new, desired, max_total)

        ns, name = podutil.key_of(rs)
        updated = self.store.mutate(REPLICASETS, ns, name, change) or rs
        if size_changes:
            self.event(
                d,
                "ScalingReplicaSet",
                f"Scaled {operation} replica set {name} from {old_scale} to {new_scale}",
            )
        return size_changes, updated

    def _scale_rs_and_record(self, rs: Obj, new_scale: int, d: Obj) -> tuple[bool, Obj]:
        if du.replicas(rs) == new_scale:
            return False, rs
        return self._scale_rs(rs, new_scale, d, "up" if du.replicas(rs) < new_scale else "down")

    # ---- ReplicaSets and revisions ----------------------------------------------------------
    def _split(self, d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        wanted = self._template_key(d)
        ordered = sorted(rss, key=du.by_creation)
        new_rs = next((rs for rs in ordered if self._template_key(rs) == wanted), None)
        olds = [rs for rs in rss if new_rs is None or rs["metadata"]["uid"] != new_rs["metadata"]["uid"]]
        return new_rs, olds

    def _template_key(self, obj: Obj) -> Any:
        """`du.template_key` of a Deployment's or ReplicaSet's template, remembered per template object."""
        template = obj["spec"].get("template") or {}
        uid = str(obj["metadata"].get("uid", ""))
        kept = self._template_keys.get(uid)
        if kept is not None and kept[0] is template:
            return kept[1]
        key = du.template_key(template)
        if uid and obj["spec"].get("template") is not None:
            self._template_keys[uid] = (template, key)
        return key

    def _get_all_rss_and_sync_revision(
        self, d: Obj, rss: list[Obj], create: bool
    ) -> tuple[Obj | None, list[Obj], Obj]:
        """(new ReplicaSet or None, old ReplicaSets, fresh Deployment) — upstream's namesake."""
        existing, olds = self._split(d, rss)
        new_revision = du.max_revision(olds) + 1
        if existing is not None:
            # Only the metadata (annotations) and the spec change: copies of those levels do.
            rs_copy = {**existing, "metadata": {**existing["metadata"]}, "spec": {**existing["spec"]}}
            if rs_copy["metadata"].get("annotations") is not None:
                rs_copy["metadata"]["annotations"] = dict(rs_copy["metadata"]["annotations"])
            annotations_updated = du.set_new_rs_annotations(d, rs_copy, new_revision, exists=True)
            min_ready = d["spec"].get("minReadySeconds", 0)
            if annotations_updated or rs_copy["spec"].get("minReadySeconds", 0) != min_ready:
                rs_copy["spec"]["minReadySeconds"] = min_ready
                rs_copy["metadata"].pop("resourceVersion", None)
                return self.store.update(REPLICASETS, rs_copy), olds, d
            d = self._set_deployment_revision(
                d, (rs_copy["metadata"].get("annotations") or {}).get(du.REVISION, "")
            )
            if du.has_progress_deadline(d) and du.get_condition(d.get("status") or {}, "Progressing") is None:
                status = clone(d.get("status") or {})
                message = f'Found new replica set "{existing["metadata"]["name"]}"'
                du.set_condition(
                    status,
                    du.new_condition("Progressing", "True", du.FOUND_NEW_RS, message, self._now_text()),
                )
                d = self._write_deployment_status(d, status)
            return existing, olds, d
        if not create:
            return None, olds, d
        return self._create_new_rs(d, olds, new_revision)

    def _create_new_rs(self, d: Obj, olds: list[Obj], new_revision: int) -> tuple[Obj | None, list[Obj], Obj]:
        ns, name = podutil.key_of(d)
        template = clone(d["spec"].get("template") or {})
        collision = (d.get("status") or {}).get("collisionCount")
        pod_hash = du.compute_hash(template, collision)
        template.setdefault("metadata", {}).setdefault("labels", {})[du.HASH_LABEL] = pod_hash
        selector = clone(d["spec"]["selector"])
        selector.setdefault("matchLabels", {})[du.HASH_LABEL] = pod_hash
        new_rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name}-{pod_hash}",
                "namespace": ns,
                "ownerReferences": [podutil.new_controller_ref(d)],
                "labels": dict(template["metadata"]["labels"]),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": d["spec"].get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }
        count = du.new_rs_new_replicas(d, [*olds, new_rs], new_rs)
        new_rs["spec"]["replicas"] = count
        du.set_new_rs_annotations(d, new_rs, new_revision, exists=False)
        try:
            created = self.store.create(REPLICASETS, new_rs)
        except errors.AlreadyExists:
            current = self.store.get(REPLICASETS, ns, new_rs["metadata"]["name"])
            if (
                current is not None
                and podutil.is_controlled_by(current, d)
                and du.equal_ignore_hash(
                    current["spec"].get("template") or {}, d["spec"].get("template") or {}
                )
            ):
                return current, olds, d
            # A hash collision: bump the count so the next sync hashes differently.
            status = clone(d.get("status") or {})
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            self._write_deployment_status(d, status)
            return None, olds, d
        except errors.ApiError as exc:
            message = f'Failed to create new replica set "{new_rs["metadata"]["name"]}": {exc.message}'
            if du.has_progress_deadline(d):
                status = clone(d.get("status") or {})
                cond = du.new_condition(
                    "Progressing", "False", du.FAILED_RS_CREATE, message, self._now_text()
                )
                du.set_condition(status, cond)
                self._write_deployment_status(d, status)
            self.event(d, du.FAILED_RS_CREATE, message, type="Warning")
            return None, olds, d
        if count > 0:
            self.event(
                d,
                "ScalingReplicaSet",
                f"Scaled up replica set {created['metadata']['name']} from 0 to {count}",
            )
        d = self._set_deployment_revision(d, str(new_revision))
        if du.has_progress_deadline(d):
            status = clone(d.get("status") or {})
            message = f'Created new replica set "{created["metadata"]["name"]}"'
            du.set_condition(
                status, du.new_condition("Progressing", "True", du.NEW_RS_CREATED, message, self._now_text())
            )
            d = self._write_deployment_status(d, status)
        return created, olds, d

    # ---- paused / scaling -------------------------------------------------------------------
    def _check_paused_conditions(self, d: Obj) -> Obj:
        if not du.has_progress_deadline(d):
            return d
        status = clone(d.get("status") or {})
        cond = du.get_condition(status, "Progressing")
        if cond is not None and cond.get("reason") == du.TIMED_OUT:
            return d
        paused_cond = cond is not None and cond.get("reason") == du.PAUSED
        now = self._now_text()
        if d["spec"].get("paused") and not paused_cond:
            du.set_condition(
                status, du.new_condition("Progressing", "Unknown", du.PAUSED, "Deployment is paused", now)
            )
        elif not d["spec"].get("paused") and paused_cond:
            du.set_condition(
                status, du.new_condition("Progressing", "Unknown", du.RESUMED, "Deployment is resumed", now)
            )
        else:
            return d
        return self._write_deployment_status(d, status)

    def _is_scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        new_rs, olds, _ = self._get_all_rss_and_sync_revision(d, rss, create=False)
        for rs in du.active([*olds, new_rs]):
            desired = du.annotation_int(rs, du.DESIRED_REPLICAS)
            if desired is not None and desired != du.replicas(d):
                return True
        return False

    def _sync(self, d: Obj, rss: list[Obj]) -> None:
        """Scale (proportionally when rolling) and clean up; used when paused or resized."""
        new_rs, olds, d = self._get_all_rss_and_sync_revision(d, rss, create=False)
        self._scale(d, new_rs, olds)
        d = self._reload(d)
        fresh = self._fresh(rss)
        new_rs, olds = self._split(d, fresh)
        if d["spec"].get("paused"):
            self._cleanup(d, olds)
        self._sync_deployment_status(d, [*olds, new_rs], new_rs)

    def _fresh(self, rss: list[Obj]) -> list[Obj]:
        out = []
        for rs in rss:
            ns, name = podutil.key_of(rs)
            current = self.store.get(REPLICASETS, ns, name)
            if current is not None:
                out.append(current)
        return out

    def _scale(self, d: Obj, new_rs: Obj | None, olds: list[Obj]) -> None:
        """Upstream `scale`: one active ReplicaSet takes it all; otherwise proportional scaling."""
        latest = self._active_or_latest(new_rs, olds)
        if latest is not None:
            if du.replicas(latest) != du.replicas(d):
                self._scale_rs_and_record(latest, du.replicas(d), d)
            return
        if du.is_saturated(d, new_rs):
            for old in du.active(olds):
                self._scale_rs_and_record(old, 0, d)
            return
        if not du.is_rolling(d):
            return
        all_rss = du.active([*olds, new_rs])
        allowed = du.replicas(d) + du.max_surge(d) if du.replicas(d) > 0 else 0
        to_add = allowed - du.sum_replicas(all_rss)
        operation = ""
        if to_add > 0:
            all_rss.sort(key=functools.cmp_to_key(_by_size_newer))
            operation = "up"
        elif to_add < 0:
            all_rss.sort(key=functools.cmp_to_key(_by_size_older))
            operation = "down"
        added = 0
        sizes: dict[str, int] = {}
        for rs in all_rss:
            if to_add != 0:
                proportion = _proportion(rs, d, to_add, added)
                sizes[rs["metadata"]["name"]] = du.replicas(rs) + proportion
                added += proportion
            else:
                sizes[rs["metadata"]["name"]] = du.replicas(rs)
        for i, rs in enumerate(all_rss):
            rs_name = rs["metadata"]["name"]
            if i == 0 and to_add != 0:
                sizes[rs_name] = max(0, sizes[rs_name] + to_add - added)
            self._scale_rs(rs, sizes[rs_name], d, operation)

    @staticmethod
    def _active_or_latest(new_rs: Obj | None, olds: list[Obj]) -> Obj | None:
        if new_rs is None and not olds:
            return None
        newest_first = sorted(olds, key=du.by_creation, reverse=True)
        actives = du.active([*newest_first, new_rs])
        if not actives:
            return new_rs if new_rs is not None else newest_first[0]
        return actives[0] if len(actives) == 1 else None

    # ---- rollouts -----------------------------------------------------------------------------
    def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, olds, d = self._get_all_rss_and_sync_revision(d, rss, create=True)
        if new_rs is None:
            return
        all_rss = [*olds, new_rs]
        scaled_up, new_rs = self._reconcile_new_rs(all_rss, new_rs, d)
        if scaled_up:
            self._sync_rollout_status([*olds, new_rs], new_rs, d)
            return
        all_rss = [*olds, new_rs]
        scaled_down, olds = self._reconcile_old_rss(all_rss, olds, new_rs, d)
        if scaled_down:
            self._sync_rollout_status([*olds, new_rs], new_rs, d)
            return
        if du.complete(d, d.get("status") or {}):
            self._cleanup(d, olds)
        self._sync_rollout_status([*olds, new_rs], new_rs, d)

    def _reconcile_new_rs(self, all_rss: list[Obj], new_rs: Obj, d: Obj) -> tuple[bool, Obj]:
        if du.replicas(new_rs) == du.replicas(d):
            return False, new_rs
        if du.replicas(new_rs) > du.replicas(d):
            return self._scale_rs_and_record(new_rs, du.replicas(d), d)
        return self._scale_rs_and_record(new_rs, du.new_rs_new_replicas(d, all_rss, new_rs), d)

    def _reconcile_old_rss(
        self, all_rss: list[Obj], olds: list[Obj], new_rs: Obj, d: Obj
    ) -> tuple[bool, list[Obj]]:
        if du.sum_replicas(olds) == 0:
            return False, olds
        min_available = du.replicas(d) - du.max_unavailable(d)
        new_unavailable = du.replicas(new_rs) - du.status_count(new_rs, "availableReplicas")
        max_scaled_down = du.sum_replicas(all_rss) - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False, olds
        olds, cleaned = self._cleanup_unhealthy(olds, d, max_scaled_down)
        olds, scaled = self._scale_down_old_for_rolling([*olds, new_rs], olds, d)
        return cleaned + scaled > 0, olds

    def _cleanup_unhealthy(self, olds: list[Obj], d: Obj, max_cleanup: int) -> tuple[list[Obj], int]:
        """Scale down old ReplicaSets' unavailable pods first (they add nothing to availability)."""
        olds = sorted(olds, key=du.by_creation)
        total = 0
        for i, rs in enumerate(olds):
            if total >= max_cleanup:
                break
            size, available = du.replicas(rs), du.status_count(rs, "availableReplicas")
            if size == 0 or size == available:
                continue
            count = min(max_cleanup - total, size - available)
            _, olds[i] = self._scale_rs_and_record(rs, size - count, d)
            total += count
        return olds, total

    def _scale_down_old_for_rolling(
        self, all_rss: list[Obj], olds: list[Obj], d: Obj
    ) -> tuple[list[Obj], int]:
        min_available = du.replicas(d) - du.max_unavailable(d)
        available = du.sum_status(all_rss, "availableReplicas")
        if available <= min_available:
            return olds, 0
        olds = sorted(olds, key=du.by_creation)
        total, budget = 0, available - min_available
        for i, rs in enumerate(olds):
            if total >= budget:
                break
            if du.replicas(rs) == 0:
                continue
            count = min(du.replicas(rs), budget - total)
            _, olds[i] = self._scale_rs_and_record(rs, du.replicas(rs) - count, d)
            total += count
        return olds, total

    def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, olds, d = self._get_all_rss_and_sync_revision(d, rss, create=False)
        scaled_down = False
        for i, rs in enumerate(olds):
            if du.replicas(rs) == 0:
                continue
            _, olds[i] = self._scale_rs_and_record(rs, 0, d)
            scaled_down = True
        if scaled_down:
            self._sync_rollout_status([*olds, new_rs], new_rs, d)
            return
        if self._old_pods_running(new_rs, olds):
            self._sync_rollout_status([*olds, new_rs], new_rs, d)
            return
        if new_rs is None:
            new_rs, olds, d = self._get_all_rss_and_sync_revision(d, rss, create=True)
            if new_rs is None:
                return
        _, new_rs = self._scale_rs_and_record(new_rs, du.replicas(d), d)
        if du.complete(d, d.get("status") or {}):
            self._cleanup(d, olds)
        self._sync_rollout_status([*olds, new_rs], new_rs, d)

    def _old_pods_running(self, new_rs: Obj | None, olds: list[Obj]) -> bool:
        if du.sum_status(olds, "replicas") > 0:
            return True
        for rs in olds:
            for rt, pod in self.store.dependents(rs["metadata"]["uid"]):
                if (
                    rt is PODS
                    and podutil.is_controlled_by(pod, rs)
                    and podutil.phase(pod) not in podutil.TERMINAL_PHASES
                ):
                    return True
        return False

    def _cleanup(self, d: Obj, olds: list[Obj]) -> None:
        """Delete the oldest unused ReplicaSets beyond revisionHistoryLimit."""
        limit = d["spec"].get("revisionHistoryLimit", 10)
        if limit is None:
            return
        cleanable = [rs for rs in olds if not podutil.is_terminating(rs)]
        diff = len(cleanable) - int(limit)
        if diff <= 0:
            return
        for rs in sorted(cleanable, key=du.by_revision)[:diff]:
            if (
                du.status_count(rs, "replicas") != 0
                or du.replicas(rs) != 0
                or int(rs["metadata"].get("generation", 1))
                > int((rs.get("status") or {}).get("observedGeneration", 0))
            ):
                continue
            ns, name = podutil.key_of(rs)
            try:
                self.store.delete(REPLICASETS, ns, name)
            except errors.NotFound:
                continue

    # ---- status -------------------------------------------------------------------------------
    def _calculate_status(self, all_rss: list[Obj | None], new_rs: Obj | None, d: Obj) -> Obj:
        available = du.sum_status(all_rss, "availableReplicas")
        total = du.sum_replicas(all_rss)
        old = d.get("status") or {}
        status: Obj = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": du.sum_status(all_rss, "replicas"),
            "updatedReplicas": du.sum_status([new_rs], "replicas"),
            "readyReplicas": du.sum_status(all_rss, "readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available),
            "conditions": [dict(c) for c in old.get("conditions") or []],
        }
        if old.get("collisionCount") is not None:
            status["collisionCount"] = old["collisionCount"]
        now = self._now_text()
        if available >= du.replicas(d) - du.max_unavailable(d):
            cond = du.new_condition(
                "Available", "True", du.MIN_AVAILABLE, "Deployment has minimum availability.", now
            )
        else:
            message = "Deployment does not have minimum availability."
            cond = du.new_condition("Available", "False", du.MIN_UNAVAILABLE, message, now)
        du.set_condition(status, cond)
        return status

    def _render(self, status: Obj) -> Obj:
        return podutil.omit_zero(
            status,
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
            "conditions",
        )

    def _sync_deployment_status(self, d: Obj, all_rss: list[Obj | None], new_rs: Obj | None) -> None:
        status = self._render(self._calculate_status(all_rss, new_rs, d))
        self.write_status(DEPLOYMENTS, d, status)

    def _sync_status_only(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, olds, d = self._get_all_rss_and_sync_revision(d, rss, create=False)
        self._sync_deployment_status(d, [*olds, new_rs], new_rs)

    def _sync_rollout_status(self, all_rss: list[Obj | None], new_rs: Obj | None, d: Obj) -> None:
        d = self._reload(d)
        fresh = self._fresh([rs for rs in all_rss if rs is not None])
        new_rs = next(
            (rs for rs in fresh if new_rs is not None and rs["metadata"]["uid"] == new_rs["metadata"]["uid"]),
            None,
        )
        status = self._calculate_status(list(fresh), new_rs, d)
        if not du.has_progress_deadline(d):
            du.remove_condition(status, "Progressing")
        current = du.get_condition(d.get("status") or {}, "Progressing")
        complete_already = (
            int(status.get("replicas") or 0) == int(status.get("updatedReplicas") or 0)
            and current is not None
            and current.get("reason") == du.NEW_RS_AVAILABLE
        )
        now = self._now_text()
        rs_name = new_rs["metadata"]["name"] if new_rs is not None else ""
        if du.has_progress_deadline(d) and not complete_already:
            if du.complete(d, status):
                message = f'ReplicaSet "{rs_name}" has successfully progressed.'
                du.set_condition(
                    status, du.new_condition("Progressing", "True", du.NEW_RS_AVAILABLE, message, now)
                )
            elif du.progressing(d, status):
                message = f'ReplicaSet "{rs_name}" is progressing.'
                cond = du.new_condition("Progressing", "True", du.RS_UPDATED, message, now)
                if current is not None:
                    if current.get("status") == "True":
                        cond["lastTransitionTime"] = current["lastTransitionTime"]
                    du.remove_condition(status, "Progressing")
                du.set_condition(status, cond)
            elif self._timed_out(d, status):
                message = f'ReplicaSet "{rs_name}" has timed out progressing.'
                du.set_condition(status, du.new_condition("Progressing", "False", du.TIMED_OUT, message, now))
        # Surface ReplicaSet failures (e.g. quota) as the Deployment's ReplicaFailure condition.
        failure = next(
            (
                du.get_condition(rs.get("status") or {}, "ReplicaFailure")
                for rs in fresh
                if du.get_condition(rs.get("status") or {}, "ReplicaFailure")
            ),
            None,
        )
        if failure is not None:
            cond = du.new_condition(
                "ReplicaFailure",
                failure["status"],
                failure.get("reason", ""),
                failure.get("message", ""),
                now,
            )
            du.set_condition(status, cond)
        else:
            du.remove_condition(status, "ReplicaFailure")
        status = self._render(status)
        if status == (d.get("status") or {}):
            self._requeue_stuck(d, status)
            return
        self.write_status(DEPLOYMENTS, d, status)

    def _timed_out(self, d: Obj, status: Obj) -> bool:
        cond = du.get_condition(status, "Progressing")
        if cond is None or cond.get("reason") == du.NEW_RS_AVAILABLE:
            return False
        if cond.get("reason") == du.TIMED_OUT:
            return True
        return parse_time(cond["lastUpdateTime"]) + du.progress_deadline(d) < self.now()

    def _requeue_stuck(self, d: Obj, status: Obj) -> None:
        cond = du.get_condition(d.get("status") or {}, "Progressing")
        if not du.has_progress_deadline(d) or cond is None:
            return
        if du.complete(d, status) or cond.get("reason") == du.TIMED_OUT:
            return
        after = parse_time(cond["lastUpdateTime"]) + du.progress_deadline(d) - self.now()
        self.enqueue(podutil.key_of(d), after=max(after, 0.0) + 1.0)


def _by_size_newer(a: Obj, b: Obj) -> int:
    """Larger first; equal sizes newest first (upstream `ReplicaSetsBySizeNewer`)."""
    if du.replicas(a) != du.replicas(b):
        return -1 if du.replicas(a) > du.replicas(b) else 1
    return (
        -1 if du.by_creation(a) > du.by_creation(b) else (1 if du.by_creation(a) < du.by_creation(b) else 0)
    )


def _by_size_older(a: Obj, b: Obj) -> int:
    """Larger first; equal sizes oldest first (upstream `ReplicaSetsBySizeOlder`)."""
    if du.replicas(a) != du.replicas(b):
        return -1 if du.replicas(a) > du.replicas(b) else 1
    return (
        -1 if du.by_creation(a) < du.by_creation(b) else (1 if du.by_creation(a) > du.by_creation(b) else 0)
    )


def _proportion(rs: Obj, d: Obj, to_add: int, added: int) -> int:
    """Upstream `GetProportion`: this ReplicaSet's share of a resize, bounded by what is left."""
    if du.replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _fraction(rs: Obj, d: Obj) -> int:
    if du.replicas(d) == 0:
        return -du.replicas(rs)
    deployment_replicas = du.replicas(d) + du.max_surge(d)
    annotated = du.annotation_int(rs, du.MAX_REPLICAS)
    if annotated is None:
        annotated = du.status_count(d, "replicas")
    if annotated == 0:
        return 0
    size = du.replicas(rs) * deployment_replicas / annotated
    rounded = int(size + 0.5) if size >= 0 else int(size - 0.5)
    return rounded - du.replicas(rs)
