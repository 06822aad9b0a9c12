"""The Alembic migrations produce exactly the SQLAlchemy models (tables, columns, types, indexes), on
SQLite and PostgreSQL, and go down and up again; readiness follows the schema."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, text

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


def _object_storage(engine: Engine) -> tuple[list[str], str]:
    """(cluster_objects' storage parameters, its body's compression: 'l' lz4, 'p' pglz, '' default)."""
    with engine.connect() as connection:
        options = connection.scalar(text("SELECT reloptions FROM pg_class WHERE relname = 'cluster_objects'"))
        method = connection.scalar(
            text(
                "SELECT attcompression FROM pg_attribute "
                "WHERE attrelid = 'cluster_objects'::regclass AND attname = 'body'"
            )
        )
    return list(options or []), str(method or "")


def test_object_rows_leave_room_on_their_page_and_bodies_use_lz4_on_postgresql(database_url: str) -> None:
    """Migration 0010: on PostgreSQL a fifth of each page of cluster_objects free (heap-only updates)
    and lz4 for the bodies where the server has it; back to the defaults on the way down; nothing on
    SQLite, where the migrations still go up and down."""
    engine = store_engine.create(database_url)
    try:
        store_engine.migrate(engine)
        config = store_engine._config(engine)
        if engine.dialect.name != "postgresql":
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                command.downgrade(config, "0009")
            store_engine.migrate(engine)
            return
        with engine.connect() as connection:
            allowed = connection.scalar(
                text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
            )
        options, method = _object_storage(engine)
        assert options == ["fillfactor=80"]
        assert method == ("l" if "lz4" in allowed else "")
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0009")
        assert _object_storage(engine) == ([], "")
    finally:
        engine.dispose()
