"""The push contract's validation and stripping, and the credential format."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from shipshape.backend import auth
from shipshape.contracts import push


def _pod(name: str, **metadata: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "a", **metadata}, "spec": {}}


def test_object_keys_are_checked() -> None:
    assert push.object_key("pods", _pod("p")) == push.ObjectKey(kind="pods", namespace="a", name="p")
    assert push.object_key("nodes", {"metadata": {"name": "n"}}).namespace == ""
    for kind, obj, problem in [
        ("secrets", _pod("p"), "unknown kind"),
        ("pods", {"metadata": {"name": "p"}}, "namespace is required"),
        ("nodes", {"metadata": {"name": "n", "namespace": "a"}}, "cluster-scoped"),
        ("pods", _pod("Not_Valid"), "invalid metadata.name"),
        ("pods", {"spec": {}}, "no metadata"),
    ]:
        with pytest.raises(ValueError, match=problem):
            push.object_key(kind, obj)


def test_a_snapshot_rejects_an_object_twice_and_parse_rejects_unknown_schemas() -> None:
    body = {"schema": push.SNAPSHOT_SCHEMA, "sequence": 1, "taken_at": "2026-11-25T00:00:00Z"}
    with pytest.raises(ValidationError, match="appears twice"):
        push.parse_push({**body, "objects": {"pods": [_pod("p"), _pod("p")]}})
    with pytest.raises(ValueError, match="unknown schema"):
        push.parse_push({**body, "schema": "shipshape.dev/snapshot/v9", "objects": {}})
    delta = {"schema": push.DELTA_SCHEMA, "sequence": 3, "base_sequence": 3, "taken_at": body["taken_at"]}
    with pytest.raises(ValidationError, match="greater than base_sequence"):
        push.parse_push({**delta, "changes": []})


def test_stripping_removes_what_must_not_leave_the_cluster() -> None:
    container = {
        "name": "c",
        "env": [
            {"name": "API_KEY", "value": "k"},
            {"name": "db_password", "value": "p"},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "LOG_LEVEL", "value": "info"},
        ],
    }
    deployment = {
        "metadata": {
            "name": "d",
            "managedFields": [{}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"},
        },
        "spec": {"template": {"spec": {"containers": [container], "initContainers": [container]}}},
    }
    stripped = push.strip_object(deployment)
    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["annotations"] == {"keep": "1"}
    for field in ("containers", "initContainers"):
        env = stripped["spec"]["template"]["spec"][field][0]["env"]
        assert [e.get("value") for e in env] == ["<redacted>", "<redacted>", None, "info"]
        assert env[2]["valueFrom"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    # The original is untouched.
    assert deployment["metadata"]["managedFields"] == [{}]
    assert container["env"][0]["value"] == "k"


def test_needs_stripping_agrees_with_strip_object() -> None:
    """The receiver skips the copy when nothing needs stripping: the check must see exactly what
    `strip_object` would change."""
    pod_spec = {"containers": [{"name": "c", "env": [{"name": "LOG_LEVEL", "value": "info"}]}]}
    clean = {"metadata": {"name": "p", "annotations": {"keep": "1"}}, "spec": pod_spec}
    secret = {"name": "DB_PASSWORD", "value": "hunter2"}
    variants = [
        clean,
        {"metadata": {"name": "p", "managedFields": []}, "spec": pod_spec},
        {
            "metadata": {
                "name": "p",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            }
        },
        {"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i", "env": [secret]}]}},
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "env": [{**secret, "value": "<redacted>"}]}]},
        },
        {
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"ephemeralContainers": [{"env": [secret]}]}}},
        },
        {"metadata": {"name": "d"}, "spec": {"template": {"spec": pod_spec}, "replicas": 2}},
        {"metadata": {"name": "e"}, "involvedObject": {"name": "p"}},
    ]
    for obj in variants:
        assert push.needs_stripping(obj) == (push.strip_object(obj) != obj), obj


def test_a_push_that_needs_no_stripping_is_kept_and_dump_round_trips() -> None:
    now = "2026-01-01T00:00:00Z"
    pod = {"metadata": {"name": "p", "namespace": "a"}, "spec": {"containers": [{"name": "c"}]}}
    snapshot = push.parse_push(
        {"schema": push.SNAPSHOT_SCHEMA, "sequence": 1, "taken_at": now, "objects": {"pods": [pod]}}
    )
    assert push.stripped(snapshot) is snapshot
    leaky = {**pod, "metadata": {**pod["metadata"], "managedFields": [{}]}}
    delta = push.parse_push(
        {
            "schema": push.DELTA_SCHEMA,
            "sequence": 2,
            "base_sequence": 1,
            "taken_at": now,
            "changes": [{"type": "MODIFIED", "kind": "pods", "object": leaky}],
        }
    )
    cleaned = push.stripped(delta)
    assert cleaned is not delta
    assert (
        isinstance(cleaned, push.ClusterDelta)
        and "managedFields" not in cleaned.changes[0].object["metadata"]
    )
    for message in (snapshot, delta, cleaned):
        assert push.parse_push(orjson.loads(push.dump(message))) == message


def test_clean_snapshot_accepts_only_what_the_full_path_accepts_unchanged() -> None:
    """The receiver's fast check: when it says a body is a clean snapshot, `parse_push` accepts the body
    and `stripped` keeps it as it is; anything else is left to them (None)."""
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "a", "annotations": {"keep": "1"}},
        "spec": {"containers": [{"name": "c", "env": [{"name": "DB_PASSWORD", "value": "<redacted>"}]}]},
    }
    deployment = {
        "metadata": {"name": "d", "namespace": "a"},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "X"}]}]}},
        },
    }
    base = {
        "schema": push.SNAPSHOT_SCHEMA,
        "sequence": 7,
        "taken_at": "2026-01-01T00:00:00Z",
        "objects": {"pods": [pod], "deployments": [deployment], "nodes": [{"metadata": {"name": "n"}}]},
    }
    leaked = {"name": "API_TOKEN", "value": "t"}
    variants: list[Any] = [
        base,
        {**base, "sequence": -1},
        {**base, "sequence": "7"},
        {**base, "taken_at": "yesterday"},
        {**base, "extra": 1},
        {**base, "schema": push.DELTA_SCHEMA},
        {**base, "objects": {"secrets": [pod]}},
        {**base, "objects": {"pods": [pod, pod]}},
        {**base, "objects": {"pods": [{**pod, "metadata": {"name": "p"}}]}},
        {**base, "objects": {"nodes": [{"metadata": {"name": "n", "namespace": "a"}}]}},
        {**base, "objects": {"pods": [{**pod, "metadata": {**pod["metadata"], "managedFields": []}}]}},
        {**base, "objects": {"pods": [{**pod, "spec": {"initContainers": [{"env": [leaked]}]}}]}},
        {
            **base,
            "objects": {
                "deployments": [
                    {**deployment, "spec": {"template": {"spec": {"containers": [{"env": [leaked]}]}}}}
                ]
            },
        },
        {
            **base,
            "objects": {"pods": [{**pod, "metadata": {**pod["metadata"], "labels": {"team": "équipe"}}}]},
        },
        {**base, "objects": {"pods": [{**pod, "spec": {"containers": "not a list"}}]}},
        {**base, "objects": {"pods": ["not an object"]}},
    ]
    accepted = 0
    for variant in variants:
        body = orjson.dumps(variant)
        head = push.clean_snapshot(body)
        if head is None:
            continue
        accepted += 1
        parsed = push.parse_push(orjson.loads(body))
        assert push.stripped(parsed) is parsed, variant
        assert (head.schema_, head.sequence, head.taken_at) == (
            parsed.schema_,
            parsed.sequence,
            parsed.taken_at,
        )
    assert accepted == 1 and push.clean_snapshot(orjson.dumps(base)) is not None
    assert push.clean_snapshot(b"{not json") is None


def test_clean_push_takes_a_delta_only_when_the_full_path_accepts_it_unchanged() -> None:
    """The receiver's fast check of a delta: when it says a body is a clean delta, `parse_push` accepts
    the body with the same fields and `stripped` keeps it as it is; anything else is left to them."""
    pod = {
        "metadata": {"name": "p", "namespace": "a", "annotations": {"keep": "1"}},
        "spec": {"containers": [{"name": "c", "env": [{"name": "DB_PASSWORD", "value": "<redacted>"}]}]},
    }
    modified = {"type": "MODIFIED", "kind": "pods", "object": pod}
    base = {
        "schema": push.DELTA_SCHEMA,
        "sequence": 8,
        "base_sequence": 7,
        "taken_at": "2026-01-01T00:00:00Z",
        "agent_version": "1.2.3",
        "changes": [modified, {"type": "DELETED", "kind": "nodes", "object": {"metadata": {"name": "n"}}}],
    }
    leaked = {"name": "API_TOKEN", "value": "t"}

    def change(**fields: Any) -> dict[str, Any]:
        return {**base, "changes": [{**modified, **fields}]}

    valid = [base, {**base, "changes": [modified, modified]}, {**base, "changes": []}]
    variants: list[Any] = [
        *valid,
        {**base, "sequence": 7},
        {**base, "sequence": 0, "base_sequence": 0},
        {**base, "base_sequence": -1},
        {**base, "sequence": "8"},
        {**base, "taken_at": "yesterday"},
        {**base, "agent_version": "v" * 65},
        {**base, "extra": 1},
        {**base, "schema": push.SNAPSHOT_SCHEMA},
        {**base, "schema": "shipshape.dev/delta/v0"},
        {key: value for key, value in base.items() if key != "base_sequence"},
        {**base, "changes": {"not": "a list"}},
        {**base, "changes": ["not an object"]},
        change(type="REPLACED"),
        change(kind="secrets"),
        change(extra=1),
        change(object="not an object"),
        change(object={"spec": {}}),
        change(object={**pod, "metadata": {"name": "p"}}),
        change(object={**pod, "metadata": {**pod["metadata"], "managedFields": []}}),
        change(object={**pod, "metadata": {**pod["metadata"], "annotations": {push._LAST_APPLIED: "{}"}}}),
        change(object={**pod, "spec": {"ephemeralContainers": [{"env": [leaked]}]}}),
        change(object={**pod, "spec": {"template": {"spec": {"containers": [{"env": [leaked]}]}}}}),
        change(object={**pod, "metadata": {**pod["metadata"], "labels": {"team": "équipe"}}}),
        {**base, "changes": [modified] * (push.MAX_CHANGES_PER_DELTA + 1)},
    ]
    accepted = 0
    for variant in variants:
        body = orjson.dumps(variant)
        head = push.clean_push(body)
        if head is None:
            continue
        accepted += 1
        parsed = push.parse_push(orjson.loads(body))
        assert isinstance(head, push.ClusterDelta) and isinstance(parsed, push.ClusterDelta), variant
        assert push.stripped(parsed) is parsed, variant
        assert head.model_dump(exclude={"changes"}) == parsed.model_dump(exclude={"changes"})
    assert accepted == len(valid)
    assert push.clean_push(b"{not json") is None
    # A delta is not a snapshot for the snapshot-only check, and the other way round.
    assert push.clean_snapshot(orjson.dumps(base)) is None


def test_credentials_round_trip_and_reject_look_alikes() -> None:
    issued = auth.issue(auth.CredentialKind.AGENT_TOKEN)
    presented = auth.bearer(f"Bearer {issued.plaintext}")
    assert (
        presented is not None
        and presented.id == issued.id
        and presented.kind is auth.CredentialKind.AGENT_TOKEN
    )
    assert auth.matches(presented, issued.secret_sha256)
    other = auth.issue(auth.CredentialKind.AGENT_TOKEN)
    assert not auth.matches(presented, other.secret_sha256)
    for header in (
        None,
        "",
        "Bearer",
        f"Basic {issued.plaintext}",
        "Bearer ssk_12_x",
        "Bearer xyz_0123456789ab_" + "a" * 43,
    ):
        assert auth.bearer(header) is None


def test_verified_credentials_know_the_same_secret_for_a_while_only() -> None:
    now = [0.0]
    verified: auth.Verified[str] = auth.Verified(ttl=10.0, size=2, clock=lambda: now[0])
    issued = [auth.issue(auth.CredentialKind.AGENT_TOKEN) for _ in range(3)]
    presented = [auth.parse(i.plaintext) for i in issued]
    assert all(p is not None for p in presented)
    first, second, third = (p for p in presented if p is not None)
    assert verified.get(first) is None
    verified.put(first, "cluster-1")
    assert verified.get(first) == "cluster-1"
    # The same id with another secret is not the verified credential.
    assert verified.get(auth.PresentedCredential(first.kind, first.id, "A" * 43)) is None
    now[0] = 10.5
    assert verified.get(first) is None  # too old: looked up again
    verified.put(first, "cluster-1")
    verified.forget(first.id)
    assert verified.get(first) is None
    verified.put(first, "cluster-1")
    verified.put(second, "cluster-2")
    verified.put(third, "cluster-3")  # the oldest goes
    assert [verified.get(p) for p in (first, second, third)] == [None, "cluster-2", "cluster-3"]
