"""Admission webhooks: find the MutatingWebhookConfiguration / ValidatingWebhookConfiguration
webhooks that match a request and call them over HTTPS with an `admission.k8s.io/v1`
AdmissionReview, as kube-apiserver's webhook dispatchers do.

Matching (`matches`) is pure. Calling needs a network: a webhook's `clientConfig.url`, or its
`clientConfig.service` resolved through the Service object (there is no Service network in the
emulator): the Service's `emulator.shipshape.dev/address` annotation ("host:port") names where
the webhook really listens, and TLS is verified against the service's DNS name
(`<name>.<namespace>.svc`); an ExternalName Service resolves to its external name. A Service
without either is unreachable, as one without endpoints is upstream.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import ssl
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from cryptography import x509

from shipshape.emulator import resources as r
from shipshape.emulator.admission import DELETE, Attributes, add_warning, goerrors
from shipshape.emulator.store import Obj, Store
from shipshape.kube import errors, labels, patch

log = logging.getLogger(__name__)

SERVICE_ADDRESS_ANNOTATION = "emulator.shipshape.dev/address"
MUTATING, VALIDATING = "mutating", "validating"
DEFAULT_TIMEOUT_SECONDS = 10
_EXEMPT = (r.MUTATING_WEBHOOKS, r.VALIDATING_WEBHOOKS)


class WebhookDenied(errors.ApiError):
    """A webhook's `allowed: false`, with the code and reason the webhook chose (at least 400)."""

    def __init__(
        self, message: str, *, code: int, reason: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, details=details)
        self.code = code
        self.reason = reason


class CallFailed(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides what follows)."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """One webhook of a configuration, in dispatch order."""

    configuration: str
    index: int
    spec: Obj
    kind: str  # mutating | validating

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def failure_policy(self) -> str:
        return str(self.spec.get("failurePolicy") or "Fail")

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)

    @property
    def reinvoke_if_needed(self) -> bool:
        return self.spec.get("reinvocationPolicy") == "IfNeeded"


def configured(store: Store, kind: str) -> list[Webhook]:
    """Webhooks of one kind, ordered by configuration name then position, as upstream calls them."""
    rt = r.MUTATING_WEBHOOKS if kind == MUTATING else r.VALIDATING_WEBHOOKS
    if not store.count(rt):  # the common case, asked at every write
        return []
    out: list[Webhook] = []
    for config in sorted(store.iter(rt), key=lambda c: c["metadata"]["name"]):
        for index, hook in enumerate(config.get("webhooks") or []):
            if isinstance(hook, dict):
                out.append(Webhook(config["metadata"]["name"], index, hook, kind))
    return out


# ---- matching ------------------------------------------------------------------------------------


def _resource_matches(patterns: list[str], resource: str, subresource: str) -> bool:
    for pattern in patterns:
        res, _, sub = pattern.partition("/")
        if res not in ("*", resource):
            continue
        if not sub and not subresource:
            return True
        if sub and (sub == "*" or sub == subresource):
            return True
    return False


def rule_matches(rule: Obj, attrs: Attributes, *, exact: bool) -> bool:
    """Whether a RuleWithOperations covers the request (matchPolicy Exact or Equivalent)."""
    rt = attrs.resource
    operations = rule.get("operations") or []
    if "*" not in operations and attrs.operation not in operations:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and rt.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    # Equivalent: a rule for another version of the same resource still matches (the emulator
    # serves one version of each resource, to which requests for the others would be converted).
    if exact and "*" not in versions and rt.version not in versions:
        return False
    if not _resource_matches(list(rule.get("resources") or []), rt.plural, attrs.subresource):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster" and rt.namespaced:
        return False
    return not (scope == "Namespaced" and not rt.namespaced)


def _selector(value: Any) -> labels.Selector:
    try:
        return labels.from_label_selector(value if value is not None else {})
    except labels.SelectorError:
        return labels.NOTHING


def matches(hook: Webhook, attrs: Attributes, namespace_labels: Obj | None) -> bool:
    """Rules, namespaceSelector (on the Namespace's labels) and objectSelector (object or old)."""
    spec = hook.spec
    exact = spec.get("matchPolicy") == "Exact"
    if not any(
        isinstance(rule, dict) and rule_matches(rule, attrs, exact=exact) for rule in spec.get("rules") or []
    ):
        return False
    ns_selector = _selector(spec.get("namespaceSelector"))
    if not ns_selector.empty:
        if attrs.resource is r.NAMESPACES:
            own = attrs.object if attrs.object is not None else attrs.old_object
            if not ns_selector.matches(((own or {}).get("metadata") or {}).get("labels")):
                return False
        elif attrs.resource.namespaced and not ns_selector.matches(namespace_labels or {}):
            return False
    obj_selector = _selector(spec.get("objectSelector"))
    if not obj_selector.empty:
        candidates = [o for o in (attrs.object, attrs.old_object) if o is not None]
        if not any(obj_selector.matches((o.get("metadata") or {}).get("labels")) for o in candidates):
            return False
    return True


def any_configured(store: Store) -> bool:
    return bool(store.count(r.MUTATING_WEBHOOKS) or store.count(r.VALIDATING_WEBHOOKS))


# ---- the review ----------------------------------------------------------------------------------


def review_request(attrs: Attributes, uid: str) -> Obj:
    """The AdmissionReview v1 a webhook receives for this request."""
    rt = attrs.resource
    kind = attrs.object_kind.as_dict()
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    request: Obj = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": {"username": attrs.user.username, "groups": list(attrs.user.groups)},
        "object": attrs.object,
        "oldObject": attrs.old_object,
        "dryRun": attrs.dry_run,
        "options": attrs.options,
    }
    if attrs.user.uid:
        request["userInfo"]["uid"] = attrs.user.uid
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    if rt.namespaced:
        request["namespace"] = attrs.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# ---- calling -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # where to connect
    server_name: str | None  # the TLS name to verify, when it differs from the URL's host
    shown: str = ""  # the URL in messages (a service's DNS name, as upstream resolves it), if not `url`


class Dispatcher:
    """Calls matching webhooks for a request; one per `Api`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._contexts: dict[str, ssl.SSLContext] = {}

    # ---- where a webhook listens -------------------------------------------------------------
    def endpoint(self, hook: Webhook) -> Endpoint:
        config = hook.spec.get("clientConfig") or {}
        timeout_query = f"timeout={int(hook.timeout)}s"
        if config.get("url"):
            url = str(config["url"])
            return Endpoint(f"{url}{'&' if '?' in url else '?'}{timeout_query}", None)
        ref = config.get("service") or {}
        name, namespace = ref.get("name", ""), ref.get("namespace", "")
        port = int(ref.get("port") or 443)
        path = ref.get("path") or ""
        dns_name = f"{name}.{namespace}.svc"
        display = f"https://{dns_name}:{port}{path}?{timeout_query}"
        service = self.store.get(r.SERVICES, namespace, name)
        if service is None:
            raise CallFailed(f'failed to call webhook: Post "{display}": service "{name}" not found')
        address = ((service.get("metadata") or {}).get("annotations") or {}).get(SERVICE_ADDRESS_ANNOTATION)
        if address:
            return Endpoint(f"https://{address}{path}?{timeout_query}", dns_name, display)
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName" and spec.get("externalName"):
            return Endpoint(f"https://{spec['externalName']}:{port}{path}?{timeout_query}", dns_name, display)
        raise CallFailed(
            f'failed to call webhook: Post "{display}": no endpoints available for service "{name}"'
        )

    def _ssl_context(self, hook: Webhook) -> ssl.SSLContext:
        bundle = str((hook.spec.get("clientConfig") or {}).get("caBundle") or "")
        context = self._contexts.get(bundle)
        if context is None:
            if bundle:
                try:
                    pem = base64.b64decode(bundle, validate=True).decode()
                    context = ssl.create_default_context(cadata=pem)
                except (binascii.Error, UnicodeDecodeError, ValueError, ssl.SSLError) as exc:
                    raise CallFailed(f"failed to call webhook: invalid caBundle: {exc}") from exc
            else:
                context = ssl.create_default_context()
            self._contexts[bundle] = context
        return context

    async def call(self, hook: Webhook, review: Obj) -> Obj:
        """POST the review; the webhook's `response`, or CallFailed."""
        endpoint = self.endpoint(hook)
        context = self._ssl_context(hook)
        extensions = {"sni_hostname": endpoint.server_name} if endpoint.server_name else None
        shown = endpoint.shown or endpoint.url
        try:
            async with httpx.AsyncClient(verify=context, timeout=hook.timeout) as client:
                reply = await client.post(endpoint.url, json=review, extensions=extensions)
        except httpx.HTTPError as exc:
            reason = await self._describe_failure(exc, hook, endpoint)
            raise CallFailed(f'failed to call webhook: Post "{shown}": {reason}') from exc
        if reply.status_code != 200:
            raise CallFailed(
                f"received invalid webhook response: expected status 200, got {reply.status_code}"
            )
        try:
            body = reply.json()
        except ValueError as exc:
            raise CallFailed(f"received invalid webhook response: {exc}") from exc
        response = body.get("response") if isinstance(body, dict) else None
        if not isinstance(response, dict):
            raise CallFailed("received invalid webhook response: expected response")
        if response.get("uid") != review["request"]["uid"]:
            raise CallFailed(
                f"expected response.uid={review['request']['uid']!r}, got {response.get('uid')!r}"
            )
        return response

    async def _describe_failure(self, exc: httpx.HTTPError, hook: Webhook, endpoint: Endpoint) -> str:
        """Go's words for a failed call; a certificate refused is fetched again, unverified, so that
        it is checked in Go's order and the message names what is wrong with it."""
        url = httpx.URL(endpoint.url)
        host = url.host
        target = goerrors.Target(host, url.port or 443, endpoint.server_name or host)
        peer: x509.Certificate | None = None
        trusted: list[x509.Certificate] = []
        if any(isinstance(e, ssl.SSLCertVerificationError) for e in goerrors.causes(exc)):
            peer = await peer_certificate(target, seconds=hook.timeout)
            trusted = _bundle_certificates(hook)
        return goerrors.describe(exc, target, now=datetime.now(UTC), peer=peer, trusted=trusted)

    # ---- dispatching -------------------------------------------------------------------------
    def matching(self, kind: str, attrs: Attributes) -> list[Webhook]:
        if attrs.resource in _EXEMPT:
            return []  # webhooks never see their own configurations, so none can lock itself in
        hooks = configured(self.store, kind)
        if not hooks:
            return []
        ns_labels: Obj | None = None
        if attrs.resource.namespaced:
            namespace = self.store.get(r.NAMESPACES, "", attrs.namespace)
            ns_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        return [hook for hook in hooks if matches(hook, attrs, ns_labels)]

    def has_matching(self, attrs: Attributes) -> bool:
        """Cheap check before a write: will any webhook be called (so the write must await)?"""
        if not any_configured(self.store):
            return False
        return bool(self.matching(MUTATING, attrs) or self.matching(VALIDATING, attrs))

    async def _invoke(self, hook: Webhook, attrs: Attributes) -> Obj | None:
        """Call one webhook; its response, None if ignored, or raise the request's error."""
        if attrs.dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.BadRequest(f'admission webhook "{hook.name}" does not support dry run')
        review = review_request(attrs, str(uuid.uuid4()))
        try:
            response = await self.call(hook, review)
        except CallFailed as exc:
            message = f'failed calling webhook "{hook.name}": {exc}'
            if hook.failure_policy == "Ignore":
                log.warning("ignoring webhook failure (failurePolicy Ignore): %s", message)
                return None
            raise errors.InternalError(f"Internal error occurred: {message}") from exc
        for warning in response.get("warnings") or []:
            attrs.warnings.append(str(warning))
            add_warning(str(warning))
        if not response.get("allowed"):
            raise denial(hook.name, response.get("status"))
        return response

    async def mutate(self, attrs: Attributes) -> bool:
        """Run matching mutating webhooks in order, applying their JSON patches to `attrs.object`.

        A webhook with `reinvocationPolicy: IfNeeded` runs once more when a webhook after it changed
        the object. Returns whether any webhook changed the object.
        """
        hooks = self.matching(MUTATING, attrs)
        if not hooks:
            return False
        changed_after: list[bool] = []
        changed = False
        for position, hook in enumerate(hooks):
            if await self._apply(hook, attrs):
                changed = True
                for earlier in range(position):
                    changed_after[earlier] = True
            changed_after.append(False)
        for position, hook in enumerate(hooks):
            if hook.reinvoke_if_needed and changed_after[position] and self._still_matches(hook, attrs):
                changed = await self._apply(hook, attrs) or changed
        return changed

    def _still_matches(self, hook: Webhook, attrs: Attributes) -> bool:
        return hook in self.matching(MUTATING, attrs)

    async def _apply(self, hook: Webhook, attrs: Attributes) -> bool:
        response = await self._invoke(hook, attrs)
        if response is None or not response.get("patch") or attrs.operation == DELETE:
            return False
        if response.get("patchType") != "JSONPatch":
            raise errors.InternalError(
                f'Internal error occurred: failed calling webhook "{hook.name}": unsupported patch type '
                f"{response.get('patchType')!r}"
            )
        try:
            operations = json.loads(base64.b64decode(str(response["patch"]), validate=True))
            patched = patch.json_patch(attrs.object, operations)
        except (binascii.Error, ValueError, errors.ApiError) as exc:
            raise errors.InternalError(
                f'Internal error occurred: failed calling webhook "{hook.name}": invalid patch: {exc}'
            ) from exc
        if not isinstance(patched, dict):
            raise errors.InternalError(
                f'Internal error occurred: failed calling webhook "{hook.name}": '
                "the patch did not produce an object"
            )
        if patched == attrs.object:
            return False
        attrs.object = patched
        return True

    async def validate(self, attrs: Attributes) -> None:
        """Run matching validating webhooks in parallel, as upstream; all must allow.

        When several refuse, the error of the first in dispatch order is raised (deterministic,
        where upstream reports whichever answered first).
        """
        matching = self.matching(VALIDATING, attrs)
        if not matching:
            return
        if len(matching) == 1:
            await self._invoke(matching[0], attrs)
            return
        outcomes = await asyncio.gather(
            *(self._invoke(hook, attrs) for hook in matching), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


def _bundle_certificates(hook: Webhook) -> list[x509.Certificate]:
    """The CAs of a webhook's caBundle (none when it has none or cannot be read)."""
    bundle = str((hook.spec.get("clientConfig") or {}).get("caBundle") or "")
    try:
        return x509.load_pem_x509_certificates(base64.b64decode(bundle, validate=True)) if bundle else []
    except (binascii.Error, ValueError):
        return []


async def peer_certificate(target: goerrors.Target, *, seconds: float) -> x509.Certificate | None:
    """The certificate a TLS server presents, without verifying it; None if it cannot be had."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    sni = target.server_name if target.server_name != target.host else None
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(target.host, target.port, ssl=context, server_hostname=sni), seconds
        )
    except (OSError, TimeoutError):
        return None
    try:
        tls = writer.get_extra_info("ssl_object")
        der = tls.getpeercert(binary_form=True) if tls is not None else None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    try:
        return x509.load_der_x509_certificate(der) if der else None
    except ValueError:
        return None


def denial(webhook: str, status: Any) -> WebhookDenied:
    """A rejection as upstream's `ToStatusErr`: the webhook's code (at least 400) and message."""
    status = status if isinstance(status, dict) else {}
    denied_by = f'admission webhook "{webhook}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return WebhookDenied(message, code=code, reason=str(status.get("reason") or ""), details=details)
