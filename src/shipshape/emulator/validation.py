"""Validation of the built-in kinds with upstream field paths and messages (Kubernetes v1.32).

`validate(rt, obj, old)` returns the field errors as (field, reason, message) tuples, the form
`errors.Invalid` takes; an empty list means valid. `check_decodable` raises the 400 the API
server answers for a body it cannot even decode (a malformed quantity). Pure functions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

from shipshape.emulator import goformat
from shipshape.emulator import resources as r
from shipshape.emulator.resources import ResourceType
from shipshape.kube import errors, quantity

Obj = dict[str, Any]
Cause = tuple[str, str, str]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PERCENT = re.compile(r"^[0-9]+%$")

MSG_DNS1123_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
MSG_DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
MSG_DNS1035_LABEL = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
MSG_QUALIFIED_NAME = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
MSG_LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MSG_POD_UPDATE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
MSG_STS_UPDATE = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _show(value: Any) -> str:
    """A bad value in a message, as upstream's `field.Error` prints it (see `goformat.value`)."""
    return goformat.value(value)


class FieldErrors:
    """Collects field errors with the reason types and message prefixes of upstream `field.Error`."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def required(self, path: str, detail: str = "") -> None:
        self.causes.append((path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else "")))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.causes.append((path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {detail}"))

    def duplicate(self, path: str, value: Any) -> None:
        self.causes.append((path, "FieldValueDuplicate", f"Duplicate value: {_show(value)}"))

    def not_found(self, path: str, value: Any) -> None:
        self.causes.append((path, "FieldValueNotFound", f"Not found: {_show(value)}"))

    def not_supported(self, path: str, value: Any, supported: Iterable[str]) -> None:
        listed = ", ".join(f'"{s}"' for s in supported)
        self.causes.append(
            (path, "FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {listed}")
        )

    def forbidden(self, path: str, detail: str) -> None:
        self.causes.append((path, "FieldValueForbidden", f"Forbidden: {detail}"))

    def too_long(self, path: str, limit: int) -> None:
        self.causes.append((path, "FieldValueTooLong", f"Too long: may not be more than {limit} bytes"))


# ---- decoding ------------------------------------------------------------------------------------


# The shape the API server's typed decoding imposes on the fields the emulator reads: "object",
# "array" (of objects when the item shape is given) or "map" (of strings), by field path pattern.
_CONTAINER_SHAPE: dict[str, Any] = {
    "resources": ("object", {"requests": "object", "limits": "object"}),
    "ports": ("array", "object"),
    "env": ("array", "object"),
    "envFrom": ("array", "object"),
    "volumeMounts": ("array", "object"),
}
_POD_SPEC_SHAPE: dict[str, Any] = {
    "containers": ("array", _CONTAINER_SHAPE),
    "initContainers": ("array", _CONTAINER_SHAPE),
    "ephemeralContainers": ("array", _CONTAINER_SHAPE),
    "volumes": ("array", "object"),
    "tolerations": ("array", "object"),
    "nodeSelector": "map",
    "affinity": "object",
    "topologySpreadConstraints": ("array", "object"),
}
_META_SHAPE: dict[str, Any] = {"labels": "map", "annotations": "map", "ownerReferences": ("array", "object")}
_TEMPLATE_SHAPE: dict[str, Any] = {"metadata": ("object", _META_SHAPE), "spec": ("object", _POD_SPEC_SHAPE)}
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), "value")


def _check_shape(rt: ResourceType, path: str, value: Any, shape: Any) -> None:
    """Raise the 400 upstream's decoder gives when a field has the wrong JSON type."""
    if value is None:
        return
    kind, inner = shape if isinstance(shape, tuple) else (shape, None)
    expected = {"object": dict, "map": dict, "array": list}[kind]
    if not isinstance(value, expected) or (
        kind == "map" and not all(isinstance(v, str) for v in value.values())
    ):
        wanted = {"object": "struct", "map": "map[string]string", "array": "array"}[kind]
        shown = _json_type(value) if kind != "map" or not isinstance(value, dict) else "non-string value"
        raise errors.BadRequest(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: json: cannot unmarshal '
            f"{shown} into Go struct field {rt.kind}.{path} of type {wanted}"
        )
    if kind == "array" and inner is not None:
        for item in value:
            _check_shape(rt, path, item, ("object", inner) if isinstance(inner, dict) else inner)
    elif kind == "object" and isinstance(inner, dict):
        for field, field_shape in inner.items():
            _check_shape(rt, f"{path}.{field}", value.get(field), field_shape)


def _pod_specs(rt: ResourceType, obj: Obj) -> list[tuple[str, Obj]]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if rt is r.PODS:
        return [("spec", spec)]
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        return [("spec.template.spec", template["spec"])]
    return []


def check_decodable(rt: ResourceType, obj: Any, *, pod_spec_decodable: bool = False) -> None:
    """Raise 400 BadRequest for what upstream fails to decode: not an object, fields of the wrong
    JSON type, malformed quantities.

    `pod_spec_decodable`: `obj` is a pod whose `spec` is known to pass (`pod_spec_decodes` said so of
    that very object, which nobody changes): only the rest is checked, in the same order."""
    if not isinstance(obj, dict):
        raise errors.BadRequest(
            f"couldn't get version/kind; json parse error: json: cannot unmarshal {_json_type(obj)} "
            "into Go value of type struct"
        )
    _check_shape(rt, "metadata", obj.get("metadata"), ("object", _META_SHAPE))
    for field in ("spec", "status"):
        _check_shape(rt, field, obj.get(field), "object")
    if pod_spec_decodable and rt is r.PODS:
        return  # the spec's own checks (its shape, its quantities) are all that is left
    spec = obj.get("spec") or {}
    if rt is r.PODS:
        _check_shape(rt, "spec", spec, ("object", _POD_SPEC_SHAPE))
    elif "template" in spec:
        _check_shape(rt, "spec.template", spec.get("template"), ("object", _TEMPLATE_SHAPE))
    for _, pod_spec_obj in _pod_specs(rt, obj):
        for key in ("containers", "initContainers", "ephemeralContainers"):
            for container in pod_spec_obj.get(key) or []:
                resources = container.get("resources") or {}
                for section in ("requests", "limits"):
                    for value in (resources.get(section) or {}).values():
                        try:
                            quantity.parse_quantity(value)
                        except quantity.QuantityError as exc:
                            raise errors.BadRequest(
                                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {exc}'
                            ) from exc


def pod_spec_decodes(spec: Any) -> bool:
    """Whether a pod with this `spec` passes `check_decodable` as far as the spec goes (a dict, of the
    right shape, with quantities that parse)."""
    if not isinstance(spec, dict):
        return False
    try:
        check_decodable(r.PODS, {"spec": spec})
    except Exception:  # a 400, or whatever else the full check raises (it then raises it again)
        return False
    return True


# ---- names, labels, selectors --------------------------------------------------------------------


def _dns_label(errs: FieldErrors, path: str, value: str) -> None:
    if len(value) > 63:
        errs.invalid(path, value, "must be no more than 63 characters")
    elif not _DNS1123_LABEL.match(value):
        errs.invalid(path, value, MSG_DNS1123_LABEL)


def _dns_subdomain(errs: FieldErrors, path: str, value: str) -> None:
    if len(value) > 253:
        errs.invalid(path, value, "must be no more than 253 characters")
    elif not _DNS1123_SUBDOMAIN.match(value):
        errs.invalid(path, value, MSG_DNS1123_SUBDOMAIN)


def _dns1035_label(errs: FieldErrors, path: str, value: str) -> None:
    if len(value) > 63:
        errs.invalid(path, value, "must be no more than 63 characters")
    elif not _DNS1035_LABEL.match(value):
        errs.invalid(path, value, MSG_DNS1035_LABEL)


def _path_segment(errs: FieldErrors, path: str, value: str) -> None:
    if value in (".", ".."):
        errs.invalid(path, value, f"may not be '{value}'")
    for bad in ("/", "%"):
        if bad in value:
            errs.invalid(path, value, f"may not contain '{bad}'")


def _qualified_name(errs: FieldErrors, path: str, key: Any) -> None:
    if not isinstance(key, str) or not key:
        errs.invalid(path, key, "name part must be non-empty")
        return
    for detail in _qualified_name_problems(key):
        errs.invalid(path, key, detail)


@functools.lru_cache(maxsize=8192)
def _qualified_name_problems(key: str) -> tuple[str, ...]:
    """What is wrong with a non-empty qualified name (a label or annotation key, a topology key),
    in `_qualified_name`'s order; kept per key: every write of a pod checks the same few keys."""
    problems: list[str] = []
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        problems.append("prefix part must be non-empty")
    elif prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        problems.append("prefix part " + MSG_DNS1123_SUBDOMAIN)
    if len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        problems.append(MSG_QUALIFIED_NAME)
    return tuple(problems)


def _labels(errs: FieldErrors, path: str, labels: Any) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict):
        errs.invalid(path, labels, "must be a map of strings")
        return
    for key, value in labels.items():
        _qualified_name(errs, path, key)
        if not isinstance(value, str):
            errs.invalid(path, value, "label values must be strings")
        elif len(value) > 63:
            errs.invalid(path, value, "must be no more than 63 characters")
        elif not _LABEL_VALUE.match(value):
            errs.invalid(path, value, MSG_LABEL_VALUE)


def _annotations(errs: FieldErrors, path: str, annotations: Any) -> None:
    if annotations is None:
        return
    if not isinstance(annotations, dict):
        errs.invalid(path, annotations, "must be a map of strings")
        return
    total = 0
    for key, value in annotations.items():
        _qualified_name(errs, path, key)
        if not isinstance(value, str):
            errs.invalid(path, value, "annotation values must be strings")
            continue
        total += len(key) + len(value)
    if total > 256 * 1024:
        errs.too_long(path, 256 * 1024)


def _label_selector(errs: FieldErrors, path: str, selector: Any) -> None:
    if not isinstance(selector, dict):
        errs.invalid(path, selector, "must be a label selector object")
        return
    _labels(errs, f"{path}.matchLabels", selector.get("matchLabels"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, dict):
            errs.invalid(p, expr, "must be an object")
            continue
        op = expr.get("operator")
        if op not in _SELECTOR_OPERATORS:
            errs.invalid(f"{p}.operator", op, "not a valid selector operator")
        values = expr.get("values") or []
        if op in ("In", "NotIn") and not values:
            errs.required(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and values:
            errs.forbidden(
                f"{p}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
        _qualified_name(errs, f"{p}.key", expr.get("key"))


def _selector_value(selector: Any) -> Any:
    """A selector as upstream prints it in an error: the Go struct when it is an object."""
    return goformat.label_selector(selector) if isinstance(selector, dict) else selector


def selector_matches(selector: Obj, labels: Obj) -> bool:
    from shipshape.kube import labels as kube_labels

    try:
        return kube_labels.from_label_selector(selector).matches(labels)
    except kube_labels.SelectorError:
        return False


# ---- metadata ------------------------------------------------------------------------------------

NameCheck = Callable[[FieldErrors, str, str], None]
_NAME_CHECKS: dict[str, NameCheck] = {
    r.NAMESPACES.key: _dns_label,
    r.SERVICES.key: _dns1035_label,
    r.EVENTS.key: _path_segment,
    r.EVENTS_V1.key: _path_segment,
}


def _metadata(errs: FieldErrors, rt: ResourceType, obj: Obj) -> None:
    md = obj.get("metadata") or {}
    name = md.get("name")
    check = _NAME_CHECKS.get(rt.key, _dns_subdomain)
    if name:
        if not isinstance(name, str):
            errs.invalid("metadata.name", name, "must be a string")
        else:
            check(errs, "metadata.name", name)
    elif md.get("generateName"):
        prefix = str(md["generateName"])
        stem = prefix[:-1] if prefix.endswith("-") and check is not _path_segment else prefix
        probe = FieldErrors()
        check(probe, "metadata.generateName", stem or "a")
        errs.causes.extend(
            (field, reason, message.replace(_show(stem or "a"), _show(prefix), 1))
            for field, reason, message in probe.causes
        )
    else:
        errs.required("metadata.name", "name or generateName is required")
    if rt.namespaced and not md.get("namespace"):
        errs.required("metadata.namespace")
    _labels(errs, "metadata.labels", md.get("labels"))
    _annotations(errs, "metadata.annotations", md.get("annotations"))
    for i, ref in enumerate(md.get("ownerReferences") or []):
        p = f"metadata.ownerReferences[{i}]"
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(field):
                errs.invalid(
                    f"{p}.{field}",
                    (ref or {}).get(field, "") if isinstance(ref, dict) else ref,
                    f"{field} must not be empty",
                )
    controllers = [
        ref for ref in md.get("ownerReferences") or [] if isinstance(ref, dict) and ref.get("controller")
    ]
    if len(controllers) > 1:
        errs.invalid(
            "metadata.ownerReferences", len(controllers), "Only one reference can have Controller set to true"
        )


# ---- pods ----------------------------------------------------------------------------------------


def _container(
    errs: FieldErrors, path: str, container: Any, volumes: set[str], names: dict[str, str]
) -> None:
    if not isinstance(container, dict):
        errs.invalid(path, container, "must be an object")
        return
    name = container.get("name")
    if not name:
        errs.required(f"{path}.name")
    elif not isinstance(name, str):
        errs.invalid(f"{path}.name", name, "must be a string")
    else:
        _dns_label(errs, f"{path}.name", name)
        if name in names:
            errs.duplicate(f"{path}.name", name)
        names[name] = path
    if not container.get("image"):
        errs.required(f"{path}.image")
    policy = container.get("imagePullPolicy")
    if policy is not None and policy not in _PULL_POLICIES:
        errs.not_supported(f"{path}.imagePullPolicy", policy, _PULL_POLICIES)
    port_names: set[str] = set()
    for i, port in enumerate(container.get("ports") or []):
        p = f"{path}.ports[{i}]"
        number = port.get("containerPort") if isinstance(port, dict) else None
        if not isinstance(number, int) or isinstance(number, bool):
            errs.required(f"{p}.containerPort")
        elif not 1 <= number <= 65535:
            errs.invalid(f"{p}.containerPort", number, "must be between 1 and 65535, inclusive")
        protocol = port.get("protocol") if isinstance(port, dict) else None
        if protocol is not None and protocol not in _PROTOCOLS:
            errs.not_supported(f"{p}.protocol", protocol, _PROTOCOLS)
        port_name = port.get("name") if isinstance(port, dict) else None
        if port_name:
            if port_name in port_names:
                errs.duplicate(f"{p}.name", port_name)
            port_names.add(port_name)
    for i, env in enumerate(container.get("env") or []):
        if not isinstance(env, dict) or not env.get("name"):
            errs.required(f"{path}.env[{i}].name")
    for i, mount in enumerate(container.get("volumeMounts") or []):
        p = f"{path}.volumeMounts[{i}]"
        mount_name = mount.get("name") if isinstance(mount, dict) else None
        if not mount_name:
            errs.required(f"{p}.name")
        elif mount_name not in volumes:
            errs.not_found(f"{p}.name", mount_name)
        if not isinstance(mount, dict) or not mount.get("mountPath"):
            errs.required(f"{p}.mountPath")
    _resources(errs, f"{path}.resources", container.get("resources") or {})


_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _resources(errs: FieldErrors, path: str, resources: Obj) -> None:
    amounts: dict[str, dict[str, int]] = {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        amounts[section] = {}
        for name, value in values.items():
            p = f"{path}.{section}[{name}]"
            if name not in _CONTAINER_RESOURCES and not name.startswith("hugepages-") and "/" not in name:
                errs.invalid(p, name, "must be a standard resource type or fully qualified")
                continue
            try:
                amount = quantity.resource_amount(name, value)
            except quantity.QuantityError:
                errs.invalid(p, value, "must be a valid quantity")
                continue
            if amount < 0:
                errs.invalid(p, value, "must be greater than or equal to 0")
            amounts[section][name] = amount
    for name, request in amounts["requests"].items():
        limit = amounts["limits"].get(name)
        if limit is not None and request > limit:
            errs.invalid(
                f"{path}.requests",
                resources["requests"][name],
                f"must be less than or equal to {name} limit of {resources['limits'][name]}",
            )
        if name != "cpu" and name != "memory" and "." in name and limit is not None and request != limit:
            # Extended resources (nvidia.com/gpu, ...) cannot be overcommitted.
            errs.invalid(
                f"{path}.requests[{name}]",
                resources["requests"][name],
                f"must be equal to {name} limit of {resources['limits'][name]}",
            )


def pod_spec(errs: FieldErrors, path: str, spec: Any) -> None:
    if not isinstance(spec, dict):
        errs.required(path)
        return
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        p = f"{path}.volumes[{i}]"
        name = volume.get("name") if isinstance(volume, dict) else None
        if not name:
            errs.required(f"{p}.name")
            continue
        _dns_label(errs, f"{p}.name", str(name))
        if name in volumes:
            errs.duplicate(f"{p}.name", name)
        volumes.add(name)
    containers = spec.get("containers")
    names: dict[str, str] = {}
    if not containers:
        errs.required(f"{path}.containers")
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            _container(errs, f"{path}.{key}[{i}]", container, volumes, names)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _RESTART_POLICIES:
        errs.not_supported(f"{path}.restartPolicy", policy, _RESTART_POLICIES)
    dns = spec.get("dnsPolicy")
    if dns is not None and dns not in _DNS_POLICIES:
        errs.not_supported(f"{path}.dnsPolicy", dns, _DNS_POLICIES)
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        errs.invalid(f"{path}.activeDeadlineSeconds", deadline, "must be between 1 and 2147483647, inclusive")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and not isinstance(grace, int):
        errs.invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be an integer")
    _labels(errs, f"{path}.nodeSelector", spec.get("nodeSelector"))
    for i, toleration in enumerate(spec.get("tolerations") or []):
        _toleration(errs, f"{path}.tolerations[{i}]", toleration)
    if spec.get("affinity") is not None:
        _affinity(errs, f"{path}.affinity", spec["affinity"])
    _spread_constraints(errs, f"{path}.topologySpreadConstraints", spec.get("topologySpreadConstraints"))
    priority_class = spec.get("priorityClassName")
    if priority_class:
        _dns_subdomain(errs, f"{path}.priorityClassName", str(priority_class))
    sa = spec.get("serviceAccountName")
    if sa:
        _dns_subdomain(errs, f"{path}.serviceAccountName", str(sa))
    if spec.get("nodeName"):
        _dns_subdomain(errs, f"{path}.nodeName", str(spec["nodeName"]))


_NODE_SELECTOR_OPERATORS = ("DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn")
_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


def _node_selector_requirement(errs: FieldErrors, path: str, req: Any) -> None:
    if not isinstance(req, dict):
        errs.invalid(path, req, "must be an object")
        return
    op = req.get("operator")
    values = req.get("values") or []
    if op in ("In", "NotIn") and not values:
        errs.required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
    elif op in ("Exists", "DoesNotExist") and values:
        errs.forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            errs.required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
        elif not str(values[0]).lstrip("-").isdigit():
            errs.invalid(f"{path}.values[0]", values[0], "must be an integer")
    elif op not in _NODE_SELECTOR_OPERATORS:
        errs.invalid(f"{path}.operator", op, "not a valid selector operator")
    _qualified_name(errs, f"{path}.key", req.get("key"))


def _node_selector_term(errs: FieldErrors, path: str, term: Any) -> None:
    if not isinstance(term, dict):
        errs.invalid(path, term, "must be an object")
        return
    for j, req in enumerate(term.get("matchExpressions") or []):
        _node_selector_requirement(errs, f"{path}.matchExpressions[{j}]", req)
    for j, req in enumerate(term.get("matchFields") or []):
        p = f"{path}.matchFields[{j}]"
        if isinstance(req, dict) and req.get("key") != "metadata.name":
            errs.invalid(f"{p}.key", req.get("key"), "not a valid field selector key")
        if (
            isinstance(req, dict)
            and req.get("operator") in ("In", "NotIn")
            and len(req.get("values") or []) != 1
        ):
            errs.required(
                f"{p}.values",
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )


def _weight(errs: FieldErrors, path: str, weight: Any) -> None:
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
        errs.invalid(path, weight, "must be in the range 1-100")


def _pod_affinity_term(errs: FieldErrors, path: str, term: Any) -> None:
    if not isinstance(term, dict):
        errs.invalid(path, term, "must be an object")
        return
    if not term.get("topologyKey"):
        errs.required(f"{path}.topologyKey", "can not be empty")
    else:
        _qualified_name(errs, f"{path}.topologyKey", term["topologyKey"])
    for field in ("labelSelector", "namespaceSelector"):
        if term.get(field) is not None:
            _label_selector(errs, f"{path}.{field}", term[field])


def _affinity(errs: FieldErrors, path: str, affinity: Any) -> None:
    """Node affinity, pod affinity and anti-affinity, as a placement webhook would inject them."""
    if not isinstance(affinity, dict):
        errs.invalid(path, affinity, "must be an object")
        return
    node = affinity.get("nodeAffinity")
    if isinstance(node, dict):
        p = f"{path}.nodeAffinity"
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None:
            terms = (required or {}).get("nodeSelectorTerms") if isinstance(required, dict) else None
            rp = f"{p}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
            if not terms:
                errs.required(rp, "must have at least one node selector term")
            for i, term in enumerate(terms or []):
                _node_selector_term(errs, f"{rp}[{i}]", term)
        for i, pref in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            pp = f"{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            _weight(errs, f"{pp}.weight", (pref or {}).get("weight") if isinstance(pref, dict) else None)
            _node_selector_term(errs, f"{pp}.preference", (pref or {}).get("preference", {}))
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if not isinstance(section, dict):
            continue
        p = f"{path}.{kind}"
        for i, term in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            _pod_affinity_term(errs, f"{p}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term)
        for i, pref in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            pp = f"{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weighted = pref if isinstance(pref, dict) else {}
            _weight(errs, f"{pp}.weight", weighted.get("weight"))
            _pod_affinity_term(errs, f"{pp}.podAffinityTerm", weighted.get("podAffinityTerm"))


def _spread_constraints(errs: FieldErrors, path: str, constraints: Any) -> None:
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(constraints or []):
        p = f"{path}[{i}]"
        if not isinstance(c, dict):
            errs.invalid(p, c, "must be an object")
            continue
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew <= 0:
            errs.invalid(f"{p}.maxSkew", skew, "must be greater than zero")
        key = c.get("topologyKey")
        if not key:
            errs.required(f"{p}.topologyKey", "can not be empty")
        else:
            _qualified_name(errs, f"{p}.topologyKey", key)
        when = c.get("whenUnsatisfiable")
        if when not in _UNSATISFIABLE:
            errs.not_supported(f"{p}.whenUnsatisfiable", when, _UNSATISFIABLE)
        min_domains = c.get("minDomains")
        if min_domains is not None:
            if not isinstance(min_domains, int) or min_domains <= 0:
                errs.invalid(f"{p}.minDomains", min_domains, "must be greater than 0")
            elif when != "DoNotSchedule":
                errs.invalid(
                    f"{p}.minDomains",
                    min_domains,
                    f"can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when}",
                )
        pair = (str(key), str(when))
        if pair in seen:
            errs.duplicate(p, f"{{{key}, {when}}}")
        seen.add(pair)
        if c.get("labelSelector") is not None:
            _label_selector(errs, f"{p}.labelSelector", c["labelSelector"])
            selector_keys = set(((c.get("labelSelector") or {}).get("matchLabels") or {}).keys())
            for j, match_key in enumerate(c.get("matchLabelKeys") or []):
                if match_key in selector_keys:
                    errs.invalid(
                        f"{p}.matchLabelKeys[{j}]",
                        match_key,
                        "exists in both matchLabelKeys and labelSelector",
                    )


def _toleration(errs: FieldErrors, path: str, toleration: Any) -> None:
    if not isinstance(toleration, dict):
        errs.invalid(path, toleration, "must be an object")
        return
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key:
        _qualified_name(errs, f"{path}.key", key)
    elif operator != "Exists":
        errs.invalid(
            f"{path}.operator",
            operator,
            'operator must be Exists when `key` is empty, which means "match all values and all keys"',
        )
    if operator == "Exists" and toleration.get("value"):
        errs.invalid(
            f"{path}.operator", toleration["value"], "value must be empty when `operator` is 'Exists'"
        )
    elif operator not in ("Equal", "Exists"):
        errs.not_supported(f"{path}.operator", operator, ("Equal", "Exists"))
    seconds = toleration.get("tolerationSeconds")
    effect = toleration.get("effect") or ""
    if seconds is not None and effect != "NoExecute":
        errs.invalid(f"{path}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set")
    if effect and effect not in _TAINT_EFFECTS:
        errs.not_supported(f"{path}.effect", effect, _TAINT_EFFECTS)


def _pod(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    pod_spec(errs, "spec", obj.get("spec"))
    if old is None:
        return
    new_spec, old_spec = dict(obj.get("spec") or {}), dict(old.get("spec") or {})
    # Mutable fields are compared out; anything else that differs is forbidden.
    for key in ("containers", "initContainers"):
        news = new_spec.get(key) or []
        olds = old_spec.get(key) or []
        if key in new_spec and len(news) == len(olds):
            new_spec[key] = [
                {**n, "image": o.get("image")} if isinstance(n, dict) and isinstance(o, dict) else n
                for n, o in zip(news, olds, strict=True)
            ]
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        new_spec["tolerations"] = old_spec.get("tolerations")
        old_spec["tolerations"] = old_spec.get("tolerations")
    old_deadline = old_spec.get("activeDeadlineSeconds")
    new_deadline = new_spec.get("activeDeadlineSeconds")
    if new_deadline is not None and (old_deadline is None or new_deadline <= old_deadline):
        new_spec["activeDeadlineSeconds"] = old_deadline
    old_grace = old_spec.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and new_spec.get("terminationGracePeriodSeconds") == 1:
        new_spec["terminationGracePeriodSeconds"] = old_grace
    gates_old = old_spec.get("schedulingGates") or []
    gates_new = new_spec.get("schedulingGates") or []
    if all(g in gates_old for g in gates_new):
        new_spec["schedulingGates"] = old_spec.get("schedulingGates")
    new_spec = {k: v for k, v in new_spec.items() if v is not None}
    old_spec = {k: v for k, v in old_spec.items() if v is not None}
    if new_spec != old_spec:
        errs.forbidden("spec", MSG_POD_UPDATE)


# ---- workloads -----------------------------------------------------------------------------------


def _non_negative(errs: FieldErrors, path: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        errs.invalid(path, value, "must be an integer")
    elif value < 0:
        errs.invalid(path, value, "must be greater than or equal to 0")


def _int_or_percent(errs: FieldErrors, path: str, value: Any) -> int | None:
    """An IntOrString that must be a non-negative int or a percentage; returns its int/percent part."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            errs.invalid(path, value, "must be greater than or equal to 0")
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        percent = int(value[:-1])
        if percent > 100:
            errs.invalid(path, value, "must not be greater than 100%")
        return percent
    errs.invalid(
        path,
        value,
        "a valid percent string must be a numeric string followed by an ending '%' "
        "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
    )
    return None


def _workload(errs: FieldErrors, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.required("spec")
        return
    if rt is not r.DAEMONSETS:
        _non_negative(errs, "spec.replicas", spec.get("replicas"))
    _non_negative(errs, "spec.minReadySeconds", spec.get("minReadySeconds"))
    _non_negative(errs, "spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    selector = spec.get("selector")
    template = spec.get("template")
    template_labels = (
        ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    )
    if selector is None:
        errs.required("spec.selector")
    else:
        _label_selector(errs, "spec.selector", selector)
        if (
            isinstance(selector, dict)
            and not selector.get("matchLabels")
            and not selector.get("matchExpressions")
        ):
            errs.invalid(
                "spec.selector",
                goformat.label_selector(selector),
                f"empty selector is invalid for {rt.singular}",
            )
        elif isinstance(selector, dict) and not selector_matches(selector, template_labels or {}):
            errs.invalid(
                "spec.template.metadata.labels",
                goformat.string_map(template_labels if isinstance(template_labels, dict) else None),
                "`selector` does not match template `labels`",
            )
    if not isinstance(template, dict):
        errs.required("spec.template")
    else:
        _labels(errs, "spec.template.metadata.labels", template_labels)
        pod_spec(errs, "spec.template.spec", template.get("spec"))
        policy = (
            (template.get("spec") or {}).get("restartPolicy")
            if isinstance(template.get("spec"), dict)
            else None
        )
        if policy is not None and policy != "Always":
            errs.not_supported("spec.template.spec.restartPolicy", policy, ("Always",))
    if rt is r.DEPLOYMENTS:
        _deployment_strategy(errs, spec)
        deadline = spec.get("progressDeadlineSeconds")
        if isinstance(deadline, int) and deadline <= int(spec.get("minReadySeconds") or 0):
            errs.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
    if rt is r.STATEFULSETS:
        policy = spec.get("podManagementPolicy")
        if policy not in (None, "OrderedReady", "Parallel"):
            errs.not_supported("spec.podManagementPolicy", policy, ("OrderedReady", "Parallel"))
        strategy = (spec.get("updateStrategy") or {}).get("type")
        if strategy not in (None, "RollingUpdate", "OnDelete"):
            errs.not_supported("spec.updateStrategy.type", strategy, ("OnDelete", "RollingUpdate"))
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
        _non_negative(errs, "spec.updateStrategy.rollingUpdate.partition", partition)
    if rt is r.DAEMONSETS:
        strategy = (spec.get("updateStrategy") or {}).get("type")
        if strategy not in (None, "RollingUpdate", "OnDelete"):
            errs.not_supported("spec.updateStrategy.type", strategy, ("OnDelete", "RollingUpdate"))
    if old is not None:
        old_spec = old.get("spec") or {}
        if selector != old_spec.get("selector"):
            errs.invalid("spec.selector", _selector_value(selector), "field is immutable")
        if rt is r.STATEFULSETS:
            mutable = {
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "revisionHistoryLimit",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
            }
            if {k: v for k, v in spec.items() if k not in mutable} != {
                k: v for k, v in old_spec.items() if k not in mutable
            }:
                errs.forbidden("spec", MSG_STS_UPDATE)


def _deployment_strategy(errs: FieldErrors, spec: Obj) -> None:
    strategy = spec.get("strategy") or {}
    kind = strategy.get("type")
    if kind not in ("Recreate", "RollingUpdate"):
        errs.not_supported("spec.strategy.type", kind, ("Recreate", "RollingUpdate"))
        return
    rolling = strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            errs.forbidden(
                "spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"
            )
        return
    rolling = rolling or {}
    unavailable = _int_or_percent(
        errs, "spec.strategy.rollingUpdate.maxUnavailable", rolling.get("maxUnavailable", 0)
    )
    surge = _int_or_percent(errs, "spec.strategy.rollingUpdate.maxSurge", rolling.get("maxSurge", 0))
    if unavailable == 0 and surge == 0:
        errs.invalid(
            "spec.strategy.rollingUpdate.maxUnavailable",
            rolling.get("maxUnavailable"),
            "may not be 0 when `maxSurge` is 0",
        )


def _job(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.required("spec")
        return
    for field in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        _non_negative(errs, f"spec.{field}", spec.get(field))
    template = spec.get("template")
    if not isinstance(template, dict):
        errs.required("spec.template")
        return
    pod_spec(errs, "spec.template.spec", template.get("spec"))
    template_spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    policy = (template_spec or {}).get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        errs.not_supported("spec.template.spec.restartPolicy", policy, ("OnFailure", "Never"))
    selector = spec.get("selector")
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector is not None:
        _label_selector(errs, "spec.selector", selector)
        if isinstance(selector, dict) and not selector_matches(selector, labels):
            errs.invalid(
                "spec.template.metadata.labels",
                goformat.string_map((template.get("metadata") or {}).get("labels")),
                "`selector` does not match template `labels`",
            )
    if old is not None:
        old_spec = old.get("spec") or {}
        if selector != old_spec.get("selector"):
            errs.invalid("spec.selector", _selector_value(selector), "field is immutable")
        if spec.get("completions") != old_spec.get("completions") and spec.get("completionMode") != "Indexed":
            errs.invalid("spec.completions", spec.get("completions"), "field is immutable")
        if spec.get("template") != old_spec.get("template") and not spec.get("suspend"):
            errs.invalid("spec.template", spec.get("template"), "field is immutable")


# ---- other kinds ---------------------------------------------------------------------------------


def _service(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    spec = obj.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    types = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
    if kind not in types:
        errs.not_supported("spec.type", kind, types)
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and kind != "ExternalName" and not headless:
        errs.required("spec.ports")
    names: set[str] = set()
    for i, port in enumerate(ports):
        p = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            errs.invalid(p, port, "must be an object")
            continue
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            errs.invalid(f"{p}.port", number, "must be between 1 and 65535, inclusive")
        name = port.get("name")
        if len(ports) > 1 and not name:
            errs.required(f"{p}.name")
        elif name:
            if name in names:
                errs.duplicate(f"{p}.name", name)
            names.add(name)
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            errs.not_supported(f"{p}.protocol", protocol, _PROTOCOLS)
    _labels(errs, "spec.selector", spec.get("selector"))
    if kind == "ExternalName" and not spec.get("externalName"):
        errs.required("spec.externalName")
    if old is not None:
        old_ip = (old.get("spec") or {}).get("clusterIP")
        if old_ip and spec.get("clusterIP") not in (None, "", old_ip) and kind != "ExternalName":
            errs.invalid("spec.clusterIPs[0]", spec.get("clusterIP"), "may not change once set")


def _node(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate((obj.get("spec") or {}).get("taints") or []):
        p = f"spec.taints[{i}]"
        if not isinstance(taint, dict):
            errs.invalid(p, taint, "must be an object")
            continue
        _qualified_name(errs, f"{p}.key", taint.get("key"))
        effect = taint.get("effect")
        if effect not in _TAINT_EFFECTS:
            errs.not_supported(f"{p}.effect", effect, _TAINT_EFFECTS)
        value = taint.get("value")
        if value and not _LABEL_VALUE.match(str(value)):
            errs.invalid(f"{p}.value", value, MSG_LABEL_VALUE)
        key = (str(taint.get("key")), str(effect))
        if key in seen:
            errs.duplicate(p, f"{key[0]}:{key[1]}")
        seen.add(key)


def _pdb(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
    for field in ("minAvailable", "maxUnavailable"):
        if spec.get(field) is not None:
            _int_or_percent(errs, f"spec.{field}", spec[field])
    if spec.get("selector") is not None:
        _label_selector(errs, "spec.selector", spec["selector"])
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("IfHealthyBudget", "AlwaysAllow"):
        errs.not_supported("spec.unhealthyPodEvictionPolicy", policy, ("AlwaysAllow", "IfHealthyBudget"))


def _priority_class(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    value = obj.get("value")
    name = (obj.get("metadata") or {}).get("name", "")
    if not isinstance(value, int) or isinstance(value, bool):
        errs.required("value")
    elif value > 1_000_000_000 and not str(name).startswith("system-"):
        errs.forbidden("value", "maximum allowed value of a user defined priority is 1000000000")
    system = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
    if old is None and str(name).startswith("system-") and system.get(str(name)) != value:
        errs.forbidden("metadata.name", "priority class names with 'system-' prefix are reserved")
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        errs.not_supported("preemptionPolicy", policy, ("Never", "PreemptLowerPriority"))
    if old is not None and value != old.get("value"):
        errs.forbidden("value", "may not be changed in an update.")


def _webhook_configuration(errs: FieldErrors, obj: Obj, *, mutating: bool) -> None:
    names: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        p = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            errs.invalid(p, hook, "must be an object")
            continue
        name = hook.get("name")
        if not name:
            errs.required(f"{p}.name")
        else:
            _dns_subdomain(errs, f"{p}.name", str(name))
            if str(name).count(".") < 2:
                errs.invalid(
                    f"{p}.name", name, "should be a domain with at least three segments separated by dots"
                )
            if name in names:
                errs.duplicate(f"{p}.name", name)
            names.add(str(name))
        versions = hook.get("admissionReviewVersions")
        if not versions:
            errs.required(f"{p}.admissionReviewVersions", "must specify one of v1, v1beta1")
        elif "v1" not in versions and "v1beta1" not in versions:
            errs.invalid(f"{p}.admissionReviewVersions", versions, "must include at least one of v1, v1beta1")
        side_effects = hook.get("sideEffects")
        if side_effects not in ("None", "NoneOnDryRun"):
            if side_effects is None:
                errs.required(f"{p}.sideEffects", "must specify one of None, NoneOnDryRun")
            else:
                errs.not_supported(f"{p}.sideEffects", side_effects, ("None", "NoneOnDryRun"))
        policy = hook.get("failurePolicy")
        if policy is not None and policy not in ("Fail", "Ignore"):
            errs.not_supported(f"{p}.failurePolicy", policy, ("Fail", "Ignore"))
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
            errs.invalid(f"{p}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds")
        config = hook.get("clientConfig") or {}
        has_url, has_service = bool(config.get("url")), bool(config.get("service"))
        if has_url == has_service:
            errs.required(f"{p}.clientConfig", "exactly one of url or service is required")
        elif has_url and not str(config["url"]).startswith("https://"):
            errs.invalid(f"{p}.clientConfig.url", config["url"], "'https' is the only allowed URL scheme")
        if mutating:
            policy = hook.get("reinvocationPolicy")
            if policy is not None and policy not in ("Never", "IfNeeded"):
                errs.not_supported(f"{p}.reinvocationPolicy", policy, ("IfNeeded", "Never"))
        for j, rule in enumerate(hook.get("rules") or []):
            for k, op in enumerate((rule or {}).get("operations") or []):
                allowed = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
                if op not in allowed:
                    errs.not_supported(f"{p}.rules[{j}].operations[{k}]", op, allowed)
            scope = (rule or {}).get("scope")
            if scope is not None and scope not in ("*", "Cluster", "Namespaced"):
                errs.not_supported(f"{p}.rules[{j}].scope", scope, ("*", "Cluster", "Namespaced"))
        for selector_field in ("namespaceSelector", "objectSelector"):
            if hook.get(selector_field) is not None:
                _label_selector(errs, f"{p}.{selector_field}", hook[selector_field])


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MSG_CONFIG_KEY = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def _config_data(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    """ConfigMap and Secret keys; a key may not be in both `data` and `binaryData` (ConfigMaps)."""
    seen: set[str] = set()
    for section in ("data", "binaryData", "stringData"):
        for key in obj.get(section) or {}:
            path = f"{section}[{key}]"
            if len(key) > 253:
                errs.too_long(path, 253)
            elif not _CONFIG_KEY.match(key) or key in (".", ".."):
                errs.invalid(path, key, MSG_CONFIG_KEY)
            if section == "binaryData" and key in seen:
                errs.invalid(path, key, "duplicate of key present in data")
            seen.add(key)
    if (
        old is not None
        and old.get("immutable")
        and (obj.get("data") != old.get("data") or obj.get("binaryData") != old.get("binaryData"))
    ):
        errs.forbidden("data", "field is immutable when `immutable` is set")


MSG_PVC_UPDATE = (
    "spec is immutable after creation except resources.requests and volumeAttributesClassName "
    "for bound claims"
)
_ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")


def _pvc(errs: FieldErrors, obj: Obj, old: Obj | None) -> None:
    spec = obj.get("spec") or {}
    modes = spec.get("accessModes") or []
    if not modes:
        errs.required("spec.accessModes", "at least 1 access mode is required")
    for i, mode in enumerate(modes):
        if mode not in _ACCESS_MODES:
            errs.not_supported(f"spec.accessModes[{i}]", mode, _ACCESS_MODES)
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    amount = None if storage is None else _amount_or_none("storage", storage)
    if storage is None:
        errs.required("spec.resources[storage]")
    elif amount is None or amount <= 0:
        errs.invalid("spec.resources[storage]", storage, "must be greater than zero")
    if old is not None:
        old_spec = old.get("spec") or {}
        for field in ("accessModes", "storageClassName", "volumeMode", "selector"):
            if spec.get(field) != old_spec.get(field) and old_spec.get(field) is not None:
                errs.forbidden("spec", MSG_PVC_UPDATE)
                break


def _amount_or_none(name: str, value: Any) -> int | None:
    try:
        return quantity.resource_amount(name, value)
    except quantity.QuantityError:
        return None


Validator = Callable[[FieldErrors, Obj, "Obj | None"], None]
_VALIDATORS: dict[str, Validator] = {
    r.PODS.key: _pod,
    r.JOBS.key: _job,
    r.SERVICES.key: _service,
    r.NODES.key: _node,
    r.PDBS.key: _pdb,
    r.PRIORITYCLASSES.key: _priority_class,
    r.CONFIGMAPS.key: _config_data,
    "persistentvolumeclaims": _pvc,
    "secrets": _config_data,
    r.MUTATING_WEBHOOKS.key: lambda errs, obj, old: _webhook_configuration(errs, obj, mutating=True),
    r.VALIDATING_WEBHOOKS.key: lambda errs, obj, old: _webhook_configuration(errs, obj, mutating=False),
}
_WORKLOADS = (r.DEPLOYMENTS, r.REPLICASETS, r.STATEFULSETS, r.DAEMONSETS)


def validate(rt: ResourceType, obj: Obj, old: Obj | None = None) -> list[Cause]:
    """Field errors of a create (`old` None) or an update of the main resource."""
    errs = _metadata_errors(rt, obj, old)
    if rt in _WORKLOADS:
        _workload(errs, rt, obj, old)
    else:
        validator = _VALIDATORS.get(rt.key)
        if validator is not None:
            validator(errs, obj, old)
    return errs.causes


def _metadata_errors(rt: ResourceType, obj: Obj, old: Obj | None) -> FieldErrors:
    """The metadata's field errors, the first part of `validate`'s."""
    errs = FieldErrors()
    _metadata(errs, rt, obj)
    if old is not None:
        md, old_md = obj.get("metadata") or {}, old.get("metadata") or {}
        if md.get("name") != old_md.get("name"):
            errs.invalid("metadata.name", md.get("name"), "field is immutable")
    return errs


def validate_pod_update_same_spec(obj: Obj, old: Obj, spec_causes: Iterable[Cause]) -> list[Cause]:
    """`validate(PODS, obj, old)` for a pod update whose `spec` is the very object of `old`'s, given
    `pod_update_spec_causes` of that spec: the metadata is checked, the spec's causes are taken as
    they are (what the pod validator finds depends on the two specs alone)."""
    causes = _metadata_errors(r.PODS, obj, old).causes
    causes.extend(spec_causes)
    return causes


def pod_update_spec_causes(spec: Any) -> list[Cause]:
    """The pod validator's causes for an update that keeps `spec` (the same object before and after)."""
    errs = FieldErrors()
    _pod(errs, {"spec": spec}, {"spec": spec})
    return errs.causes


def validate_status(rt: ResourceType, obj: Obj) -> list[Cause]:
    """Field errors of a status update (only the few checks upstream makes on status)."""
    errs = FieldErrors()
    status = obj.get("status") or {}
    if rt in _WORKLOADS:
        for field in (
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "observedGeneration",
        ):
            _non_negative(errs, f"status.{field}", status.get(field))
    if rt is r.PDBS:
        for field in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
            _non_negative(errs, f"status.{field}", status.get(field))
    return errs.causes


def raise_if_invalid(rt: ResourceType, name: str, causes: list[Cause]) -> None:
    if causes:
        raise errors.Invalid(rt.kind, name, causes, rt.group)
