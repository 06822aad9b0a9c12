"""Server-side printing: meta.k8s.io/v1 `Table` objects with kube-apiserver's columns per kind.

The server always fills every column (wide ones too, with priority 1); kubectl hides priority-1
columns unless `-o wide`. Ages are measured on the cluster's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shipshape.kube.clock import parse_time

Obj = dict[str, Any]
Cell = str | int | bool | None

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
    "for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description or self.name,
            "priority": self.priority,
        }


NAME = Column("Name", format="name", description=_NAME_DOC)
AGE = Column("Age", description=_AGE_DOC)


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


class Printer:
    """Turns objects into table rows; `now` is the cluster clock's current time."""

    def __init__(self, now: float) -> None:
        self.now = now

    def since(self, timestamp: str | None) -> str:
        if not timestamp:
            return "<unknown>"
        return human_duration(self.now - parse_time(timestamp))

    def age(self, obj: Obj) -> str:
        return self.since(obj.get("metadata", {}).get("creationTimestamp"))


RowFn = Callable[[Printer, Obj], list[Cell]]


def _containers(obj: Obj) -> tuple[str, str]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    containers = spec.get("containers") or []
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def selector_string(selector: Obj | None) -> str:
    """metav1.LabelSelectorAsSelector(...).String(), as printed in the Selector column."""
    if selector is None:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key", ""), sorted(expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    if not parts:
        return "<none>" if not selector else ""
    return ",".join(sorted(parts))


# ---- pods ----------------------------------------------------------------------------------------


def _pod_row(p: Printer, pod: Obj) -> list[Cell]:
    spec, status, md = pod.get("spec", {}), pod.get("status", {}), pod.get("metadata", {})
    restarts = 0
    total = len(spec.get("containers") or [])
    ready = 0
    last_restart: str | None = None
    reason = status.get("reason") or status.get("phase") or ""

    def note_restart(cs: Obj) -> None:
        nonlocal last_restart
        finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished

    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    initializing = False
    sidecar_restarts = 0
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount", 0))
        note_restart(cs)
        state = cs.get("state") or {}
        is_sidecar = (init_specs.get(cs.get("name")) or {}).get("restartPolicy") == "Always"
        if is_sidecar:
            sidecar_restarts += int(cs.get("restartCount", 0))
            total += 1
            if cs.get("ready"):
                ready += 1
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and int(terminated.get("exitCode", 0)) == 0:
            continue
        if is_sidecar and cs.get("started"):
            continue
        if terminated is not None:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        initializing = True
        break
    initialized = any(
        c.get("type") == "Initialized" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if not initializing or initialized:
        restarts = sidecar_restarts
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount", 0))
            note_restart(cs)
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                reason = (
                    f"Signal:{terminated['signal']}"
                    if terminated.get("signal")
                    else f"ExitCode:{terminated.get('exitCode', 0)}"
                )
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            has_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            reason = "Running" if has_ready else "NotReady"
    if md.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif md.get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({p.since(last_restart)} ago)"
    ips = status.get("podIPs") or []
    pod_ip = ips[0].get("ip", "") if ips else status.get("podIP", "")
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        true_conditions = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        met = sum(1 for g in gates if g.get("conditionType") in true_conditions)
        gates_text = f"{met}/{len(gates)}"
    return [
        md.get("name", ""),
        f"{ready}/{total}",
        reason,
        restarts_text,
        p.age(pod),
        pod_ip or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


# ---- nodes ---------------------------------------------------------------------------------------


def _node_row(p: Printer, node: Obj) -> list[Cell]:
    status, md = node.get("status", {}), node.get("metadata", {})
    states = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            states.append("Ready" if cond.get("status") == "True" else "NotReady")
    if not states:
        states.append("Unknown")
    if node.get("spec", {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (md.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        for addr in status.get("addresses") or []:
            if addr.get("type") == kind:
                return str(addr.get("address", ""))
        return "<none>"

    return [
        md.get("name", ""),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        p.age(node),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# ---- workloads -----------------------------------------------------------------------------------


def _deployment_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers, images = _containers(obj)
    return [
        obj["metadata"].get("name", ""),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        int(status.get("updatedReplicas", 0)),
        int(status.get("availableReplicas", 0)),
        p.age(obj),
        containers,
        images,
        selector_string(spec.get("selector")),
    ]


def _replicaset_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers, images = _containers(obj)
    return [
        obj["metadata"].get("name", ""),
        int(spec.get("replicas", 1)),
        int(status.get("replicas", 0)),
        int(status.get("readyReplicas", 0)),
        p.age(obj),
        containers,
        images,
        selector_string(spec.get("selector")),
    ]


def _statefulset_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers, images = _containers(obj)
    return [
        obj["metadata"].get("name", ""),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        p.age(obj),
        containers,
        images,
    ]


def _daemonset_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers, images = _containers(obj)
    node_selector = (spec.get("template", {}).get("spec", {}) or {}).get("nodeSelector") or {}
    return [
        obj["metadata"].get("name", ""),
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
        int(status.get("updatedNumberScheduled", 0)),
        int(status.get("numberAvailable", 0)),
        ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
        p.age(obj),
        containers,
        images,
        selector_string(spec.get("selector")),
    ]


def _job_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    containers, images = _containers(obj)
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif conditions.get("Suspended") == "True":
        state = "Suspended"
    else:
        state = "Running"
    completions = spec.get("completions")
    succeeded = int(status.get("succeeded", 0))
    done = (
        f"{succeeded}/{completions}"
        if completions is not None
        else f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    )
    duration = ""
    if status.get("startTime"):
        end = parse_time(status["completionTime"]) if status.get("completionTime") else p.now
        duration = human_duration(end - parse_time(status["startTime"]))
    return [
        obj["metadata"].get("name", ""),
        state,
        done,
        duration,
        p.age(obj),
        containers,
        images,
        selector_string(spec.get("selector")),
    ]


# ---- others --------------------------------------------------------------------------------------


def _event_row(p: Printer, ev: Obj) -> list[Cell]:
    first = p.since(ev.get("firstTimestamp")) if ev.get("firstTimestamp") else p.since(ev.get("eventTime"))
    last = p.since(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = ev.get("count") or 1
    series = ev.get("series")
    if series:
        last = p.since(series.get("lastObservedTime"))
        count = series.get("count", count)
    involved = ev.get("involvedObject") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = ev.get("source") or {}
    component = source.get("component") or ev.get("reportingComponent", "")
    host = source.get("host") or ev.get("reportingInstance", "")
    source_text = f"{component}, {host}" if host else component
    return [
        last,
        ev.get("type", ""),
        ev.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        source_text,
        str(ev.get("message", "")).strip(),
        first,
        int(count),
        ev["metadata"].get("name", ""),
    ]


def _events_v1_row(p: Printer, ev: Obj) -> list[Cell]:
    """events.k8s.io/v1 Events print like core ones (upstream converts them to core/v1 to print)."""
    series = ev.get("series") or {}
    core: Obj = {
        "metadata": ev.get("metadata", {}),
        "involvedObject": ev.get("regarding") or {},
        "reason": ev.get("reason", ""),
        "message": ev.get("note", ""),
        "type": ev.get("type", ""),
        "source": ev.get("deprecatedSource") or {"component": ev.get("reportingController", "")},
        "firstTimestamp": ev.get("deprecatedFirstTimestamp"),
        "lastTimestamp": ev.get("deprecatedLastTimestamp"),
        "eventTime": ev.get("eventTime"),
        "count": ev.get("deprecatedCount") or 1,
    }
    if series:
        core["series"] = series
    return _event_row(p, core)


def _namespace_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj["metadata"]["name"], obj.get("status", {}).get("phase", ""), p.age(obj)]


def _pdb_row(p: Printer, obj: Obj) -> list[Cell]:
    spec = obj.get("spec", {})
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    return [
        obj["metadata"]["name"],
        "N/A" if min_available is None else str(min_available),
        "N/A" if max_unavailable is None else str(max_unavailable),
        int(obj.get("status", {}).get("disruptionsAllowed", 0)),
        p.age(obj),
    ]


def _lease_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj["metadata"]["name"], obj.get("spec", {}).get("holderIdentity") or "", p.age(obj)]


def _configmap_row(p: Printer, obj: Obj) -> list[Cell]:
    return [
        obj["metadata"]["name"],
        len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
        p.age(obj),
    ]


def _service_row(p: Printer, obj: Obj) -> list[Cell]:
    spec = obj.get("spec", {})
    ports = ",".join(
        f"{pt.get('port')}"
        + (f":{pt['nodePort']}" if pt.get("nodePort") else "")
        + f"/{pt.get('protocol', 'TCP')}"
        for pt in spec.get("ports") or []
    )
    external = ",".join(spec.get("externalIPs") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [
        obj["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        external,
        ports or "<none>",
        p.age(obj),
        selector,
    ]


def _priorityclass_row(p: Printer, obj: Obj) -> list[Cell]:
    return [
        obj["metadata"]["name"],
        int(obj.get("value", 0)),
        bool(obj.get("globalDefault", False)),
        p.age(obj),
        obj.get("preemptionPolicy", "PreemptLowerPriority"),
    ]


def _webhooks_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj["metadata"]["name"], len(obj.get("webhooks") or []), p.age(obj)]


def _secret_row(p: Printer, obj: Obj) -> list[Cell]:
    entries = len(obj.get("data") or {}) + len(obj.get("stringData") or {})
    return [obj["metadata"]["name"], obj.get("type") or "Opaque", entries, p.age(obj)]


def _serviceaccount_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj["metadata"]["name"], len(obj.get("secrets") or []), p.age(obj)]


def endpoints_text(obj: Obj, shown: int = 3) -> str:
    """Up to three "ip:port" endpoints, then "+ N more...", as kubectl shows them."""
    listed: list[str] = []
    count = 0
    for subset in obj.get("subsets") or []:
        addresses = [a.get("ip", "") for a in subset.get("addresses") or []]
        ports = subset.get("ports") or []
        pairs = (
            list(addresses)
            if not ports
            else [
                f"[{ip}]:{pt.get('port')}" if ":" in ip else f"{ip}:{pt.get('port')}"
                for pt in ports
                for ip in addresses
            ]
        )
        count += len(pairs)
        listed += pairs[: max(0, shown - len(listed))]
    if not (obj.get("subsets") or []):
        return "<none>"
    text = ",".join(listed)
    return f"{text} + {count - shown} more..." if count > shown else text


def _endpoints_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj["metadata"]["name"], endpoints_text(obj), p.age(obj)]


def _controllerrevision_row(p: Printer, obj: Obj) -> list[Cell]:
    controller = "<none>"
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            api_version = str(ref.get("apiVersion", ""))
            group = api_version.split("/")[0] if "/" in api_version else ""
            kind = f"{ref.get('kind', '')}.{group}" if group else str(ref.get("kind", ""))
            controller = f"{kind.lower()}/{ref.get('name', '')}"
            break
    return [obj["metadata"]["name"], controller, int(obj.get("revision", 0)), p.age(obj)]


_ACCESS_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def _pvc_row(p: Printer, obj: Obj) -> list[Cell]:
    spec, status = obj.get("spec", {}), obj.get("status", {})
    phase = "Terminating" if obj["metadata"].get("deletionTimestamp") else status.get("phase", "")
    modes = ",".join(_ACCESS_MODES.get(m, m) for m in status.get("accessModes") or [])
    return [
        obj["metadata"]["name"],
        phase,
        spec.get("volumeName", ""),
        (status.get("capacity") or {}).get("storage", ""),
        modes,
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        p.age(obj),
        spec.get("volumeMode") or "<unset>",
    ]


def _generic_row(p: Printer, obj: Obj) -> list[Cell]:
    return [obj.get("metadata", {}).get("name", ""), p.age(obj)]


_EVENT_COLUMNS = (
    Column("Last Seen"),
    Column("Type"),
    Column("Reason"),
    Column("Object"),
    Column("Subobject", priority=1),
    Column("Source", priority=1),
    Column("Message"),
    Column("First Seen", priority=1),
    Column("Count", priority=1),
    Column("Name", priority=1, format="name", description=_NAME_DOC),
)
_WORKLOAD_WIDE = (Column("Containers", priority=1), Column("Images", priority=1))

TABLES: dict[str, tuple[tuple[Column, ...], RowFn]] = {
    "pods": (
        (
            NAME,
            Column("Ready"),
            Column("Status"),
            Column("Restarts"),
            AGE,
            Column("IP", priority=1),
            Column("Node", priority=1),
            Column("Nominated Node", priority=1),
            Column("Readiness Gates", priority=1),
        ),
        _pod_row,
    ),
    "nodes": (
        (
            NAME,
            Column("Status"),
            Column("Roles"),
            AGE,
            Column("Version"),
            Column("Internal-IP", priority=1),
            Column("External-IP", priority=1),
            Column("OS-Image", priority=1),
            Column("Kernel-Version", priority=1),
            Column("Container-Runtime", priority=1),
        ),
        _node_row,
    ),
    "deployments.apps": (
        (
            NAME,
            Column("Ready"),
            Column("Up-to-date", "integer"),
            Column("Available", "integer"),
            AGE,
            *_WORKLOAD_WIDE,
            Column("Selector", priority=1),
        ),
        _deployment_row,
    ),
    "replicasets.apps": (
        (
            NAME,
            Column("Desired", "integer"),
            Column("Current", "integer"),
            Column("Ready", "integer"),
            AGE,
            *_WORKLOAD_WIDE,
            Column("Selector", priority=1),
        ),
        _replicaset_row,
    ),
    "statefulsets.apps": ((NAME, Column("Ready"), AGE, *_WORKLOAD_WIDE), _statefulset_row),
    "daemonsets.apps": (
        (
            NAME,
            Column("Desired", "integer"),
            Column("Current", "integer"),
            Column("Ready", "integer"),
            Column("Up-to-date", "integer"),
            Column("Available", "integer"),
            Column("Node Selector"),
            AGE,
            *_WORKLOAD_WIDE,
            Column("Selector", priority=1),
        ),
        _daemonset_row,
    ),
    "jobs.batch": (
        (
            NAME,
            Column("Status"),
            Column("Completions"),
            Column("Duration"),
            AGE,
            *_WORKLOAD_WIDE,
            Column("Selector", priority=1),
        ),
        _job_row,
    ),
    "events": (
        _EVENT_COLUMNS,
        _event_row,
    ),
    "events.events.k8s.io": (
        _EVENT_COLUMNS,
        _events_v1_row,
    ),
    "namespaces": ((NAME, Column("Status"), AGE), _namespace_row),
    "poddisruptionbudgets.policy": (
        (
            NAME,
            Column("Min Available"),
            Column("Max Unavailable"),
            Column("Allowed Disruptions", "integer"),
            AGE,
        ),
        _pdb_row,
    ),
    "leases.coordination.k8s.io": ((NAME, Column("Holder"), AGE), _lease_row),
    "configmaps": ((NAME, Column("Data", "integer"), AGE), _configmap_row),
    "services": (
        (
            NAME,
            Column("Type"),
            Column("Cluster-IP"),
            Column("External-IP"),
            Column("Port(s)"),
            AGE,
            Column("Selector", priority=1),
        ),
        _service_row,
    ),
    "secrets": ((NAME, Column("Type"), Column("Data", "string"), AGE), _secret_row),
    "serviceaccounts": ((NAME, Column("Secrets", "string"), AGE), _serviceaccount_row),
    "endpoints": ((NAME, Column("Endpoints"), AGE), _endpoints_row),
    "controllerrevisions.apps": (
        (NAME, Column("Controller"), Column("Revision", "integer"), AGE),
        _controllerrevision_row,
    ),
    "persistentvolumeclaims": (
        (
            NAME,
            Column("Status"),
            Column("Volume"),
            Column("Capacity"),
            Column("Access Modes"),
            Column("StorageClass"),
            Column("VolumeAttributesClass"),
            AGE,
            Column("VolumeMode", priority=1),
        ),
        _pvc_row,
    ),
    "priorityclasses.scheduling.k8s.io": (
        (
            NAME,
            Column("Value", "integer"),
            Column("Global-Default", "boolean"),
            AGE,
            Column("PreemptionPolicy"),
        ),
        _priorityclass_row,
    ),
    "mutatingwebhookconfigurations.admissionregistration.k8s.io": (
        (NAME, Column("Webhooks", "integer"), AGE),
        _webhooks_row,
    ),
    "validatingwebhookconfigurations.admissionregistration.k8s.io": (
        (NAME, Column("Webhooks", "integer"), AGE),
        _webhooks_row,
    ),
}
GENERIC: tuple[tuple[Column, ...], RowFn] = ((NAME, AGE), _generic_row)


def partial_metadata(obj: Obj) -> Obj:
    """A meta.k8s.io/v1 PartialObjectMetadata for an object."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def row(resource_key: str, obj: Obj, now: float, include_object: str = "Metadata") -> Obj:
    """One table row for an object (`include_object`: None | Metadata | Object)."""
    _, row_fn = TABLES.get(resource_key, GENERIC)
    out: Obj = {"cells": row_fn(Printer(now), obj)}
    if include_object == "Object":
        out["object"] = obj
    elif include_object != "None":
        out["object"] = partial_metadata(obj)
    return out


def table(
    resource_key: str,
    objs: Iterable[Obj],
    now: float,
    *,
    include_object: str = "Metadata",
    list_meta: Obj | None = None,
) -> Obj:
    """A full Table for a list (or a single object given as a one-item list)."""
    columns, _ = TABLES.get(resource_key, GENERIC)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": [c.definition() for c in columns],
        "rows": [row(resource_key, obj, now, include_object) for obj in objs],
    }
