"""`shipshape emulator interrupt --node` takes the short node names the demo prints."""

from __future__ import annotations

import pytest

from shipshape.cli import demo
from shipshape.cli.emulator_cloud import AmbiguousNode, resolve_node

NODES = ["ip-10-0-1-216.ec2.internal", "ip-10-0-15-185.ec2.internal", "ip-10-0-61-49.ec2.internal"]


@pytest.mark.parametrize("name", NODES)
def test_the_demos_short_name_and_the_full_name_resolve(name: str) -> None:
    assert resolve_node(demo.short_node(name), NODES) == name
    assert resolve_node(name, NODES) == name


def test_unambiguous_prefixes_and_suffixes_resolve() -> None:
    assert resolve_node("ip-10-0-61", NODES) == "ip-10-0-61-49.ec2.internal"
    assert resolve_node("61-49.ec2.internal", NODES) == "ip-10-0-61-49.ec2.internal"


def test_a_short_name_that_is_a_prefix_of_another_still_means_its_own_node() -> None:
    nodes = ["ip-10-0-1-2.ec2.internal", "ip-10-0-1-23.ec2.internal"]
    assert resolve_node("ip-10-0-1-2", nodes) == "ip-10-0-1-2.ec2.internal"


def test_an_ambiguous_name_lists_the_candidates() -> None:
    with pytest.raises(AmbiguousNode) as error:
        resolve_node("ip-10-0-1", NODES)
    assert str(error.value) == (
        "node 'ip-10-0-1' is ambiguous: it matches ip-10-0-1-216.ec2.internal, ip-10-0-15-185.ec2.internal"
    )


def test_a_name_that_fits_no_node_goes_to_the_emulator_as_it_is() -> None:
    assert resolve_node("od-node", NODES) == "od-node"
