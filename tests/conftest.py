"""Checks for the whole test session."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def no_served_emulator_left_running() -> Iterator[None]:
    """Fail the session if a served emulator's thread outlived its test (see tests/emulator_fixtures.py)."""
    yield
    fixtures = sys.modules.get("tests.emulator_fixtures")
    if fixtures is None:
        return  # no test served an emulator
    alive = fixtures.live_emulator_threads()
    if alive:
        pytest.fail(f"served emulator threads still running at the end of the session: {alive}")
