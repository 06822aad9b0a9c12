"""The three PATCH formats as pure functions (kube.patch)."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.kube import errors
from shipshape.kube import patch as kpatch


def test_merge_patch_merges_objects_removes_nulls_and_replaces_lists() -> None:
    original = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}
    result = kpatch.merge_patch(original, {"a": {"b": None, "d": 4}, "l": [3]})
    assert result == {"a": {"c": 2, "d": 4}, "l": [3], "keep": True}
    assert original == {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}  # untouched


def test_merge_patch_owned_merges_in_place_as_merge_patch_does_on_a_copy() -> None:
    original: dict[str, Any] = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": {"x": [1]}}
    patch = {"a": {"b": None, "d": {"e": 4}}, "l": [3], "new": {"f": None}}
    expected = kpatch.merge_patch(original, patch)
    owned = kpatch.merge_patch_owned(kpatch.copy_json(original), patch)
    assert owned == expected == {"a": {"c": 2, "d": {"e": 4}}, "l": [3], "keep": {"x": [1]}, "new": {}}
    target = kpatch.copy_json(original)
    assert kpatch.merge_patch_owned(target, patch) is target
    assert kpatch.merge_patch_owned(target, [1]) == [1]  # not an object: replaces the whole value
    patch["a"]["d"]["e"] = 5
    assert owned["a"]["d"] == {"e": 4}  # the patch's values are copied in


def test_json_patch_applies_and_maps_errors_to_400_and_422() -> None:
    doc = {"spec": {"replicas": 1}}
    assert kpatch.json_patch(doc, [{"op": "replace", "path": "/spec/replicas", "value": 3}]) == {
        "spec": {"replicas": 3}
    }
    assert doc == {"spec": {"replicas": 1}}
    with pytest.raises(kpatch.PatchFailed) as failed:
        kpatch.json_patch(doc, [{"op": "test", "path": "/spec/replicas", "value": 9}])
    assert failed.value.code == 422
    assert failed.value.message == "testing value /spec/replicas failed: test failed"
    with pytest.raises(kpatch.PatchFailed):
        kpatch.json_patch(doc, [{"op": "remove", "path": "/spec/missing"}])
    with pytest.raises(errors.BadRequest):
        kpatch.json_patch(doc, {"op": "add"})
    with pytest.raises(errors.BadRequest):
        kpatch.json_patch(doc, [{"path": "/x"}])


POD: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"app": "web", "tier": "fe"}, "finalizers": ["a"]},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "nginx:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
            },
            {"name": "sidecar", "image": "envoy:1"},
        ],
        "tolerations": [{"key": "x", "operator": "Exists"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}


def test_strategic_merge_by_container_name_and_env_name() -> None:
    patch = {
        "spec": {
            "containers": [{"name": "main", "image": "nginx:2", "env": [{"name": "B", "value": "3"}]}],
        }
    }
    result = kpatch.strategic_merge_patch(POD, patch)
    main, sidecar = result["spec"]["containers"]
    assert main["image"] == "nginx:2"
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert main["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert sidecar == {"name": "sidecar", "image": "envoy:1"}
    assert POD["spec"]["containers"][0]["image"] == "nginx:1"


def test_strategic_merge_atomic_lists_are_replaced() -> None:
    result = kpatch.strategic_merge_patch(
        POD, {"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}
    )
    assert result["spec"]["tolerations"] == [{"key": "y", "operator": "Exists"}]
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}
    tainted = kpatch.strategic_merge_patch(node, {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}})
    assert tainted["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]


def test_strategic_merge_delete_and_replace_directives() -> None:
    deleted = kpatch.strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    )
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["main"]
    replaced = kpatch.strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}
    )
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "x"}]
    whole_map = kpatch.strategic_merge_patch(POD, {"metadata": {"labels": {"new": "1", "$patch": "replace"}}})
    assert whole_map["metadata"]["labels"] == {"new": "1"}
    removed_map = kpatch.strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "delete"}}})
    assert "labels" not in removed_map["metadata"]


def test_list_strategies_depend_on_where_the_list_is() -> None:
    assert kpatch.list_strategy(("metadata", "finalizers")) == kpatch.ListStrategy()
    assert kpatch.list_strategy(("spec", "finalizers")) is None  # Namespace spec: atomic
    assert kpatch.list_strategy(("spec", "template", "spec", "containers", "ports")) == kpatch.ListStrategy(
        "containerPort"
    )
    assert kpatch.list_strategy(("spec", "ports")) == kpatch.ListStrategy("port")
    assert kpatch.list_strategy(("subsets", "ports")) is None
    assert kpatch.list_strategy(("status", "conditions")) == kpatch.ListStrategy("type")
    assert kpatch.list_strategy(("spec", "tolerations")) is None


def test_strategic_merge_finalizers_are_a_set_and_delete_from_primitive_list() -> None:
    added = kpatch.strategic_merge_patch(POD, {"metadata": {"finalizers": ["b", "a"]}})
    assert added["metadata"]["finalizers"] == ["a", "b"]
    dropped = kpatch.strategic_merge_patch(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert dropped["metadata"]["finalizers"] == []


def test_strategic_merge_set_element_order_and_retain_keys() -> None:
    ordered = kpatch.strategic_merge_patch(
        POD,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
                "containers": [{"name": "sidecar", "image": "envoy:2"}],
            }
        },
    )
    assert [c["name"] for c in ordered["spec"]["containers"]] == ["sidecar", "main"]
    assert ordered["spec"]["containers"][0]["image"] == "envoy:2"
    deployment = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    recreate = kpatch.strategic_merge_patch(
        deployment,
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}}},
    )
    assert recreate["spec"]["strategy"] == {"type": "Recreate"}


def test_set_element_order_keeps_server_only_items_in_place() -> None:
    """A sidecar a webhook put first stays first when `kubectl apply` re-orders its own containers."""
    live = {"spec": {"containers": [{"name": "proxy"}, {"name": "a"}, {"name": "b"}]}}
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "b", "image": "x"}],
        }
    }
    result = kpatch.strategic_merge_patch(live, patch)
    assert [c["name"] for c in result["spec"]["containers"]] == ["proxy", "b", "a"]
    tail = {"spec": {"containers": [{"name": "a"}, {"name": "proxy"}]}}
    added = kpatch.strategic_merge_patch(
        tail,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
                "containers": [{"name": "c"}],
            }
        },
    )
    assert [c["name"] for c in added["spec"]["containers"]] == ["a", "proxy", "c"]


def test_strategic_merge_kubectl_apply_shaped_patch() -> None:
    """What `kubectl apply` sends after removing an env var and a label from its manifest."""
    patch = {
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
            "labels": {"tier": None},
        },
        "spec": {
            "$setElementOrder/containers": [{"name": "main"}, {"name": "sidecar"}],
            "containers": [
                {
                    "$setElementOrder/env": [{"name": "A"}],
                    "env": [{"$patch": "delete", "name": "B"}],
                    "name": "main",
                }
            ],
        },
    }
    result = kpatch.strategic_merge_patch(POD, patch)
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert "$setElementOrder/env" not in result["spec"]["containers"][0]


def test_strategic_merge_service_ports_merge_by_port() -> None:
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    result = kpatch.strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert result["spec"]["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}


def test_strategic_merge_rejects_items_without_merge_key() -> None:
    with pytest.raises(kpatch.PatchFailed):
        kpatch.strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}})


def test_apply_dispatches_and_refuses_unknown_types() -> None:
    assert kpatch.apply(kpatch.MERGE_PATCH, {"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(errors.UnsupportedMediaType):
        kpatch.apply(kpatch.APPLY_PATCH, {}, {})
    with pytest.raises(errors.UnsupportedMediaType):
        kpatch.apply("text/plain", {}, {})
    with pytest.raises(errors.BadRequest):
        kpatch.apply(kpatch.MERGE_PATCH, {"a": 1}, [1])
