"""The resource quota controller: keep each ResourceQuota's `status.hard` and `status.used` current.

Admission records usage as it admits objects; this controller brings `used` back down when pods
finish or objects are deleted, and fills in a new quota's status, as kube-controller-manager does.
"""

from __future__ import annotations

from typing import Any

from shipshape.emulator.admission import quota
from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import EVENTS, EVENTS_V1, STORED
from shipshape.emulator.store import Obj, WatchEvent

RESOURCEQUOTAS = quota.RESOURCEQUOTAS
# Full recomputation period (upstream --resource-quota-sync-period).
RESYNC_SECONDS = 300.0


class ResourceQuotaController(Controller):
    name = "resourcequota-controller"
    watches = tuple(rt for rt in STORED if rt.namespaced and rt not in (EVENTS, EVENTS_V1))

    def keys_for(self, event: WatchEvent) -> list[Any]:
        ns, name = podutil.key_of(event.object)
        if event.resource is RESOURCEQUOTAS:
            return [(ns, name)]
        if not self.store.count(RESOURCEQUOTAS):  # the common case: no quota anywhere
            return []
        return [podutil.key_of(q) for q in self.store.list(RESOURCEQUOTAS, ns)]

    def reconcile(self, key: tuple[str, str]) -> None:
        ns, name = key
        current = self.store.get(RESOURCEQUOTAS, ns, name)
        if current is None:
            return
        hard = dict((current.get("spec") or {}).get("hard") or {})
        status: Obj = {"hard": hard, "used": quota.used(self.store, ns, current)} if hard else {}
        self.write_status(RESOURCEQUOTAS, current, status)
        if hard:
            self.enqueue(key, after=RESYNC_SECONDS)
