"""Defaulting of the built-in kinds, as the API server's `SetDefaults_*` functions and the
strategies' `PrepareForCreate` do (Kubernetes v1.32).

Pure functions: each takes a body and changes it in place (callers pass a copy). Nothing here
reads the store; what needs other objects (priority, service account) is admission's job.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from shipshape.emulator import resources as r
from shipshape.emulator.resources import ResourceType
from shipshape.kube import quantity
from shipshape.kube.patch import copy_json

Obj = dict[str, Any]

DEFAULT_SCHEDULER = "default-scheduler"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORT_RANGE = range(30000, 32768)


def _setdefault(obj: Obj, key: str, value: Any) -> None:
    if obj.get(key) is None:
        obj[key] = value


# ---- pods ----------------------------------------------------------------------------------------


def image_pull_policy(image: str) -> str:
    """`Always` for `:latest` or an untagged image, `IfNotPresent` otherwise (digests included)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _probe(probe: Obj) -> None:
    _setdefault(probe, "timeoutSeconds", 1)
    _setdefault(probe, "periodSeconds", 10)
    _setdefault(probe, "successThreshold", 1)
    _setdefault(probe, "failureThreshold", 3)
    http_get = probe.get("httpGet")
    if isinstance(http_get, dict):
        _setdefault(http_get, "path", "/")
        _setdefault(http_get, "scheme", "HTTP")
    grpc = probe.get("grpc")
    if isinstance(grpc, dict):
        _setdefault(grpc, "service", "")


def _container(container: Obj) -> None:
    image = container.get("image")
    if isinstance(image, str) and image:
        _setdefault(container, "imagePullPolicy", image_pull_policy(image))
    _setdefault(container, "terminationMessagePath", TERMINATION_MESSAGE_PATH)
    _setdefault(container, "terminationMessagePolicy", "File")
    _setdefault(container, "resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            _setdefault(port, "protocol", "TCP")
    for env in container.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(field_ref, dict):
            _setdefault(field_ref, "apiVersion", "v1")
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if isinstance(probe, dict):
            _probe(probe)
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        # Requests default to the limits, resource by resource (SetDefaults_Pod).
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, limit in resources["limits"].items():
                requests.setdefault(name, limit)


def _volume(volume: Obj) -> None:
    for source in ("configMap", "secret"):
        if isinstance(volume.get(source), dict):
            _setdefault(volume[source], "defaultMode", 420)
    if isinstance(volume.get("hostPath"), dict):
        _setdefault(volume["hostPath"], "type", "")
    if isinstance(volume.get("projected"), dict):
        _setdefault(volume["projected"], "defaultMode", 420)
    if not any(k for k in volume if k != "name"):
        volume["emptyDir"] = {}


def pod_spec(spec: Obj) -> None:
    """Defaults of a PodSpec, shared by pods and every pod template."""
    _setdefault(spec, "restartPolicy", "Always")
    _setdefault(spec, "dnsPolicy", "ClusterFirst")
    _setdefault(spec, "schedulerName", DEFAULT_SCHEDULER)
    _setdefault(spec, "terminationGracePeriodSeconds", 30)
    _setdefault(spec, "securityContext", {})
    _setdefault(spec, "enableServiceLinks", True)
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _container(container)
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _volume(volume)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    if spec.get("hostNetwork"):
        for container in spec.get("containers") or []:
            ports = (container.get("ports") or []) if isinstance(container, dict) else []
            for port in ports:
                if isinstance(port, dict) and "containerPort" in port:
                    _setdefault(port, "hostPort", port["containerPort"])


def pod_spec_defaulted(spec: Obj) -> bool:
    """Whether `pod_spec` would leave `spec` as it is (worked out on a copy: `spec` is not changed).

    Every default fills a field that is missing or null, so an unchanged copy means that defaulting
    `spec` itself would write nothing."""
    filled = copy_json(spec)
    pod_spec(filled)
    return bool(filled == spec)


def qos_class(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' cpu/memory requests and limits."""
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in containers:
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        c_requests = {k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
        c_limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")}
        for name, value in c_requests.items():
            try:
                if quantity.resource_amount(name, value) > 0:
                    requests[name] = 1
            except quantity.QuantityError:
                continue
        for name in c_limits:
            limits[name] = 1
        if set(c_limits) != {"cpu", "memory"}:
            guaranteed = False
        else:
            for name in ("cpu", "memory"):
                if name in c_requests and _amount(name, c_requests[name]) != _amount(name, c_limits[name]):
                    guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _amount(name: str, value: Any) -> int | None:
    try:
        return quantity.resource_amount(name, value)
    except quantity.QuantityError:
        return None


def _template(spec: Obj) -> None:
    template = spec.get("template")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        template_spec = template.setdefault("spec", {})
        if isinstance(template_spec, dict):
            pod_spec(template_spec)


def pod(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        pod_spec(spec)


def prepare_pod_create(obj: Obj) -> None:
    """A new pod's status: Pending with its QoS class (whatever the client sent)."""
    spec = obj.get("spec") or {}
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


# ---- workloads -----------------------------------------------------------------------------------


def deployment(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    _setdefault(spec, "replicas", 1)
    strategy = spec.setdefault("strategy", {})
    _setdefault(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        _setdefault(rolling, "maxUnavailable", "25%")
        _setdefault(rolling, "maxSurge", "25%")
    _setdefault(spec, "revisionHistoryLimit", 10)
    _setdefault(spec, "progressDeadlineSeconds", 600)
    _template(spec)


def replicaset(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    _setdefault(spec, "replicas", 1)
    _template(spec)


def statefulset(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    _setdefault(spec, "replicas", 1)
    _setdefault(spec, "podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    _setdefault(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        _setdefault(rolling, "partition", 0)
    _setdefault(spec, "revisionHistoryLimit", 10)
    retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    _setdefault(retention, "whenDeleted", "Retain")
    _setdefault(retention, "whenScaled", "Retain")
    _template(spec)


def daemonset(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {})
    _setdefault(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        _setdefault(rolling, "maxUnavailable", 1)
        _setdefault(rolling, "maxSurge", 0)
    _setdefault(spec, "revisionHistoryLimit", 10)
    _template(spec)


def job(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    _setdefault(spec, "parallelism", 1)
    _setdefault(spec, "backoffLimit", 6)
    _setdefault(spec, "completionMode", "NonIndexed")
    _setdefault(spec, "suspend", False)
    _setdefault(spec, "podReplacementPolicy", "TerminatingOrFailed")
    _template(spec)


def _reset_status(obj: Obj) -> None:
    obj["status"] = {}


# ---- other kinds ---------------------------------------------------------------------------------


def service(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    _setdefault(spec, "type", "ClusterIP")
    _setdefault(spec, "sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        _setdefault(spec, "internalTrafficPolicy", "Cluster")
        _setdefault(spec, "ipFamilyPolicy", "SingleStack")
        _setdefault(spec, "ipFamilies", ["IPv4"])
    if spec["type"] in ("NodePort", "LoadBalancer"):
        _setdefault(spec, "externalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            _setdefault(port, "protocol", "TCP")
            if "port" in port:
                _setdefault(port, "targetPort", port["port"])


def namespace(obj: Obj) -> None:
    md = obj.setdefault("metadata", {})
    name = md.get("name")
    if isinstance(name, str) and name:
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = name


def prepare_namespace_create(obj: Obj) -> None:
    obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
    obj["status"] = {"phase": "Active"}


def prepare_pdb_create(obj: Obj) -> None:
    obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def prepare_pvc_create(obj: Obj) -> None:
    obj["status"] = {"phase": "Pending"}


def pvc(obj: Obj) -> None:
    _setdefault(obj.setdefault("spec", {}), "volumeMode", "Filesystem")


def secret(obj: Obj) -> None:
    _setdefault(obj, "type", "Opaque")


def priority_class(obj: Obj) -> None:
    _setdefault(obj, "preemptionPolicy", "PreemptLowerPriority")


def limit_range(obj: Obj) -> None:
    """Container items: default limits from max, default requests from the default limits or min."""
    for item in (obj.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict) or item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        for key, value in (item.get("max") or {}).items():
            default.setdefault(key, value)
        for key, value in default.items():
            request.setdefault(key, value)
        for key, value in (item.get("min") or {}).items():
            request.setdefault(key, value)
        if not default:
            del item["default"]
        if not request:
            del item["defaultRequest"]


def _webhooks(obj: Obj, *, mutating: bool) -> None:
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        _setdefault(hook, "failurePolicy", "Fail")
        _setdefault(hook, "matchPolicy", "Equivalent")
        _setdefault(hook, "timeoutSeconds", 10)
        _setdefault(hook, "namespaceSelector", {})
        _setdefault(hook, "objectSelector", {})
        if mutating:
            _setdefault(hook, "reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                _setdefault(rule, "scope", "*")
        service_ref = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service_ref, dict):
            _setdefault(service_ref, "port", 443)


def mutating_webhooks(obj: Obj) -> None:
    _webhooks(obj, mutating=True)


def validating_webhooks(obj: Obj) -> None:
    _webhooks(obj, mutating=False)


# Defaulting applied on create and update, by resource key.
DEFAULTERS: dict[str, Callable[[Obj], None]] = {
    r.PODS.key: pod,
    r.DEPLOYMENTS.key: deployment,
    r.REPLICASETS.key: replicaset,
    r.STATEFULSETS.key: statefulset,
    r.DAEMONSETS.key: daemonset,
    r.JOBS.key: job,
    r.SERVICES.key: service,
    r.NAMESPACES.key: namespace,
    "persistentvolumeclaims": pvc,
    "secrets": secret,
    r.PRIORITYCLASSES.key: priority_class,
    "limitranges": limit_range,
    r.MUTATING_WEBHOOKS.key: mutating_webhooks,
    r.VALIDATING_WEBHOOKS.key: validating_webhooks,
}

# What a create does to the status of a new object (PrepareForCreate), by resource key.
CREATE_PREPARERS: dict[str, Callable[[Obj], None]] = {
    r.PODS.key: prepare_pod_create,
    r.NAMESPACES.key: prepare_namespace_create,
    r.PDBS.key: prepare_pdb_create,
    "persistentvolumeclaims": prepare_pvc_create,
    r.DEPLOYMENTS.key: _reset_status,
    r.REPLICASETS.key: _reset_status,
    r.STATEFULSETS.key: _reset_status,
    r.DAEMONSETS.key: _reset_status,
    r.JOBS.key: _reset_status,
}


def apply_defaults(rt: ResourceType, obj: Obj) -> None:
    """Fill the defaults of `obj` (a copy the caller owns) for its resource type."""
    defaulter = DEFAULTERS.get(rt.key)
    if defaulter is not None:
        defaulter(obj)


def prepare_create(rt: ResourceType, obj: Obj) -> None:
    """Defaults, then what the API server sets on every new object of this type."""
    apply_defaults(rt, obj)
    preparer = CREATE_PREPARERS.get(rt.key)
    if preparer is not None:
        preparer(obj)


class ServiceAllocator:
    """Fake cluster IPs from 10.96.0.0/12 and node ports from 30000-32767, never reused."""

    def __init__(self) -> None:
        self._next_ip = 10
        self._next_port = NODE_PORT_RANGE.start

    def cluster_ip(self) -> str:
        self._next_ip += 1
        return str(SERVICE_CIDR.network_address + self._next_ip)

    def node_port(self) -> int:
        port = self._next_port
        self._next_port = port + 1 if port + 1 < NODE_PORT_RANGE.stop else NODE_PORT_RANGE.start
        return port

    @staticmethod
    def keep_allocated(obj: Obj, old: Obj) -> None:
        """An update that leaves clusterIP(s) or node ports out keeps the allocated ones (as upstream)."""
        spec, old_spec = obj.setdefault("spec", {}), old.get("spec") or {}
        if spec.get("type", "ClusterIP") == "ExternalName":
            return
        for field in ("clusterIP", "clusterIPs"):
            if not spec.get(field) and old_spec.get(field):
                spec[field] = old_spec[field]
        old_ports = {(p.get("port"), p.get("protocol", "TCP")): p for p in old_spec.get("ports") or []}
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            for port in spec.get("ports") or []:
                before = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
                if isinstance(port, dict) and not port.get("nodePort") and before and before.get("nodePort"):
                    port["nodePort"] = before["nodePort"]

    def allocate(self, obj: Obj) -> None:
        """Fill clusterIP(s) and node ports of a new Service."""
        spec = obj.setdefault("spec", {})
        kind = spec.get("type", "ClusterIP")
        if kind == "ExternalName":
            return
        if not spec.get("clusterIP"):
            spec["clusterIP"] = self.cluster_ip()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if kind in ("NodePort", "LoadBalancer"):
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    port["nodePort"] = self.node_port()
        obj["status"] = {"loadBalancer": {}}


JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_CONTROLLER_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"


def job_selector(obj: Obj, uid: str) -> None:
    """A new Job's generated selector and template labels (unless `spec.manualSelector`)."""
    spec = obj.setdefault("spec", {})
    if spec.get("manualSelector"):
        return
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec["selector"] = {"matchLabels": {JOB_CONTROLLER_UID_LABEL: uid}}
    template = spec.setdefault("template", {})
    template_md = template.setdefault("metadata", {})
    template_labels = template_md.setdefault("labels", {})
    template_labels[JOB_CONTROLLER_UID_LABEL] = uid
    template_labels[JOB_NAME_LABEL] = name
    template_labels[LEGACY_JOB_CONTROLLER_UID_LABEL] = uid
    template_labels[LEGACY_JOB_NAME_LABEL] = name
