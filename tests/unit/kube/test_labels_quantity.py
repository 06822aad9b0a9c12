import pytest

from shipshape.kube import labels, quantity
from shipshape.kube.duration import DurationError, parse_duration


@pytest.mark.parametrize(
    ("text", "have", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("tier in (a, b),!legacy", {"tier": "b"}, True),
        ("tier in (a, b),!legacy", {"tier": "b", "legacy": "1"}, False),
        ("tier notin (a)", {"tier": "c"}, True),
        ("gpu", {"gpu": ""}, True),
        ("gpu", {}, False),
    ],
)
def test_label_selector_string(text: str, have: dict[str, str], expected: bool) -> None:
    assert labels.parse(text).matches(have) is expected


def test_label_selector_rejects_garbage() -> None:
    with pytest.raises(labels.SelectorError):
        labels.parse("app in web")


def test_label_selector_object_none_matches_nothing_empty_matches_all() -> None:
    assert not labels.matches(None, {"a": "b"})
    assert labels.matches({}, {"a": "b"})
    sel = {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "t", "operator": "In", "values": ["1"]}]}
    assert labels.matches(sel, {"app": "x", "t": "1"})
    assert not labels.matches(sel, {"app": "x", "t": "2"})


def test_quantities() -> None:
    assert quantity.cpu_millis("250m") == 250
    assert quantity.cpu_millis("1.5") == 1500
    assert quantity.cpu_millis(2) == 2000
    assert quantity.to_int("1Gi") == 2**30
    assert quantity.to_int("1G") == 10**9
    assert quantity.to_int("1e3") == 1000
    assert quantity.format_bytes(1536 * 2**20) == "1536Mi"
    with pytest.raises(quantity.QuantityError):
        quantity.parse_quantity("12 apples")


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration(45) == 45
    with pytest.raises(DurationError):
        parse_duration("soon")


def test_equality_selectors_match_as_their_requirements_do() -> None:
    """Selectors of equalities on distinct keys compare label items at once; the answers are the
    requirements' own, for dicts and other mappings alike."""
    from collections import UserDict

    selectors = [
        labels.parse("a=b,c=d"),
        labels.parse("a=b"),
        labels.from_label_selector({"matchLabels": {"a": "b", "n": 1}}),
        labels.parse("a=b,a=c"),  # one key twice: never both
        labels.parse("a in (b,x),c=d"),
        labels.parse(""),
    ]
    label_sets = [
        None,
        {},
        {"a": "b"},
        {"a": "b", "c": "d"},
        {"a": "b", "c": "d", "e": "f"},
        {"a": "x", "c": "d"},
    ]
    label_sets += [{"a": "b", "n": "1"}, {"c": "d"}]
    for selector in selectors:
        for have in label_sets:
            expected = not selector.match_nothing and all(
                req.matches(have or {}) for req in selector.requirements
            )
            assert selector.matches(have) is expected, (selector, have)
            assert selector.matches(UserDict(have or {})) is expected
    assert labels.parse("a=b,c=d") == labels.parse("a=b,c=d") and hash(labels.parse("a=b")) == hash(
        labels.parse("a=b")
    )
