"""The Endpoints controller: a Service's selected pods as core/v1 Endpoints (ready and not ready).

EndpointSlices are not served by the emulator, so only the Endpoints object is maintained.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from shipshape.emulator.controllers import podutil
from shipshape.emulator.controllers.base import Controller
from shipshape.emulator.resources import BY_KEY, PODS, SERVICES
from shipshape.emulator.store import DELETED, Obj, WatchEvent
from shipshape.kube import errors
from shipshape.kube.clock import rfc3339
from shipshape.kube.labels import Requirement, Selector

log = logging.getLogger(__name__)

ENDPOINTS = BY_KEY["endpoints"]
HEADLESS_LABEL = "service.kubernetes.io/headless"
LAST_CHANGE = "endpoints.kubernetes.io/last-change-trigger-time"

Key = tuple[str, str]


def service_selector(svc: Mapping[str, Any]) -> Selector | None:
    """Services without a selector get no endpoints from the controller."""
    selector = (svc.get("spec") or {}).get("selector")
    if not selector:
        return None
    return Selector(tuple(Requirement(str(k), "In", (str(v),)) for k, v in selector.items()))


def find_port(pod: Mapping[str, Any], service_port: Mapping[str, Any]) -> int | None:
    """Upstream `FindPort`: a numeric targetPort as is, a named one looked up in the containers."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    protocol = service_port.get("protocol", "TCP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and port.get("protocol", "TCP") == protocol:
                return int(port["containerPort"])
    return None


def should_be_in_endpoints(pod: Mapping[str, Any], publish_not_ready: bool) -> bool:
    if podutil.phase(pod) in podutil.TERMINAL_PHASES:
        return False
    if not (pod.get("status") or {}).get("podIP"):
        return False
    return publish_not_ready or not podutil.is_terminating(pod)


class EndpointsController(Controller):
    name = "endpoint-controller"
    watches = (SERVICES, PODS)

    def __init__(self) -> None:
        super().__init__()
        self._members: dict[tuple[str, str], set[Key]] = {}  # pod -> services it was last listed in

    def keys_for(self, event: WatchEvent) -> list[Any]:
        obj = event.object
        ns, name = podutil.key_of(obj)
        if event.resource is SERVICES:
            return [(ns, name)]
        keys = set(self._members.get((ns, name), set()))
        if event.type == DELETED:
            self._members.pop((ns, name), None)
        else:
            labels = podutil.meta(obj).get("labels")
            for svc in self.store.list(SERVICES, ns):
                selector = service_selector(svc)
                if selector is not None and selector.matches(labels):
                    keys.add(podutil.key_of(svc))
        return sorted(keys)

    def reconcile(self, key: Key) -> None:
        ns, name = key
        svc = self.store.get(SERVICES, ns, name)
        if svc is None:
            with contextlib.suppress(errors.NotFound):
                self.store.delete(ENDPOINTS, ns, name)
            return
        selector = service_selector(svc)
        if selector is None:
            return
        spec = svc.get("spec") or {}
        publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
        headless = spec.get("clusterIP") == "None"
        groups: dict[tuple[tuple[str, int, str], ...], tuple[list[Obj], list[Obj]]] = {}
        for pod in self.store.list(PODS, ns, selector=selector):
            pod_key = podutil.key_of(pod)
            self._members.setdefault(pod_key, set()).add(key)
            if not should_be_in_endpoints(pod, publish_not_ready):
                continue
            address = self._address(svc, pod)
            ready = publish_not_ready or podutil.is_ready(pod)
            ports = []
            for service_port in spec.get("ports") or []:
                number = find_port(pod, service_port)
                if number is None:
                    continue
                ports.append(
                    (str(service_port.get("name", "")), number, str(service_port.get("protocol", "TCP")))
                )
            if not ports and not (headless and not spec.get("ports")):
                continue
            ready_list, not_ready_list = groups.setdefault(tuple(sorted(ports)), ([], []))
            (ready_list if ready else not_ready_list).append(address)
        subsets = []
        for ports_key, (ready_list, not_ready_list) in sorted(groups.items()):
            subset: Obj = {}
            if ready_list:
                subset["addresses"] = sorted(ready_list, key=lambda a: a["ip"])
            if not_ready_list:
                subset["notReadyAddresses"] = sorted(not_ready_list, key=lambda a: a["ip"])
            if ports_key:
                subset["ports"] = [
                    {**({"name": port_name} if port_name else {}), "port": number, "protocol": protocol}
                    for port_name, number, protocol in ports_key
                ]
            subsets.append(subset)
        labels = dict(podutil.meta(svc).get("labels") or {})
        if headless:
            labels[HEADLESS_LABEL] = ""
        self._write(svc, labels, subsets)

    def _address(self, svc: Obj, pod: Obj) -> Obj:
        md = pod["metadata"]
        address: Obj = {
            "ip": pod["status"]["podIP"],
            "targetRef": {"kind": "Pod", "namespace": md["namespace"], "name": md["name"], "uid": md["uid"]},
        }
        if pod["spec"].get("nodeName"):
            address["nodeName"] = pod["spec"]["nodeName"]
        hostname = pod["spec"].get("hostname")
        if hostname and pod["spec"].get("subdomain") == svc["metadata"]["name"]:
            address["hostname"] = hostname
        return address

    def _write(self, svc: Obj, labels: dict[str, str], subsets: list[Obj]) -> None:
        ns, name = podutil.key_of(svc)
        current = self.store.get(ENDPOINTS, ns, name)
        if current is None:
            body: Obj = {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {LAST_CHANGE: rfc3339(self.now())},
                },
                "subsets": subsets,
            }
            try:
                self.store.create(ENDPOINTS, body)
            except errors.AlreadyExists:
                return
            return
        if (current.get("subsets") or []) == subsets and (current["metadata"].get("labels") or {}) == labels:
            return
        now = rfc3339(self.now())

        def change(new: Obj) -> None:
            new["metadata"]["labels"] = labels
            new["metadata"].setdefault("annotations", {})[LAST_CHANGE] = now
            new["subsets"] = subsets

        self.store.mutate(ENDPOINTS, ns, name, change)
