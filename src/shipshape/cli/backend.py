"""`shipshape backend`, `shipshape worker` and `shipshape admin`: the backend's processes, its
bootstrap (an organisation with a user key, a cluster with an agent token) and its schema migration.

All three log one line per record through `cli/logs.py` (`--log-level`, `--log-format text|json`);
secrets are masked there whoever logs them."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from shipshape.backend import service
from shipshape.backend import settings as backend_settings
from shipshape.backend.queue import QueueError
from shipshape.backend.store import engine as store_engine
from shipshape.backend.store import repository as repo
from shipshape.cli import logs

LOG = logging.getLogger("shipshape.cli.backend")
admin = typer.Typer(
    help="Bootstrap tenants (organisations, user API keys, clusters and agent tokens) and migrate the "
    "database schema."
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help=f"database URL (default {backend_settings.DEFAULT_DB}; env SHIPSHAPE_BACKEND_DB)"
    ),
]
QueueOption = Annotated[
    str | None, typer.Option("--queue", help="memory:// (default; workers in-process) or nats://host:port")
]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML file of backend settings")]
LogLevelOption = Annotated[
    Literal["debug", "info", "warning", "error"], typer.Option(help="least severe level logged")
]
LogFormatOption = Annotated[
    Literal["text", "json"], typer.Option(help="one line per record: text (key=value) or json")
]


def _settings(config: Path | None, **flags: object) -> backend_settings.BackendSettings:
    try:
        return backend_settings.load(config, **flags)
    except backend_settings.SettingsError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def backend(
    port: Annotated[
        int | None, typer.Option(help="port on 127.0.0.1 (default 8080; 0: any free port)")
    ] = None,
    host: Annotated[str | None, typer.Option(help="address to listen on (default 127.0.0.1)")] = None,
    ssl_certfile: Annotated[
        Path | None, typer.Option(help="serve HTTPS with this certificate (PEM; with --ssl-keyfile)")
    ] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="the certificate's private key (PEM)")] = None,
    db: DbOption = None,
    queue: QueueOption = None,
    config: ConfigOption = None,
    log_level: LogLevelOption = "info",
    log_format: LogFormatOption = "text",
) -> None:
    """Serve the backend's API (/api/v1, /healthz, /readyz, /metrics); with the in-process queue it
    runs its workers too. A line per request (method, path, status, duration, organisation, cluster)
    at info; probes and scrapes at debug."""
    logs.configure(log_level, log_format)
    settings = _settings(
        config, port=port, host=host, db=db, queue=queue, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile
    )
    try:
        asyncio.run(service.serve_api(settings))
    except (store_engine.StoreError, QueueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


def worker(
    db: DbOption = None,
    queue: QueueOption = None,
    config: ConfigOption = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve /metrics, /healthz and /readyz on this port (default none; 0: any)"),
    ] = None,
    host: Annotated[str | None, typer.Option(help="address of the metrics port (default 127.0.0.1)")] = None,
    log_level: LogLevelOption = "info",
    log_format: LogFormatOption = "text",
) -> None:
    """Consume the shared queue (NATS JetStream): apply pushes to the stored state, write the
    clusters' time series, run the analyzers. With --metrics-port, Prometheus metrics (messages
    applied, failed and redelivered, apply and analysis latency, queue lag) and the probes' endpoints."""
    logs.configure(log_level, log_format)
    settings = _settings(config, db=db, queue=queue, metrics_port=metrics_port, host=host)
    if settings.queue.startswith("memory:"):
        typer.echo(
            "error: with the in-process queue the backend runs its own workers; give --queue nats://…",
            err=True,
        )
        raise typer.Exit(2)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await service.run_workers(settings, stop)

    try:
        asyncio.run(main())
    except (store_engine.StoreError, QueueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


@admin.callback()
def admin_options(log_level: LogLevelOption = "warning", log_format: LogFormatOption = "text") -> None:
    """Bootstrap tenants and migrate the database schema."""
    logs.configure(log_level, log_format)


@admin.command("migrate")
def migrate(
    db: DbOption = None,
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Bring the database schema to the newest migration (idempotent; run it before rolling out a
    new version when the processes run with `migrate: false`)."""
    settings = _settings(config, db=db)
    try:
        engine = store_engine.create(settings.db)
    except store_engine.StoreError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    try:
        before = store_engine.revision(engine)
        store_engine.migrate(engine)
        after = store_engine.revision(engine)
    except SQLAlchemyError as error:
        typer.echo(f"error: the database refused the migration: {type(error).__name__}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    LOG.info("schema migrated", extra={"from_revision": before, "to_revision": after})
    if as_json:
        typer.echo(json.dumps({"revision": after, "previous": before}))
    else:
        typer.echo(f"schema at {after}" + ("" if before == after else f" (was {before or 'empty'})"))


def _open(db: str | None) -> Engine:
    settings = _settings(None, db=db)
    try:
        engine = store_engine.create(settings.db)
        store_engine.migrate(engine)
    except store_engine.StoreError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    return engine


@admin.command("create-org")
def create_org(
    name: Annotated[str, typer.Argument(help="organisation name (unique)")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Create an organisation (tenant) and its first user API key (printed once)."""
    engine = _open(db)
    try:
        with store_engine.sessions(engine).begin() as session:
            org, key = repo.create_organization(session, name, datetime.now(UTC))
            org_id = org.id
    except repo.Conflict as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    if as_json:
        typer.echo(json.dumps({"org_id": org_id, "api_key": key}))
    else:
        typer.echo(f"organisation {name}: {org_id}\nAPI key (shown once): {key}")


@admin.command("create-cluster")
def create_cluster(
    name: Annotated[str, typer.Argument(help="cluster name (unique within the organisation)")],
    org: Annotated[str, typer.Option("--org", help="organisation id")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Register a cluster and issue its agent token (printed once)."""
    engine = _open(db)
    try:
        with store_engine.sessions(engine).begin() as session:
            cluster, token = repo.create_cluster(session, org, name, datetime.now(UTC))
            cluster_id = cluster.id
    except (repo.Conflict, repo.NotFound) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    if as_json:
        typer.echo(json.dumps({"cluster_id": cluster_id, "agent_token": token}))
    else:
        typer.echo(f"cluster {name}: {cluster_id}\nagent token (shown once): {token}")
