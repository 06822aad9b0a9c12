"""Engines and schema migrations: PostgreSQL at scale, SQLite as the embedded default."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError as AlembicError
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")


class StoreError(Exception):
    """The database URL is unusable or the database cannot be reached."""


def normalise_url(url: str) -> str:
    """`postgresql://` means psycopg 3 here (the driver this package installs)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


# JSON columns (object bodies, recommendations) are written and read with orjson: the standard
# library's encoder was most of the time a worker spent storing a full snapshot.
_JSON = {"json_serializer": _json_text, "json_deserializer": orjson.loads}


def create(
    url: str,
    *,
    pre_ping: bool = True,
    pool_size: int = 16,
    max_overflow: int = 4,
    autocommit: bool = False,
) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout and foreign keys (API and workers share it).
    On PostgreSQL a pool of `pool_size` connections (and `max_overflow` more while busy: those are
    closed when returned, and a new PostgreSQL backend starts with cold caches and no prepared
    statements, so the pool keeps what a worker uses at once: its 12 apply threads, the analyses'
    thread and the sweep), each checked
    with a round trip when it is taken (`pre_ping`) unless its user retries on a dropped connection;
    `autocommit` for a user whose every statement is a transaction of its own (nothing to begin, commit
    or roll back when a connection is returned)."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        # Not the URL itself in the message: it may hold a password.
        raise StoreError("invalid database URL: use postgresql://user@host/db or sqlite:///path") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": 30, "check_same_thread": False}, **_JSON)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    if parsed.get_backend_name() != "postgresql":
        raise StoreError(
            f"unsupported database {parsed.get_backend_name()!r}: use postgresql:// or sqlite://"
        )
    options: dict[str, Any] = (
        {"isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None} if autocommit else {}
    )
    return create_engine(
        parsed, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=pre_ping, **options, **_JSON
    )


class AcceptConnections:
    """At most `size` psycopg connections in autocommit, for a user on the event loop whose every
    statement is a transaction of its own (the API's accept of a small push: `repo.accept_push_async`).
    A connection is made when one is wanted and none is idle, is not pinged when taken (its user tries
    once more on a connection found broken: `broken`), and is closed rather than kept when its user
    raised (a statement cut off midway leaves it in no known state).

    Not SQLAlchemy's asyncio engine: its connection, the greenlet that runs a sync function in it and
    the result's machinery took a delta's accept about 540 µs of CPU, psycopg's connection with the
    statement prepared about 230 µs (the same statement, one connection, alternating)."""

    def __init__(self, url: str, size: int, *, timeout: float = 30.0) -> None:
        self._url = url
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(size)
        self._timeout = timeout

    @property
    def idle(self) -> int:
        """Connections open and not in use."""
        return len(self._idle)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An idle connection, or a new one; psycopg's OperationalError when none frees up within the
        timeout (the database is slow or away), as when one cannot be made."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise psycopg.OperationalError(f"no connection free within {self._timeout:g} s") from None
        try:
            connection = self._idle.pop() if self._idle else await self._connect()
            try:
                yield connection
            except BaseException:
                await connection.close()
                raise
            if connection.broken or connection.closed:
                await connection.close()
                return
            self._idle.append(connection)
        finally:
            self._slots.release()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self._url, autocommit=True)

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop().close()


def accept_connections(url: str, *, size: int) -> AcceptConnections | None:
    """`AcceptConnections` for `url`; None unless it is PostgreSQL (SQLite has no asyncio driver here:
    its callers use `create` in a thread)."""
    libpq = libpq_url(url)
    return None if libpq is None else AcceptConnections(libpq, size)


def libpq_url(url: str) -> str | None:
    """libpq's form of a PostgreSQL URL (`postgresql://`, its parameters in the query), for psycopg's
    own connections; None for another database."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() != "postgresql":
        return None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def _config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent; safe from several processes on PostgreSQL
    thanks to the transactional DDL and the version table's primary key)."""
    config = _config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def is_current(engine: Engine) -> bool:
    """The database has every migration this code knows (readiness): it is at this code's newest, or
    at a newer one a later version applied (migrations only add while the two versions run side by
    side in a rollout, so the old processes stay ready). An empty database, or one at an older
    migration, is not current."""
    script = ScriptDirectory.from_config(_config(engine))
    current = revision(engine)
    if current is None:
        return False
    if current == script.get_current_head():
        return True
    try:
        script.get_revision(current)
    except AlembicError:
        return True  # not one of ours: written by a newer version
    return False


def revision(engine: Engine) -> str | None:
    """The migration the database is at (None: an empty database)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
