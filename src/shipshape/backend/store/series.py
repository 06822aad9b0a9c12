"""The queries of the per-cluster time series (`backend/series.py` decides what goes in): the only
SQL on `series_points`, as `repository.py` holds every other query. Reads below an organisation take
its `org_id`, so a query never reaches another tenant's points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from shipshape.backend.store import repository as repo
from shipshape.backend.store.models import SeriesPoint

KEY = ("cluster_id", "at", "resolution_seconds")


def add_points(session: Session, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert points (each a mapping of `SeriesPoint` columns); a point whose (cluster, time,
    resolution) is stored already is left as it is. Returns how many were new."""
    if not rows:
        return 0
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(SeriesPoint)
        .values(list(rows))
        .on_conflict_do_nothing(index_elements=list(KEY))
        .returning(SeriesPoint.cluster_id)
    )
    # The rows inserted are counted from RETURNING: the ORM's bulk path reports no rowcount on
    # PostgreSQL (-1). No evaluation against the objects in the session (their times may be naive
    # on SQLite).
    result = session.execute(statement, execution_options={"synchronize_session": False})
    return len(result.all())


def claim_point(session: Session, cluster_id: str, at: datetime) -> bool:
    """Whether this transaction may compute the cluster's point at `at`: False, without waiting,
    while another process's transaction computes it (a PostgreSQL advisory lock held until the
    transaction ends). The worker processes take the same clusters' points at the start of each
    minute, and both computed most of them before either had stored its own. SQLite serves one
    process: always True there."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    key = func.hashtext(f"shipshape.series:{cluster_id}:{int(at.timestamp())}")
    return bool(session.scalar(select(func.pg_try_advisory_xact_lock(key))))


def has_point(session: Session, cluster_id: str, at: datetime, resolution: int) -> bool:
    """Whether the cluster's point at `at` of `resolution` seconds is stored."""
    found = session.scalar(
        select(SeriesPoint.cluster_id).where(
            SeriesPoint.cluster_id == cluster_id,
            SeriesPoint.at == at,
            SeriesPoint.resolution_seconds == resolution,
        )
    )
    return found is not None


def points(
    session: Session, org_id: str, cluster_id: str, since: datetime, until: datetime
) -> list[SeriesPoint]:
    """The cluster's points at `since` <= time < `until`, oldest first (NotFound for another
    tenant's cluster, as for one that does not exist)."""
    repo.get_cluster(session, org_id, cluster_id)
    query = (
        select(SeriesPoint)
        .where(SeriesPoint.cluster_id == cluster_id, SeriesPoint.at >= since, SeriesPoint.at < until)
        .order_by(SeriesPoint.at, SeriesPoint.resolution_seconds)
    )
    return list(session.scalars(query))


def older_points(session: Session, resolution: int, before: datetime, limit: int) -> list[SeriesPoint]:
    """Up to `limit` points of one resolution older than `before`, by cluster and time (retention)."""
    query = (
        select(SeriesPoint)
        .where(SeriesPoint.resolution_seconds == resolution, SeriesPoint.at < before)
        .order_by(SeriesPoint.cluster_id, SeriesPoint.at)
        .limit(limit)
    )
    return list(session.scalars(query))


def delete_points(
    session: Session,
    resolution: int,
    before: datetime,
    *,
    cluster_id: str | None = None,
    since: datetime | None = None,
) -> int:
    """Delete the points of one resolution older than `before` (of one cluster, from `since`, when
    given); returns how many."""
    statement = delete(SeriesPoint).where(
        SeriesPoint.resolution_seconds == resolution, SeriesPoint.at < before
    )
    if cluster_id is not None:
        statement = statement.where(SeriesPoint.cluster_id == cluster_id)
    if since is not None:
        statement = statement.where(SeriesPoint.at >= since)
    # No evaluation against the objects in the session (their times may be naive on SQLite).
    result = session.execute(statement, execution_options={"synchronize_session": False})
    return int(getattr(result, "rowcount", 0) or 0)
