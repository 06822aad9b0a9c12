"""Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`).

kubectl sends protobuf for the objects its own commands build (`kubectl create configmap|secret|
namespace|deployment|job|serviceaccount|pdb|priorityclass`, `kubectl auth can-i|whoami`).
This decodes those kinds into the JSON form, using the field numbers of upstream's
`generated.proto` files for the messages involved.

Go's protobuf marshalling writes every non-pointer field, zero values included; they are dropped
here as JSON's `omitempty` would (fields that are pointers upstream, such as `replicas`, keep an
explicit zero). A field this table does not know is accepted only when it carries a zero value:
anything else is refused (415) rather than silently lost.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from shipshape.kube import errors
from shipshape.kube.clock import rfc3339

MAGIC = b"k8s\x00"


@dataclass(frozen=True, slots=True)
class F:
    """One field: its JSON name, its type, whether it repeats, whether a zero value is kept."""

    name: str
    type: str  # string|int|bool|bytes|map|map_bytes|map_quantity|time|intorstr|quantity|ignore|<message>
    repeated: bool = False
    keep_zero: bool = False


Schema = dict[int, F]

_META: Schema = {
    1: F("name", "string"),
    2: F("generateName", "string"),
    3: F("namespace", "string"),
    4: F("selfLink", "ignore"),
    5: F("uid", "string"),
    6: F("resourceVersion", "string"),
    7: F("generation", "int"),
    8: F("creationTimestamp", "time"),
    9: F("deletionTimestamp", "time"),
    10: F("deletionGracePeriodSeconds", "int"),
    11: F("labels", "map"),
    12: F("annotations", "map"),
    13: F("ownerReferences", "OwnerReference", repeated=True),
    14: F("finalizers", "string", repeated=True),
    17: F("managedFields", "ignore", repeated=True),
}

MESSAGES: dict[str, Schema] = {
    "ObjectMeta": _META,
    "OwnerReference": {
        1: F("kind", "string"),
        3: F("name", "string"),
        4: F("uid", "string"),
        5: F("apiVersion", "string"),
        6: F("controller", "bool", keep_zero=True),
        7: F("blockOwnerDeletion", "bool", keep_zero=True),
    },
    "LabelSelector": {
        1: F("matchLabels", "map"),
        2: F("matchExpressions", "LabelSelectorRequirement", repeated=True),
    },
    "LabelSelectorRequirement": {
        1: F("key", "string"),
        2: F("operator", "string"),
        3: F("values", "string", repeated=True),
    },
    "DeleteOptions": {
        1: F("gracePeriodSeconds", "int", keep_zero=True),
        2: F("preconditions", "Preconditions"),
        3: F("orphanDependents", "bool", keep_zero=True),
        4: F("propagationPolicy", "string"),
        5: F("dryRun", "string", repeated=True),
    },
    "Preconditions": {1: F("uid", "string"), 2: F("resourceVersion", "string")},
    # core/v1
    "ConfigMap": {
        1: F("metadata", "ObjectMeta"),
        2: F("data", "map"),
        3: F("binaryData", "map_bytes"),
        4: F("immutable", "bool", keep_zero=True),
    },
    "Secret": {
        1: F("metadata", "ObjectMeta"),
        2: F("data", "map_bytes"),
        3: F("type", "string"),
        4: F("stringData", "map"),
        5: F("immutable", "bool", keep_zero=True),
    },
    "Namespace": {
        1: F("metadata", "ObjectMeta"),
        2: F("spec", "NamespaceSpec"),
        3: F("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: F("finalizers", "string", repeated=True)},
    "NamespaceStatus": {1: F("phase", "string")},
    "ServiceAccount": {
        1: F("metadata", "ObjectMeta"),
        2: F("secrets", "ObjectReference", repeated=True),
        3: F("imagePullSecrets", "LocalObjectReference", repeated=True),
        4: F("automountServiceAccountToken", "bool", keep_zero=True),
    },
    "ObjectReference": {
        1: F("kind", "string"),
        2: F("namespace", "string"),
        3: F("name", "string"),
        4: F("uid", "string"),
        5: F("apiVersion", "string"),
        6: F("resourceVersion", "string"),
        7: F("fieldPath", "string"),
    },
    "LocalObjectReference": {1: F("name", "string")},
    "PodTemplateSpec": {1: F("metadata", "ObjectMeta"), 2: F("spec", "PodSpec")},
    "PodSpec": {
        2: F("containers", "Container", repeated=True),
        3: F("restartPolicy", "string"),
        4: F("terminationGracePeriodSeconds", "int", keep_zero=True),
        5: F("activeDeadlineSeconds", "int", keep_zero=True),
        6: F("dnsPolicy", "string"),
        7: F("nodeSelector", "map"),
        8: F("serviceAccountName", "string"),
        9: F("serviceAccount", "string"),
        10: F("nodeName", "string"),
        11: F("hostNetwork", "bool"),
        12: F("hostPID", "bool"),
        13: F("hostIPC", "bool"),
        15: F("imagePullSecrets", "LocalObjectReference", repeated=True),
        16: F("hostname", "string"),
        17: F("subdomain", "string"),
        19: F("schedulerName", "string"),
        20: F("initContainers", "Container", repeated=True),
        22: F("tolerations", "Toleration", repeated=True),
        24: F("priorityClassName", "string"),
    },
    "Container": {
        1: F("name", "string"),
        2: F("image", "string"),
        3: F("command", "string", repeated=True),
        4: F("args", "string", repeated=True),
        5: F("workingDir", "string"),
        6: F("ports", "ContainerPort", repeated=True),
        7: F("env", "EnvVar", repeated=True),
        8: F("resources", "ResourceRequirements"),
        13: F("terminationMessagePath", "string"),
        14: F("imagePullPolicy", "string"),
        16: F("stdin", "bool"),
        17: F("stdinOnce", "bool"),
        18: F("tty", "bool"),
        20: F("terminationMessagePolicy", "string"),
    },
    "ContainerPort": {
        1: F("name", "string"),
        2: F("hostPort", "int"),
        3: F("containerPort", "int"),
        4: F("protocol", "string"),
        5: F("hostIP", "string"),
    },
    "EnvVar": {1: F("name", "string"), 2: F("value", "string")},
    "ResourceRequirements": {1: F("limits", "map_quantity"), 2: F("requests", "map_quantity")},
    "Toleration": {
        1: F("key", "string"),
        2: F("operator", "string"),
        3: F("value", "string"),
        4: F("effect", "string"),
        5: F("tolerationSeconds", "int", keep_zero=True),
    },
    # apps/v1
    "Deployment": {
        1: F("metadata", "ObjectMeta"),
        2: F("spec", "DeploymentSpec"),
        3: F("status", "ignore"),
    },
    "DeploymentSpec": {
        1: F("replicas", "int", keep_zero=True),
        2: F("selector", "LabelSelector"),
        3: F("template", "PodTemplateSpec"),
        4: F("strategy", "DeploymentStrategy"),
        5: F("minReadySeconds", "int"),
        6: F("revisionHistoryLimit", "int", keep_zero=True),
        7: F("paused", "bool"),
        9: F("progressDeadlineSeconds", "int", keep_zero=True),
    },
    "DeploymentStrategy": {1: F("type", "string"), 2: F("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {1: F("maxUnavailable", "intorstr"), 2: F("maxSurge", "intorstr")},
    # batch/v1
    "Job": {1: F("metadata", "ObjectMeta"), 2: F("spec", "JobSpec"), 3: F("status", "ignore")},
    "JobSpec": {
        1: F("parallelism", "int", keep_zero=True),
        2: F("completions", "int", keep_zero=True),
        3: F("activeDeadlineSeconds", "int", keep_zero=True),
        4: F("selector", "LabelSelector"),
        5: F("manualSelector", "bool", keep_zero=True),
        6: F("template", "PodTemplateSpec"),
        7: F("backoffLimit", "int", keep_zero=True),
        8: F("ttlSecondsAfterFinished", "int", keep_zero=True),
        9: F("completionMode", "string"),
        10: F("suspend", "bool", keep_zero=True),
    },
    # policy/v1
    "PodDisruptionBudget": {
        1: F("metadata", "ObjectMeta"),
        2: F("spec", "PodDisruptionBudgetSpec"),
        3: F("status", "ignore"),
    },
    "PodDisruptionBudgetSpec": {
        1: F("minAvailable", "intorstr"),
        2: F("selector", "LabelSelector"),
        3: F("maxUnavailable", "intorstr"),
        4: F("unhealthyPodEvictionPolicy", "string"),
    },
    "Eviction": {1: F("metadata", "ObjectMeta"), 2: F("deleteOptions", "DeleteOptions")},
    # authorization.k8s.io/v1, authentication.k8s.io/v1 (kubectl auth can-i / whoami)
    "SelfSubjectAccessReview": {
        1: F("metadata", "ObjectMeta"),
        2: F("spec", "SelfSubjectAccessReviewSpec"),
        3: F("status", "ignore"),
    },
    "SelfSubjectAccessReviewSpec": {
        1: F("resourceAttributes", "ResourceAttributes"),
        2: F("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: F("namespace", "string"),
        2: F("verb", "string"),
        3: F("group", "string"),
        4: F("version", "string"),
        5: F("resource", "string"),
        6: F("subresource", "string"),
        7: F("name", "string"),
    },
    "NonResourceAttributes": {1: F("path", "string"), 2: F("verb", "string")},
    "SelfSubjectRulesReview": {
        1: F("metadata", "ObjectMeta"),
        2: F("spec", "SelfSubjectRulesReviewSpec"),
        3: F("status", "ignore"),
    },
    "SelfSubjectRulesReviewSpec": {1: F("namespace", "string")},
    "SelfSubjectReview": {1: F("metadata", "ObjectMeta"), 2: F("status", "ignore")},
    # scheduling.k8s.io/v1
    "PriorityClass": {
        1: F("metadata", "ObjectMeta"),
        2: F("value", "int", keep_zero=True),
        3: F("globalDefault", "bool"),
        4: F("description", "string"),
        5: F("preemptionPolicy", "string"),
    },
}

# Top-level kinds this server decodes, by (apiVersion, kind).
KINDS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "Namespace"): "Namespace",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("apps/v1", "Deployment"): "Deployment",
    ("batch/v1", "Job"): "Job",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("policy/v1", "Eviction"): "Eviction",
    ("scheduling.k8s.io/v1", "PriorityClass"): "PriorityClass",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
}


class ProtobufError(errors.BadRequest):
    """A body that is not valid Kubernetes protobuf."""


def _unsupported(what: str) -> errors.UnsupportedMediaType:
    return errors.UnsupportedMediaType(
        f"this server decodes protobuf only for some kinds and fields and does not support {what}; "
        "send the object as application/json"
    )


# ---- wire format ---------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated protobuf varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("protobuf varint too long")


def wire_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) triples of one message."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated protobuf field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported protobuf wire type {wire}")
        if number == 0:
            raise ProtobufError("protobuf field number 0")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _string(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a length-delimited protobuf field")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise ProtobufError("protobuf string field is not UTF-8") from None


def _map_entry(value: int | bytes) -> tuple[str, int | bytes]:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a protobuf map entry")
    key = ""
    val: int | bytes = b""
    for number, _, item in wire_fields(value):
        if number == 1:
            key = _string(item)
        elif number == 2:
            val = item
    return key, val


def _is_zero(value: int | bytes) -> bool:
    return value == 0 or value == b""


def _scalar(field: F, value: int | bytes) -> Any:
    kind = field.type
    if kind == "string":
        return _string(value)
    if kind == "bytes":
        if not isinstance(value, bytes):
            raise ProtobufError("expected bytes")
        return base64.b64encode(value).decode()
    if kind == "int":
        if not isinstance(value, int):
            raise ProtobufError(f"expected a varint for {field.name}")
        return _signed(value)
    if kind == "bool":
        if not isinstance(value, int):
            raise ProtobufError(f"expected a varint for {field.name}")
        return bool(value)
    if not isinstance(value, bytes):
        raise ProtobufError(f"expected a message for {field.name}")
    if kind == "time":
        seconds = nanos = 0
        for number, _, item in wire_fields(value):
            if number == 1 and isinstance(item, int):
                seconds = _signed(item)
            elif number == 2 and isinstance(item, int):
                nanos = item
        return rfc3339(seconds + nanos / 1e9) if seconds else None
    if kind == "quantity":
        for number, _, item in wire_fields(value):
            if number == 1:
                return _string(item)
        return None
    if kind == "intorstr":
        parts: dict[int, int | bytes] = {number: item for number, _, item in wire_fields(value)}
        if parts.get(1, 0) == 1:
            return _string(parts.get(3, b""))
        raw = parts.get(2, 0)
        return _signed(raw) if isinstance(raw, int) else None
    return decode_message(kind, value)


def decode_message(message: str, data: bytes) -> dict[str, Any]:
    schema = MESSAGES[message]
    out: dict[str, Any] = {}
    for number, _, value in wire_fields(data):
        field = schema.get(number)
        if field is None:
            if _is_zero(value):
                continue
            raise _unsupported(f"field {number} of {message}")
        if field.type == "ignore":
            continue
        if field.type in ("map", "map_bytes", "map_quantity"):
            key, raw = _map_entry(value)
            entries = out.setdefault(field.name, {})
            if field.type == "map":
                entries[key] = _string(raw)
            elif field.type == "map_bytes":
                entries[key] = base64.b64encode(raw if isinstance(raw, bytes) else b"").decode()
            else:
                entries[key] = _scalar(F(field.name, "quantity"), raw)
            continue
        if field.repeated:
            out.setdefault(field.name, []).append(_scalar(field, value))
            continue
        decoded = _scalar(field, value)
        if decoded in ("", 0, False, None, {}) and not (field.keep_zero and decoded is not None):
            continue
        out[field.name] = decoded
    return out


def decode(raw: bytes) -> dict[str, Any]:
    """A `k8s\\x00`-prefixed protobuf body as a JSON object (apiVersion and kind included)."""
    if not raw.startswith(MAGIC):
        raise ProtobufError("the protobuf body does not start with the Kubernetes magic number")
    api_version = kind = ""
    payload = b""
    for number, _, value in wire_fields(raw[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for sub_number, _, item in wire_fields(value):
                if sub_number == 1:
                    api_version = _string(item)
                elif sub_number == 2:
                    kind = _string(item)
        elif number == 2 and isinstance(value, bytes):
            payload = value
        elif number == 3 and value:
            raise _unsupported(f"content encoding {_string(value)!r}")
    message = KINDS.get((api_version, kind))
    if message is None:
        raise _unsupported(f"{kind or 'this kind'} ({api_version or 'no apiVersion'}) in protobuf")
    return {"apiVersion": api_version, "kind": kind, **decode_message(message, payload)}
