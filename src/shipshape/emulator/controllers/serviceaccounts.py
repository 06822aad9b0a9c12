"""The service account controller: every active namespace has a `default` ServiceAccount."""

from __future__ import annotations

from typing import Any

from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import NAMESPACES, SERVICEACCOUNTS
from shipshape.emulator.store import DELETED, WatchEvent
from shipshape.kube import errors

DEFAULT = "default"


class ServiceAccountsController(Controller):
    name = "serviceaccount-controller"
    watches = (NAMESPACES, SERVICEACCOUNTS)

    def keys_for(self, event: WatchEvent) -> list[Any]:
        md = event.object["metadata"]
        if event.resource is NAMESPACES:
            return [] if event.type == DELETED else [md["name"]]
        # A deleted default account is recreated.
        return [md.get("namespace", "")] if event.type == DELETED and md["name"] == DEFAULT else []

    def reconcile(self, namespace: str) -> None:
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if (ns.get("status") or {}).get("phase", "Active") != "Active":
            return
        if self.store.get(SERVICEACCOUNTS, namespace, DEFAULT) is not None:
            return
        try:
            self.store.create(SERVICEACCOUNTS, {"metadata": {"name": DEFAULT, "namespace": namespace}})
        except errors.AlreadyExists:
            return
