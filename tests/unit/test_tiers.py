"""The unit tier's rules hold for the tests in it (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from tests.conftest import NetworkInUnitTest, tier_of


def test_a_unit_test_cannot_open_an_ip_socket() -> None:
    for family in (socket.AF_INET, socket.AF_INET6):
        with pytest.raises(NetworkInUnitTest, match="move the test to tests/integration"):
            socket.socket(family, socket.SOCK_STREAM)
    with pytest.raises(NetworkInUnitTest):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_unix_sockets_and_event_loops_still_work() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
    assert asyncio.run(asyncio.sleep(0, result=7)) == 7


def test_each_test_is_marked_with_the_tier_of_its_directory(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None
    tests = Path(__file__).resolve().parents[1]
    assert tier_of(tests / "integration" / "controller" / "test_split.py") == "integration"
    assert tier_of(tests / "e2e" / "test_dashboard.py") == "e2e"
    assert tier_of(tests / "conftest.py") is None
