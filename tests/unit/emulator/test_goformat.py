"""Bad values printed as kube-apiserver's field errors print them (Go's %v, %q and %#v)."""

from __future__ import annotations

from typing import Any

import pytest

from shipshape.emulator import goformat


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        ("web", '"web"'),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
        ("tab\there\nnew", '"tab\\there\\nnew"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("café ☃", '"café ☃"'),
        ("\u200b", '"\\u200b"'),
        (5, "5"),
        (-3, "-3"),
        (2.0, "2"),
        (2.5, "2.5"),
        (True, "true"),
        (None, "null"),
        ({"app": "other"}, 'map[string]string{"app":"other"}'),
        ({"z": "1", "a": "2"}, 'map[string]string{"a":"2", "z":"1"}'),
        ({}, "map[string]string{}"),
        (["v2", "v3"], '[]string{"v2", "v3"}'),
    ],
)
def test_values_read_as_go_prints_them(bad: Any, shown: str) -> None:
    assert goformat.value(bad) == shown


def test_typed_nil_values_keep_their_go_type() -> None:
    assert goformat.value(goformat.string_map(None)) == "map[string]string(nil)"
    assert goformat.value(goformat.string_slice(None)) == "[]string(nil)"


def test_label_selector_prints_as_the_go_struct() -> None:
    assert goformat.label_selector({"matchLabels": {"app": "web"}}).text == (
        'v1.LabelSelector{MatchLabels:map[string]string{"app":"web"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
    )
    with_expressions = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}
    assert goformat.label_selector(with_expressions).text == (
        "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement"
        '{v1.LabelSelectorRequirement{Key:"tier", Operator:"In", Values:[]string{"a", "b"}}}}'
    )


def test_shapes_without_a_go_type_fall_back_to_json() -> None:
    assert goformat.value({"minAvailable": 1, "maxUnavailable": 1}) == '{"maxUnavailable":1,"minAvailable":1}'
