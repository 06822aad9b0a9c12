"""The resource types the emulator serves, with what discovery and the REST paths need to know."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for core
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "scale", "binding", "eviction", ...
    verbs: tuple[str, ...] = ALL_VERBS
    status_subresource: bool = field(default=False)
    # Stable identifier: "pods", "deployments.apps", "leases.coordination.k8s.io". Worked out once:
    # the store looks every object up by it.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.plural}.{self.group}" if self.group else self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified_plural(self) -> str:
        """As Kubernetes names it in error messages ("pods", "deployments.apps")."""
        return self.key


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool = True,
    *,
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    subresources: tuple[str, ...] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
) -> ResourceType:
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced,
        short_names,
        categories,
        subresources,
        verbs,
        status_subresource="status" in subresources,
    )


RESOURCES: tuple[ResourceType, ...] = (
    _rt("", "v1", "namespaces", "Namespace", False, short_names=("ns",), subresources=("status", "finalize")),
    _rt("", "v1", "nodes", "Node", False, short_names=("no",), subresources=("status",)),
    _rt(
        "",
        "v1",
        "pods",
        "Pod",
        short_names=("po",),
        categories=("all",),
        subresources=("status", "binding", "eviction", "log"),
    ),
    _rt("", "v1", "events", "Event", short_names=("ev",)),
    _rt("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    _rt("", "v1", "secrets", "Secret"),
    _rt("", "v1", "services", "Service", short_names=("svc",), categories=("all",), subresources=("status",)),
    _rt("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _rt("", "v1", "endpoints", "Endpoints", short_names=("ep",)),
    _rt(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        short_names=("pvc",),
        subresources=("status",),
    ),
    _rt("", "v1", "resourcequotas", "ResourceQuota", short_names=("quota",), subresources=("status",)),
    _rt("", "v1", "limitranges", "LimitRange", short_names=("limits",)),
    _rt(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        short_names=("deploy",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _rt(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        short_names=("rs",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _rt(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        short_names=("sts",),
        categories=("all",),
        subresources=("status", "scale"),
    ),
    _rt(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        short_names=("ds",),
        categories=("all",),
        subresources=("status",),
    ),
    _rt("apps", "v1", "controllerrevisions", "ControllerRevision"),
    _rt("batch", "v1", "jobs", "Job", categories=("all",), subresources=("status",)),
    _rt(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        short_names=("pdb",),
        subresources=("status",),
    ),
    _rt("coordination.k8s.io", "v1", "leases", "Lease"),
    _rt("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
    _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short_names=("pc",)),
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    _rt("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, verbs=("get", "list")),
    _rt("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", verbs=("get", "list")),
)

BY_KEY: dict[str, ResourceType] = {rt.key: rt for rt in RESOURCES}

# Short, stable names for the types the models use all the time.
NAMESPACES = BY_KEY["namespaces"]
NODES = BY_KEY["nodes"]
PODS = BY_KEY["pods"]
EVENTS = BY_KEY["events"]
CONFIGMAPS = BY_KEY["configmaps"]
SERVICES = BY_KEY["services"]
SERVICEACCOUNTS = BY_KEY["serviceaccounts"]
DEPLOYMENTS = BY_KEY["deployments.apps"]
REPLICASETS = BY_KEY["replicasets.apps"]
STATEFULSETS = BY_KEY["statefulsets.apps"]
DAEMONSETS = BY_KEY["daemonsets.apps"]
CONTROLLERREVISIONS = BY_KEY["controllerrevisions.apps"]
JOBS = BY_KEY["jobs.batch"]
PDBS = BY_KEY["poddisruptionbudgets.policy"]
LEASES = BY_KEY["leases.coordination.k8s.io"]
EVENTS_V1 = BY_KEY["events.events.k8s.io"]
PRIORITYCLASSES = BY_KEY["priorityclasses.scheduling.k8s.io"]
MUTATING_WEBHOOKS = BY_KEY["mutatingwebhookconfigurations.admissionregistration.k8s.io"]
VALIDATING_WEBHOOKS = BY_KEY["validatingwebhookconfigurations.admissionregistration.k8s.io"]
NODE_METRICS = BY_KEY["nodes.metrics.k8s.io"]
POD_METRICS = BY_KEY["pods.metrics.k8s.io"]

# Stored in the object store (metrics are computed on request, never stored).
STORED: tuple[ResourceType, ...] = tuple(rt for rt in RESOURCES if rt.group != "metrics.k8s.io")


def groups() -> dict[str, list[ResourceType]]:
    """Resources by API group/version, in discovery order."""
    out: dict[str, list[ResourceType]] = {}
    for rt in RESOURCES:
        out.setdefault(rt.api_version, []).append(rt)
    return out


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    rt = BY_KEY.get(f"{plural}.{group}" if group else plural)
    if rt is None or rt.version != version:
        return None
    return rt
