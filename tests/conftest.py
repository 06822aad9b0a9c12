"""Checks for the whole test session, and the test tiers.

Tiers, by directory (each test is marked with its tier, so `pytest -m unit` selects one):

- `tests/unit`: no network and no real waiting: fakes, the emulator in process, virtual clocks. A
  unit test that opens a network socket (connect or bind, IPv4 or IPv6) fails; Unix sockets
  (asyncio's own wake-up pipe) are allowed.
- `tests/integration`: real peers: a served emulator over HTTPS, PostgreSQL, NATS, subprocesses.
- `tests/e2e`: end to end through a browser (opt-in where its tools are missing).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")
_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class NetworkInUnitTest(AssertionError):
    """A unit test tried to use the network."""


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the first directory under tests/."""
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


_socket_init = socket.socket.__init__


def _no_network_socket(
    self: socket.socket, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None
) -> None:
    """`socket.socket` for unit tests: an IPv4 or IPv6 socket is refused before it exists (so nothing
    is left open); Unix sockets, and sockets made from an existing descriptor, are created as usual."""
    if fileno is None and (family == -1 or family in _NETWORK_FAMILIES):
        raise NetworkInUnitTest(
            "a unit test may not use the network (it opened an IP socket): fake the peer, run the "
            "emulator in process, or move the test to tests/integration"
        )
    _socket_init(self, family, type, proto, fileno)


@pytest.fixture(scope="module", autouse=True)
def no_network_in_unit_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Unit tests run without the network: opening an IP socket raises `NetworkInUnitTest`. Applied per
    module (before the module's other fixtures), so module-scoped fixtures are held to it too."""
    if tier_of(request.path) != "unit":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "__init__", _no_network_socket)
        yield


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
