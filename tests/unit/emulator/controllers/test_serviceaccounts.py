from __future__ import annotations

from shipshape.emulator.resources import NAMESPACES, SERVICEACCOUNTS

from .helpers import create, make_cluster, run


def test_every_active_namespace_gets_a_default_service_account_back() -> None:
    cluster, _ = make_cluster()
    create(cluster, NAMESPACES, {"metadata": {"name": "team"}}, namespace="")
    run(cluster, 0)
    assert cluster.store.get(SERVICEACCOUNTS, "team", "default") is not None
    assert cluster.store.get(SERVICEACCOUNTS, "default", "default") is not None
    cluster.store.delete(SERVICEACCOUNTS, "team", "default")
    run(cluster, 0)
    assert cluster.store.get(SERVICEACCOUNTS, "team", "default") is not None
