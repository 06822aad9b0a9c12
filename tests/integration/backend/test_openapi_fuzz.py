"""schemathesis against the backend's own OpenAPI document: generated requests (valid and not) to every
operation, as a user and as an agent, never get a 5xx."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from shipshape.backend import service
from shipshape.backend.app import create_app
from shipshape.backend.settings import BackendSettings
from shipshape.backend.store import repository as repo

_state: dict[str, Any] = {}


def _app(tmp: Path) -> Any:
    backend = asyncio.run(service.build(BackendSettings(db=f"sqlite:///{tmp / 'fuzz.db'}")))
    with backend.transaction() as session:
        org, key = repo.create_organization(session, "acme", datetime.now(UTC))
        cluster, token = repo.create_cluster(session, org.id, "prod", datetime.now(UTC))
    _state.update(backend=backend, key=key, token=token, cluster=cluster.id)
    return create_app(backend)


@pytest.mark.integration
def test_no_request_gets_a_server_error(tmp_path: Path) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", _app(tmp_path))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    try:
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def no_5xx(case: Any) -> None:
                if isinstance(case.query, dict) and isinstance(case.query.get("wait"), int | float):
                    case.query["wait"] = 0  # the long poll would wait up to a minute per example
                for token in (_state["key"], _state["token"]):
                    response = case.call(headers={"Authorization": f"Bearer {token}"})
                    case.validate_response(response, checks=[not_a_server_error])

            no_5xx()
    finally:
        _state["backend"].engine.dispose()
