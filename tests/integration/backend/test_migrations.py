"""The Alembic migrations produce exactly the SQLAlchemy models (tables, columns, types, indexes), on
SQLite and PostgreSQL, and go down and up again; readiness follows the schema."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from shipshape.backend.store import engine as store_engine
from shipshape.backend.store.models import Base

pytestmark = pytest.mark.integration


def test_the_migrations_produce_the_models(database_url: str) -> None:
    engine = store_engine.create(database_url)
    try:
        store_engine.migrate(engine)
        assert store_engine.is_current(engine)
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert differences == []
        # Down to the first revision and back: every downgrade undoes its upgrade.
        config = store_engine._config(engine)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0001")
        assert not store_engine.is_current(engine)
        store_engine.migrate(engine)
        assert store_engine.is_current(engine)
        # A newer version migrated further (a rollout under way): this code's processes stay ready.
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = 'from-a-newer-version'"))
        assert store_engine.is_current(engine)
    finally:
        engine.dispose()
