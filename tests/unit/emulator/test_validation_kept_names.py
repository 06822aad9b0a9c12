"""A qualified name's problems are kept per key (`validation._qualified_name_problems`). Differential:
over randomized keys, valid and not, the causes are those of the check worked out anew."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shipshape.emulator import validation
from shipshape.emulator.validation import (
    _DNS1123_SUBDOMAIN,
    _QUALIFIED_NAME,
    MSG_DNS1123_SUBDOMAIN,
    MSG_QUALIFIED_NAME,
    FieldErrors,
)


def _worked_out(errs: FieldErrors, path: str, key: Any) -> None:
    """`_qualified_name` as it was before its answers were kept."""
    if not isinstance(key, str) or not key:
        errs.invalid(path, key, "name part must be non-empty")
        return
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        errs.invalid(path, key, "prefix part must be non-empty")
    elif prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errs.invalid(path, key, "prefix part " + MSG_DNS1123_SUBDOMAIN)
    if len(name) > 63:
        errs.invalid(path, key, "name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        errs.invalid(path, key, MSG_QUALIFIED_NAME)


def _key(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, 5, "", 1.5])
    alphabet = "abcXYZ019-_./ "
    parts = ["".join(rng.choice(alphabet) for _ in range(rng.choice([1, 3, 8, 64, 70]))) for _ in range(2)]
    return rng.choice([parts[0], "/".join(parts), f"example.com/{parts[1]}", f"/{parts[1]}", f"{parts[0]}/"])


@pytest.mark.parametrize("seed", range(5))
def test_kept_problems_are_the_worked_out_ones(seed: int) -> None:
    rng = random.Random(seed)
    keys = [_key(rng) for _ in range(400)]
    for key in keys + keys:  # the second time from what was kept
        kept, fresh = FieldErrors(), FieldErrors()
        validation._qualified_name(kept, "metadata.labels", key)
        _worked_out(fresh, "metadata.labels", key)
        assert kept.causes == fresh.causes


def test_a_kept_answer_is_the_checks_and_not_another_keys() -> None:
    validation._qualified_name_problems.cache_clear()
    errs = FieldErrors()
    for key in ("ok", "Not OK!", "ok", "a/b/c", "Not OK!"):
        validation._qualified_name(errs, "p", key)
    shown = [cause[2][: cause[2].index('": ') + 1] for cause in errs.causes]
    assert shown == ['Invalid value: "Not OK!"', 'Invalid value: "a/b/c"', 'Invalid value: "Not OK!"']
