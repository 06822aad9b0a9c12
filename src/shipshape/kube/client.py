"""The one place that talks to a Kubernetes API server through the official `kubernetes` client.

Objects come back as the API's JSON (plain dicts, camelCase field names), not as the client's
model classes, so the same analyzers run on live clusters, snapshot files and the emulator.
Errors are translated to `KubeClientError`; the client's own exceptions do not leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

Obj = dict[str, Any]

PAGE_SIZE = 500


class KubeClientError(RuntimeError):
    """The API server could not be reached or refused the request."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


# Connections one API client keeps per host (urllib3's pool; the client's default is 4 x CPUs).
CONNECTIONS = 32


def load_api_client(kubeconfig: Path | None = None, context: str | None = None) -> k8s.ApiClient:
    """An API client from a kubeconfig file; without one, the in-cluster service account, then
    the default kubeconfig (~/.kube/config or $KUBECONFIG)."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig is not None:
            if not kubeconfig.is_file():
                raise KubeClientError(f"kubeconfig {kubeconfig} does not exist")
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), context=context, client_configuration=configuration
            )
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except ConfigException:
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=context, client_configuration=configuration
                )
    except ConfigException as error:
        raise KubeClientError(f"cannot load the Kubernetes configuration: {_one_line(error)}") from error
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, IndexError) as error:
        # The client reads the YAML with no checks: a file that is not a kubeconfig (or not YAML)
        # surfaces as whatever its code tripped on. UnicodeDecodeError is a ValueError.
        where = kubeconfig or "the default kubeconfig"
        raise KubeClientError(f"{where} is not a valid kubeconfig: {_one_line(error)}") from error
    # One client serves many threads (an informer per kind holds a watch open): a pool smaller than
    # that discards connections and warns on every request.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, CONNECTIONS)
    return k8s.ApiClient(configuration)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def unreachable(error: BaseException) -> str:
    """One line for a connection failure: `cannot reach the API server at URL: reason`."""
    pool = getattr(error, "pool", None)
    where = f" at {pool.scheme}://{pool.host}:{pool.port}" if pool is not None else ""
    reason: BaseException | None = getattr(error, "reason", None) or error
    text = _one_line(reason) if reason is not None else _one_line(error)
    errno = re.search(r"\[Errno -?\d+\] ([^\]\)\"']+)", text)
    if errno:
        text = errno.group(1).strip().lower()
    elif "CERTIFICATE_VERIFY_FAILED" in text:
        text = "its TLS certificate is not trusted (certificate verify failed)"
    return f"cannot reach the API server{where}: {text}"


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    try:
        response = function(*args, _preload_content=False, **kwargs)
    except k8s.ApiException as error:
        raise KubeClientError(
            f"API request failed: {error.status} {error.reason}", status=error.status
        ) from error
    except OSError as error:  # connection refused, DNS, TLS
        raise KubeClientError(unreachable(error)) from error
    except Exception as error:  # urllib3's errors do not share a base class with OSError
        if type(error).__module__.startswith("urllib3"):
            raise KubeClientError(unreachable(error)) from error
        raise
    body = json.loads(response.data)
    if not isinstance(body, dict):
        raise KubeClientError("the API server answered with something other than a JSON object")
    return body


def server_version(api: k8s.ApiClient) -> str:
    """The API server's `gitVersion` (`GET /version`): a cheap check that it answers."""
    body = _call(k8s.VersionApi(api).get_code)
    return str(body.get("gitVersion") or "")


def _paged(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Obj]:
    token: str | None = None
    while True:
        extra: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            extra["_continue"] = token
        body = _call(function, *args, **kwargs, **extra)
        yield from body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


class WatchExpired(KubeClientError):
    """410 Gone: the resourceVersion a watch started from is too old; list again."""


# What `list_versioned` and `watch` read, cluster-wide.
_LISTS: dict[str, Callable[[k8s.CoreV1Api], Callable[..., Any]]] = {
    "pods": lambda core: core.list_pod_for_all_namespaces,
    "events": lambda core: core.list_event_for_all_namespaces,
    "nodes": lambda core: core.list_node,
}
WATCH_SECONDS = 60


def _list_function(api: k8s.ApiClient, kind: str) -> Callable[..., Any]:
    if kind not in _LISTS:
        raise ValueError(f"cannot list {kind!r}: one of {', '.join(_LISTS)}")
    return _LISTS[kind](k8s.CoreV1Api(api))


def list_versioned(api: k8s.ApiClient, kind: str) -> tuple[list[Obj], str]:
    """Every object of `kind` ("pods", "events", "nodes"), paged, and the list's resourceVersion to
    watch from."""
    function = _list_function(api, kind)
    items: list[Obj] = []
    token: str | None = None
    while True:
        extra: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            extra["_continue"] = token
        body = _call(function, **extra)
        items.extend(body.get("items") or [])
        metadata = body.get("metadata") or {}
        token = metadata.get("continue")
        if not token:
            return items, str(metadata.get("resourceVersion") or "")


def watch(
    api: k8s.ApiClient, kind: str, resource_version: str, *, timeout_seconds: int = WATCH_SECONDS
) -> Iterator[tuple[str, Obj]]:
    """(type, object) of each change to `kind` after `resource_version`, bookmarks included, until the
    server ends the watch (after `timeout_seconds`). Raises WatchExpired on 410 Gone, whether the
    server answers it as the response's status or as an ERROR event in the stream."""
    try:
        response = _list_function(api, kind)(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(10, timeout_seconds + 30),
        )
    except k8s.ApiException as error:
        if error.status == 410:
            raise WatchExpired(f"watch of {kind} expired: {error.reason}", status=410) from error
        raise KubeClientError(
            f"watch of {kind} failed: {error.status} {error.reason}", status=error.status
        ) from error
    except OSError as error:
        raise KubeClientError(f"cannot reach the API server: {error}") from error
    try:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if not line.strip():
                continue
            event = json.loads(line)
            if not isinstance(event, dict):
                continue
            change, obj = str(event.get("type") or ""), event.get("object") or {}
            if change == "ERROR":
                if obj.get("code") == 410:
                    raise WatchExpired(f"watch of {kind} expired: {obj.get('message')}", status=410)
                raise KubeClientError(f"watch of {kind} failed: {obj.get('message')}", status=obj.get("code"))
            yield change, obj
    except OSError as error:
        raise KubeClientError(f"the watch of {kind} broke: {error}") from error
    except Exception as error:  # urllib3's errors do not share a base class with OSError
        if type(error).__module__.startswith("urllib3"):
            raise KubeClientError(f"the watch of {kind} broke: {error}") from error
        raise
    finally:
        response.release_conn()


def list_pods(api: k8s.ApiClient, namespace: str | None = None) -> list[Obj]:
    core = k8s.CoreV1Api(api)
    if namespace:
        return list(_paged(core.list_namespaced_pod, namespace))
    return list(_paged(core.list_pod_for_all_namespaces))


def list_events(api: k8s.ApiClient, namespace: str | None = None) -> list[Obj]:
    """core/v1 Events (the view in which kubelet and scheduler events both appear)."""
    core = k8s.CoreV1Api(api)
    if namespace:
        return list(_paged(core.list_namespaced_event, namespace))
    return list(_paged(core.list_event_for_all_namespaces))


def list_nodes(api: k8s.ApiClient) -> list[Obj]:
    return list(_paged(k8s.CoreV1Api(api).list_node))


def list_webhook_configurations(api: k8s.ApiClient) -> list[Obj]:
    """Mutating then Validating webhook configurations, each with its `kind` set (list items carry
    none)."""
    registration = k8s.AdmissionregistrationV1Api(api)
    found: list[Obj] = []
    for kind, function in (
        ("MutatingWebhookConfiguration", registration.list_mutating_webhook_configuration),
        ("ValidatingWebhookConfiguration", registration.list_validating_webhook_configuration),
    ):
        found.extend({**item, "kind": kind} for item in _paged(function))
    return found


def annotate_node(api: k8s.ApiClient, name: str, annotations: Mapping[str, str | None]) -> Obj:
    """Merge-patch annotations onto a node (None removes one)."""
    core = k8s.CoreV1Api(api)
    body = {"metadata": {"annotations": dict(annotations)}}
    return _call(core.patch_node, name, body, _content_type="application/merge-patch+json")


def list_deployments(api: k8s.ApiClient) -> list[Obj]:
    return list(_paged(k8s.AppsV1Api(api).list_deployment_for_all_namespaces))


def list_statefulsets(api: k8s.ApiClient) -> list[Obj]:
    return list(_paged(k8s.AppsV1Api(api).list_stateful_set_for_all_namespaces))


def list_priority_classes(api: k8s.ApiClient) -> list[Obj]:
    return list(_paged(k8s.SchedulingV1Api(api).list_priority_class))


def list_horizontal_pod_autoscalers(api: k8s.ApiClient) -> list[Obj]:
    """autoscaling/v2 HPAs of every namespace."""
    return list(_paged(k8s.AutoscalingV2Api(api).list_horizontal_pod_autoscaler_for_all_namespaces))


def list_resource_metrics(api: k8s.ApiClient, plural: str) -> list[Obj]:
    """metrics.k8s.io/v1beta1 `pods` or `nodes` (PodMetrics, NodeMetrics), as metrics-server serves them."""
    custom = k8s.CustomObjectsApi(api)
    return list(
        _call(custom.list_cluster_custom_object, "metrics.k8s.io", "v1beta1", plural).get("items") or []
    )


def get_node(api: k8s.ApiClient, name: str) -> Obj:
    return _call(k8s.CoreV1Api(api).read_node, name)


def patch_node(api: k8s.ApiClient, name: str, body: Mapping[str, Any]) -> Obj:
    """A JSON merge patch of a node (a `metadata.resourceVersion` in it makes it conditional: 409 when
    the node changed meanwhile)."""
    core = k8s.CoreV1Api(api)
    return _call(core.patch_node, name, dict(body), _content_type="application/merge-patch+json")


def patch_node_status(api: k8s.ApiClient, name: str, body: Mapping[str, Any]) -> Obj:
    """A strategic merge patch of a node's status (conditions merge by type)."""
    core = k8s.CoreV1Api(api)
    return _call(
        core.patch_node_status, name, dict(body), _content_type="application/strategic-merge-patch+json"
    )


def create_event(api: k8s.ApiClient, namespace: str, body: Mapping[str, Any]) -> Obj:
    """Create a core/v1 Event (409 when one of that name exists)."""
    return _call(k8s.CoreV1Api(api).create_namespaced_event, namespace, dict(body))
