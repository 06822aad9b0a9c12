"""Every query of the backend, and the only module with SQL. Each function takes the caller's
Session (the caller owns the transaction) and, below an organisation, its `org_id`: a query never
reaches another tenant's rows."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Select,
    Update,
    any_,
    bindparam,
    delete,
    func,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from shipshape.backend import auth, pushbody
from shipshape.backend import usage as usage_store
from shipshape.backend.store.models import (
    AgentToken,
    ApiKey,
    Cluster,
    ClusterObject,
    InstructionRow,
    Organization,
    Push,
    RecommendationRow,
    UsageGpuChunk,
    UsageNodeChunk,
    UsageSeriesChunk,
    UsageWorkload,
)
from shipshape.contracts.instructions import InstructionOutcome, Recommendation
from shipshape.contracts.push import SNAPSHOT_SCHEMA, ClusterDelta, ClusterSnapshot, parse_push
from shipshape.contracts.usage import USAGE_SCHEMA, parse_usage


class NotFound(Exception):
    """No such object for this tenant (the same answer whether it exists elsewhere or not)."""


class Conflict(Exception):
    """The object exists already (a name taken within the organisation)."""


# ---- identity ------------------------------------------------------------------------------------


def create_organization(session: Session, name: str, now: datetime) -> tuple[Organization, str]:
    """A new organisation and its first user API key (plaintext returned once)."""
    org = Organization(id=str(uuid.uuid4()), name=name, created_at=now)
    session.add(org)
    try:
        session.flush()
    except IntegrityError as error:
        raise Conflict(f"an organisation named {name!r} exists") from error
    return org, create_api_key(session, org.id, "initial", now)


def create_api_key(session: Session, org_id: str, name: str, now: datetime) -> str:
    if session.get(Organization, org_id) is None:
        raise NotFound(f"organisation {org_id} not found")
    credential = auth.issue(auth.CredentialKind.USER_KEY)
    session.add(
        ApiKey(
            id=credential.id,
            org_id=org_id,
            name=name,
            secret_sha256=credential.secret_sha256,
            created_at=now,
        )
    )
    session.flush()
    return credential.plaintext


def create_cluster(session: Session, org_id: str, name: str, now: datetime) -> tuple[Cluster, str]:
    """A new cluster of `org_id` and its agent token (plaintext returned once)."""
    if session.get(Organization, org_id) is None:
        raise NotFound(f"organisation {org_id} not found")
    cluster = Cluster(
        id=str(uuid.uuid4()), org_id=org_id, name=name, created_at=now, node_count=0, pod_count=0
    )
    session.add(cluster)
    try:
        session.flush()
    except IntegrityError as error:
        raise Conflict(f"a cluster named {name!r} exists in this organisation") from error
    return cluster, _issue_agent_token(session, cluster.id, now)


def rotate_agent_token(session: Session, org_id: str, cluster_id: str, now: datetime) -> str:
    """A new token for the cluster; the old ones stop working at once."""
    cluster = get_cluster(session, org_id, cluster_id)
    session.execute(
        update(AgentToken)
        .where(AgentToken.cluster_id == cluster.id, AgentToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return _issue_agent_token(session, cluster.id, now)


def revoke_api_key(session: Session, org_id: str, key_id: str, now: datetime) -> None:
    key = session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.org_id == org_id))
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    key.revoked_at = key.revoked_at or now


def _issue_agent_token(session: Session, cluster_id: str, now: datetime) -> str:
    credential = auth.issue(auth.CredentialKind.AGENT_TOKEN)
    session.add(
        AgentToken(
            id=credential.id, cluster_id=cluster_id, secret_sha256=credential.secret_sha256, created_at=now
        )
    )
    session.flush()
    return credential.plaintext


@dataclass(frozen=True, slots=True)
class UserPrincipal:
    org_id: str
    key_id: str


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    org_id: str
    cluster_id: str
    token_id: str


def authenticate(
    session: Session, presented: auth.PresentedCredential
) -> UserPrincipal | AgentPrincipal | None:
    """The principal of a credential that is ours, live and not revoked; else None."""
    if presented.kind is auth.CredentialKind.USER_KEY:
        key = session.get(ApiKey, presented.id)
        if key is None or key.revoked_at is not None or not auth.matches(presented, key.secret_sha256):
            return None
        return UserPrincipal(org_id=key.org_id, key_id=key.id)
    row = session.execute(
        select(AgentToken, Cluster.org_id)
        .join(Cluster, Cluster.id == AgentToken.cluster_id)
        .where(AgentToken.id == presented.id)
    ).first()
    if row is None:
        return None
    token, org_id = row
    if token.revoked_at is not None or not auth.matches(presented, token.secret_sha256):
        return None
    return AgentPrincipal(org_id=org_id, cluster_id=token.cluster_id, token_id=token.id)


# ---- clusters ------------------------------------------------------------------------------------


def list_clusters(session: Session, org_id: str) -> list[Cluster]:
    return list(session.scalars(select(Cluster).where(Cluster.org_id == org_id).order_by(Cluster.name)))


def get_cluster(session: Session, org_id: str, cluster_id: str) -> Cluster:
    cluster = session.scalar(select(Cluster).where(Cluster.id == cluster_id, Cluster.org_id == org_id))
    if cluster is None:
        raise NotFound(f"cluster {cluster_id} not found")
    return cluster


def cluster_org(session: Session, cluster_id: str) -> str:
    """The organisation of a cluster (for internal callers that start from a cluster id)."""
    org_id = session.scalar(select(Cluster.org_id).where(Cluster.id == cluster_id))
    if org_id is None:
        raise NotFound(f"cluster {cluster_id} not found")
    return org_id


def _take_cluster_lock(session: Session, cluster_id: str) -> None:
    """On SQLite, which has no row locks (`FOR UPDATE` is ignored), take the database's write lock now
    with a write that changes nothing: the transaction then runs alone among writers and reads what
    the one before it committed. Without it two workers of one process read the same usage chunk,
    merge their own bucket and the later commit drops the other's (a lost update). PostgreSQL's
    `FOR UPDATE` on the row does this per cluster."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(update(Cluster).where(Cluster.id == cluster_id).values(id=Cluster.id))


def lock_cluster(session: Session, cluster_id: str) -> str:
    """Lock the cluster's row for this transaction (one analysis at a time); returns its organisation."""
    _take_cluster_lock(session, cluster_id)
    org_id = session.scalar(
        select(Cluster.org_id).where(Cluster.id == cluster_id).with_for_update(key_share=True)
    )
    if org_id is None:
        raise NotFound(f"cluster {cluster_id} not found")
    return org_id


@dataclass(frozen=True, slots=True)
class AnalysisState:
    """A cluster's row as the spot analysis needs it (read under the row's lock)."""

    org_id: str
    applied_sequence: int | None
    analyzed_at: datetime | None
    analyzed_sequence: int | None


def claim_analysis(session: Session, cluster_id: str) -> bool:
    """Whether this transaction may analyse the cluster now: False, without waiting, while another
    process's transaction analyses it (a PostgreSQL advisory lock held until the transaction ends).
    Waiting for that one (seconds, under load) held up the analyses of every other cluster queued
    behind it, only to find the state analysed. SQLite serves one process: always True there."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    key = func.hashtext(f"shipshape.analysis:{cluster_id}")
    return bool(session.scalar(select(func.pg_try_advisory_xact_lock(key))))


def lock_for_analysis(session: Session, cluster_id: str) -> AnalysisState:
    """Lock the cluster's row for this transaction (after the push being applied, or the analysis
    another process is running) and read its analysis state."""
    _take_cluster_lock(session, cluster_id)
    row = session.execute(
        select(Cluster.org_id, Cluster.applied_sequence, Cluster.analyzed_at, Cluster.analyzed_sequence)
        .where(Cluster.id == cluster_id)
        .with_for_update(key_share=True)
    ).first()
    if row is None:
        raise NotFound(f"cluster {cluster_id} not found")
    org_id, applied, analyzed_at, analyzed_sequence = row
    return AnalysisState(
        org_id, applied, None if analyzed_at is None else as_utc(analyzed_at), analyzed_sequence
    )


def mark_analyzed(session: Session, cluster_id: str, now: datetime, sequence: int | None) -> None:
    session.execute(
        update(Cluster).where(Cluster.id == cluster_id).values(analyzed_at=now, analyzed_sequence=sequence)
    )


def cluster_objects(
    session: Session, org_id: str, cluster_id: str, kind: str | None = None
) -> list[dict[str, Any]]:
    """The stored objects of a cluster (of one kind), ordered by kind, namespace and name."""
    get_cluster(session, org_id, cluster_id)
    query = select(ClusterObject.body).where(ClusterObject.cluster_id == cluster_id)
    if kind is not None:
        query = query.where(ClusterObject.kind == kind)
    query = query.order_by(ClusterObject.kind, ClusterObject.namespace, ClusterObject.name)
    return list(session.scalars(query))


# ---- pushes --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded:
    push_id: int
    duplicate: bool


def record_push(
    session: Session,
    cluster_id: str,
    idempotency_key: str,
    schema_name: str,
    sequence: int,
    body_gzip: bytes,
    now: datetime,
) -> Recorded:
    """Store an accepted push once per (cluster, idempotency key); a replay returns the first one.

    One statement (`INSERT … ON CONFLICT DO NOTHING RETURNING`, PostgreSQL and SQLite alike) instead of
    a look-up, a savepoint, the insert and its release: four round trips to the database were most of
    the time an API process spent accepting a delta. A key racing in from another API process waits
    for that one's transaction and then finds its push.
    """
    dialect_insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    push_id = session.scalar(
        dialect_insert(Push)
        .values(
            cluster_id=cluster_id,
            idempotency_key=idempotency_key,
            schema_name=schema_name,
            sequence=sequence,
            received_at=now,
            body_gzip=body_gzip,
        )
        .on_conflict_do_nothing(index_elements=[Push.cluster_id, Push.idempotency_key])
        .returning(Push.id)
    )
    if push_id is None:
        existing = session.scalar(
            select(Push.id).where(Push.cluster_id == cluster_id, Push.idempotency_key == idempotency_key)
        )
        assert existing is not None  # the conflicting row, committed
        return Recorded(existing, duplicate=True)
    _seen(session, cluster_id, now)
    return Recorded(push_id, duplicate=False)


_PUSHES = Push.metadata.tables[Push.__tablename__]
# The accept of a push on PostgreSQL, in one statement and so one round trip, in autocommit: the agent
# token still live (it may have been revoked since the caller verified its secret), the push stored
# once per key, the cluster's `last_seen` set unless a worker holds its row (as `_seen` says), and the
# id of a push stored before under this key (the statement's snapshot does not see its own insert).
# In psycopg's form, run as it is by the thread pool's connections (`accept_push`, through
# SQLAlchemy's `exec_driver_sql`) and by the API's asyncio ones (`accept_push_async`, prepared).
_ACCEPT_POSTGRESQL = """
    WITH token AS (
        SELECT cluster_id FROM agent_tokens
        WHERE id = %(token_id)s AND cluster_id = %(cluster_id)s AND revoked_at IS NULL
    ), inserted AS (
        INSERT INTO pushes (cluster_id, idempotency_key, schema_name, sequence, received_at, body_gzip)
        SELECT cluster_id, %(key)s, %(schema_name)s, %(sequence)s, %(now)s, %(body)s FROM token
        ON CONFLICT (cluster_id, idempotency_key) DO NOTHING
        RETURNING id
    ), seen AS (
        UPDATE clusters SET last_seen = %(now)s
        WHERE id = (SELECT id FROM clusters WHERE id = %(cluster_id)s FOR NO KEY UPDATE SKIP LOCKED)
        AND EXISTS (SELECT FROM inserted)
    )
    SELECT
        (SELECT id FROM inserted),
        EXISTS (SELECT FROM token),
        (SELECT id FROM pushes WHERE cluster_id = %(cluster_id)s AND idempotency_key = %(key)s)
"""
_EXISTING_POSTGRESQL = "SELECT id FROM pushes WHERE cluster_id = %(cluster_id)s AND idempotency_key = %(key)s"
# SQLite has no data-modifying CTE: the insert (when the token is live), then what `_seen` does, in
# the caller's transaction (SQLite takes one writer at a time anyway).
_ACCEPT_SQLITE = text(
    """
    INSERT INTO pushes (cluster_id, idempotency_key, schema_name, sequence, received_at, body_gzip)
    SELECT cluster_id, :key, :schema_name, :sequence, :now, :body FROM agent_tokens
    WHERE id = :token_id AND cluster_id = :cluster_id AND revoked_at IS NULL
    ON CONFLICT (cluster_id, idempotency_key) DO NOTHING
    RETURNING id
    """
).bindparams(
    bindparam("now", type_=_PUSHES.c.received_at.type), bindparam("body", type_=_PUSHES.c.body_gzip.type)
)


def _accept_params(
    token_id: str,
    cluster_id: str,
    idempotency_key: str,
    schema_name: str,
    sequence: int,
    body: bytes,
    now: datetime,
) -> dict[str, Any]:
    """The accept statement's parameters (`accept_push`, `accept_push_async`)."""
    return {
        "token_id": token_id,
        "cluster_id": cluster_id,
        "key": idempotency_key,
        "schema_name": schema_name,
        "sequence": sequence,
        "now": now,
        "body": body,
    }


def accept_push(
    connection: Connection,
    token_id: str,
    cluster_id: str,
    idempotency_key: str,
    schema_name: str,
    sequence: int,
    body: bytes,
    now: datetime,
) -> Recorded | None:
    """`record_push` for the API, by the agent token `token_id` of `cluster_id`, whose secret the
    caller verified (perhaps a while ago: `auth.Verified`): None, and nothing stored, when that token
    is revoked by now. On PostgreSQL one statement in `connection`, which should be in autocommit (a
    transaction of its own, and no round trips to begin and commit it); on SQLite the caller commits.
    """
    params = _accept_params(token_id, cluster_id, idempotency_key, schema_name, sequence, body, now)
    if connection.dialect.name == "postgresql":
        push_id, live, existing = connection.exec_driver_sql(_ACCEPT_POSTGRESQL, params).one()
        if not live:
            return None
        if push_id is not None:
            return Recorded(push_id, duplicate=False)
    else:
        push_id = connection.execute(_ACCEPT_SQLITE, params).scalar()
        if push_id is not None:
            _seen(connection, cluster_id, now)
            return Recorded(push_id, duplicate=False)
        live = connection.scalar(
            select(AgentToken.id).where(
                AgentToken.id == token_id,
                AgentToken.cluster_id == cluster_id,
                AgentToken.revoked_at.is_(None),
            )
        )
        if live is None:
            return None
        existing = None
    if existing is None:
        # Stored by another API process while this statement ran (it waited for that one's commit).
        existing = connection.scalar(
            select(Push.id).where(Push.cluster_id == cluster_id, Push.idempotency_key == idempotency_key)
        )
    assert existing is not None  # the conflicting row, committed
    return Recorded(existing, duplicate=True)


async def accept_push_async(
    connection: psycopg.AsyncConnection[Any],
    token_id: str,
    cluster_id: str,
    idempotency_key: str,
    schema_name: str,
    sequence: int,
    body: bytes,
    now: datetime,
) -> Recorded | None:
    """`accept_push` on PostgreSQL through psycopg's asyncio connection in autocommit (the API's
    accept of a small push on the event loop): the same statement, prepared once per connection."""
    params = _accept_params(token_id, cluster_id, idempotency_key, schema_name, sequence, body, now)
    cursor = await connection.execute(_ACCEPT_POSTGRESQL, params, prepare=True)
    row = await cursor.fetchone()
    assert row is not None  # the statement answers one row
    push_id, live, existing = row
    if not live:
        return None
    if push_id is not None:
        return Recorded(push_id, duplicate=False)
    if existing is None:
        # Stored by another API process while this statement ran (it waited for that one's commit).
        cursor = await connection.execute(_EXISTING_POSTGRESQL, params)
        found = await cursor.fetchone()
        assert found is not None  # the conflicting row, committed
        existing = found[0]
    return Recorded(existing, duplicate=True)


def _seen(session: Session | Connection, cluster_id: str, now: datetime) -> None:
    """The cluster's `last_seen`, unless its row is locked (PostgreSQL): a worker applying a push or
    analysing the cluster holds the lock for up to a second, and an accept waited for it (its 202 with
    it). The worker that holds it sets `last_seen` itself from the pushes it applies, this one's
    included (`apply_pushes`). SQLite has one writer at a time anyway: the update waits for nothing."""
    clusters = Cluster.metadata.tables[Cluster.__tablename__]
    dialect = session.dialect if isinstance(session, Connection) else session.get_bind().dialect
    if dialect.name != "postgresql":
        session.execute(update(clusters).where(clusters.c.id == cluster_id).values(last_seen=now))
        return
    free = select(clusters.c.id).where(clusters.c.id == cluster_id)
    free = free.with_for_update(skip_locked=True, key_share=True)
    session.execute(update(clusters).where(clusters.c.id == free.scalar_subquery()).values(last_seen=now))


class NotYet(Exception):
    """A delta arrived before the push it follows: try again later (the queue redelivers)."""


# The outcome of a job whose push is a delta that arrived before the push it follows.
NOT_YET = "not-yet"


def apply_pushes(session: Session, push_id: int, now: datetime, usage_step: int = 300) -> str:
    """`apply_cluster` for one push: its outcome; NotYet when it is a delta whose base has not
    arrived yet."""
    cluster_id = session.scalar(select(Push.cluster_id).where(Push.id == push_id))
    if cluster_id is None:
        return "gone"  # removed by retention before it was processed
    outcome = apply_cluster(session, cluster_id, [push_id], now, usage_step)[push_id]
    if outcome == NOT_YET:
        raise NotYet(f"push {push_id} follows a push not applied yet")
    return outcome


# Tables for Core statements: thousands of rows need no ORM bookkeeping.
_CLUSTERS = Cluster.metadata.tables[Cluster.__tablename__]
_PUSHES = Push.metadata.tables[Push.__tablename__]
_OBJECTS = ClusterObject.metadata.tables[ClusterObject.__tablename__]
_OBJECT_KEY = tuple_(_OBJECTS.c.kind, _OBJECTS.c.namespace, _OBJECTS.c.name)
# The apply's statements, built once: building a statement (and its cache key) took about as much of
# a worker's CPU per transaction as the database round trips did.
# FOR NO KEY UPDATE (`key_share`), as every cluster lock here: it keeps the cluster's writers one at a
# time, and lets the API insert pushes meanwhile (the foreign key check of an insert takes a KEY SHARE
# lock on the cluster's row, which FOR UPDATE blocked: every accept waited for the apply or analysis
# in progress, the bench's accept rate with it).
_LOCK_FOR_APPLY = (
    select(
        _CLUSTERS.c.applied_sequence,
        _CLUSTERS.c.node_count,
        _CLUSTERS.c.pod_count,
        _CLUSTERS.c.last_seen,
        _CLUSTERS.c.analyzed_sequence,
        _CLUSTERS.c.objects_revision,
    )
    .where(_CLUSTERS.c.id == bindparam("cluster"))
    .with_for_update(key_share=True)
)
_PENDING = (
    select(_PUSHES.c.id, _PUSHES.c.sequence, _PUSHES.c.schema_name, _PUSHES.c.received_at)
    .where(_PUSHES.c.cluster_id == bindparam("cluster"), _PUSHES.c.processed_at.is_(None))
    .order_by(_PUSHES.c.sequence, _PUSHES.c.id)
)


@dataclass(frozen=True, slots=True)
class _ByIds:
    """The statements of an apply that name pushes by id (the `ids` parameter)."""

    present: Select[Any]
    bodies: Select[Any]
    mark: Update

    @classmethod
    def of(cls, named: ColumnElement[bool]) -> _ByIds:
        return cls(
            select(_PUSHES.c.id).where(named),
            select(_PUSHES.c.id, _PUSHES.c.body_gzip).where(named),
            update(_PUSHES).where(named).values(processed_at=bindparam("at"), outcome=bindparam("result")),
        )


# By PostgreSQL or not: on PostgreSQL the ids go as one array parameter (`= ANY`), one statement text
# whatever their number, which psycopg prepares once per connection; an expanding IN list (SQLite) is
# a statement of its own for each count of ids (parsed and planned again by PostgreSQL, rewritten by
# SQLAlchemy on each call).
_BY_IDS = {
    False: _ByIds.of(_PUSHES.c.id.in_(bindparam("ids", expanding=True))),
    True: _ByIds.of(_PUSHES.c.id == any_(bindparam("ids", type_=postgresql.ARRAY(BigInteger)))),
}
# The cluster's row after an apply, every column the apply may change in one statement built once (a
# statement built for the columns that changed took the worker as long as executing it); the columns
# an apply leaves alone are written as they were read under the row's lock.
_UPDATE_CLUSTER = (
    update(_CLUSTERS)
    .where(_CLUSTERS.c.id == bindparam("cluster_id_"))
    .values(
        applied_sequence=bindparam("applied_sequence_"),
        node_count=bindparam("node_count_"),
        pod_count=bindparam("pod_count_"),
        analyzed_sequence=bindparam("analyzed_sequence_"),
        objects_revision=bindparam("objects_revision_"),
        last_seen=bindparam("last_seen_", type_=_CLUSTERS.c.last_seen.type),
    )
)
_DIGESTS = select(_OBJECTS.c.kind, _OBJECTS.c.namespace, _OBJECTS.c.name, _OBJECTS.c.digest).where(
    _OBJECTS.c.cluster_id == bindparam("cluster")
)
_DELETE_OBJECTS = (
    delete(_OBJECTS)
    .where(_OBJECTS.c.cluster_id == bindparam("cluster"), _OBJECT_KEY.in_(bindparam("keys", expanding=True)))
    .returning(_OBJECTS.c.kind)
)
# Elsewhere (SQLite) the rows go in as `_json` wrote their bodies (what the JSON column's own
# serializer, orjson too, would write again).
_INSERT_OBJECTS = text(
    "INSERT INTO cluster_objects (cluster_id, kind, namespace, name, body, digest, revision) "
    "VALUES (:cluster_id, :kind, :namespace, :name, :json, :digest, :revision)"
).bindparams(bindparam("digest", type_=_OBJECTS.c.digest.type))
# On PostgreSQL the rows of a batch go in one statement whatever their number: an upsert (a changed
# object's row is updated in place, not deleted and inserted again) and a delete of the objects gone.
# The row-value IN list of `_DELETE_OBJECTS` took PostgreSQL 5-18 ms for 20 keys (a new plan for each
# length, filtering the cluster's rows), and the inserts went one row per statement. The keys go as
# one JSON document (written by orjson, read by PostgreSQL in C as records: a third less of its time
# than taking each field of each element with `->`), the bodies beside it as an array of bytea, which
# psycopg sends in binary (length and bytes: nothing escaped in Python, as a text array's elements
# were, at more than the rest of the apply's cost; `%(bodies)b` asks for binary, which psycopg does not
# choose for a list by itself, hence a driver-level statement) and `ROWS FROM` pairs with the keys in
# order.
# Bodies inside the document were parsed twice by PostgreSQL (the document, then each body as json):
# a quarter of its CPU per 10-pod upsert. Each statement answers a row per kind written (rows
# inserted, rows written) rather than one per row: fetching a row per object through psycopg and
# SQLAlchemy cost the worker more than the rest of the statement.
_UPSERT_OBJECTS_PG = """
    WITH written AS (
        INSERT INTO cluster_objects (cluster_id, kind, namespace, name, body, digest, revision)
        SELECT %(cluster)s, r.kind, r.namespace, r.name, convert_from(r.body, 'UTF8')::json,
            decode(r.digest, 'hex'), %(revision)s
        FROM ROWS FROM (
            json_to_recordset(CAST(%(keys)s AS json)) AS (kind text, namespace text, name text, digest text),
            unnest(CAST(%(bodies)b AS bytea[]))
        ) AS r(kind, namespace, name, digest, body)
        ON CONFLICT (cluster_id, kind, namespace, name) DO UPDATE
        SET body = excluded.body, digest = excluded.digest, revision = excluded.revision
        RETURNING kind, (xmax = 0) AS inserted
    )
    SELECT kind, count(*) FILTER (WHERE inserted), count(*) FROM written GROUP BY kind
"""
_DELETE_OBJECTS_PG = text(
    """
    WITH deleted AS (
        DELETE FROM cluster_objects AS o
        USING json_to_recordset(CAST(:keys AS json)) AS k(kind text, namespace text, name text)
        WHERE o.cluster_id = :cluster AND o.kind = k.kind AND o.namespace = k.namespace AND o.name = k.name
        RETURNING o.kind
    )
    SELECT kind, count(*) FROM deleted GROUP BY kind
    """
)


@dataclass(slots=True)
class _Pending:
    id: int
    sequence: int
    schema_name: str
    received_at: datetime


@dataclass(slots=True)
class Written:
    """The objects an apply wrote, as their bodies, and the revision their rows carry: filled by
    `apply_cluster` for a caller that keeps a copy of the cluster's objects (`ObjectsCache.note`),
    so that the copy takes them from here rather than reading and parsing them again. Every row
    written at `revision` is in `bodies` (deleted ones are not: their rows are gone)."""

    revision: int = 0
    bodies: dict[pushbody.Key, dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class _Applying:
    """The cluster's row as an apply changes it (written back in one UPDATE)."""

    connection: Connection
    applied_sequence: int | None
    node_count: int
    pod_count: int
    # The revision the rows written by this apply carry (the cluster's `objects_revision` + 1).
    revision: int
    # Delta changes not written yet, the last one per object: its body and the JSON `_json` wrote of
    # it (None: deleted).
    changes: dict[pushbody.Key, tuple[dict[str, Any], bytes] | None]
    # Rows deleted, inserted or updated so far: none means the stored objects are as they were.
    written: int = 0
    # The bodies of the rows written, when the caller asked for them (`apply_cluster`'s `written`).
    bodies: dict[pushbody.Key, dict[str, Any]] | None = None

    @property
    def postgres(self) -> bool:
        return self.connection.dialect.name == "postgresql"

    def count(self, kind: str, by: int, rows: int = 1) -> None:
        """`rows` rows of `kind` written, which changed the number of objects of `kind` by `by`: +1 a
        row inserted, -1 deleted, 0 updated."""
        self.written += rows
        if kind == "nodes":
            self.node_count += by
        elif kind == "pods":
            self.pod_count += by


def apply_cluster(
    session: Session,
    cluster_id: str,
    push_ids: Collection[int],
    now: datetime,
    usage_step: int = 300,
    written: Written | None = None,
) -> dict[int, str]:
    """Apply the stored pushes `push_ids` of the cluster, and every other unprocessed push of it that
    can be applied now, in sequence order, in the caller's transaction; returns the outcome of each of
    `push_ids`: `applied`, `superseded`, `stale`, `invalid`, `rejected` (a usage report), `duplicate`
    (processed before), `gone` (removed by retention) or `not-yet` (a delta whose base has not
    arrived: its job is tried again later). A usage report stands on its own (no chain): it is merged
    into the cluster's usage series on slots of `usage_step` seconds. `written`, when given, gets the
    bodies of the objects written and their rows' revision (valid once the transaction commits).

    Pushes of one cluster form a chain (a delta follows the push it names), so whichever worker holds
    the cluster's row lock applies what is ready in order; pushes older than a snapshot also waiting
    are `superseded` by it (not read: the snapshot holds their effect). The deltas applied are folded
    into the last change of each object and written together (one DELETE and one INSERT for the
    whole chain); a snapshot rewrites only the objects that changed (`pushbody`). The pushes' marks,
    the cluster's sequence, counts and `last_seen` are a few statements for the whole batch: a worker
    that takes the pushes of a cluster waiting together pays one transaction for them, not one each.
    """
    wanted = set(push_ids)
    _take_cluster_lock(session, cluster_id)
    connection = session.connection()
    row = connection.execute(_LOCK_FOR_APPLY, {"cluster": cluster_id}).first()
    if row is None:
        return dict.fromkeys(wanted, "gone")
    state = _Applying(
        connection,
        row.applied_sequence,
        row.node_count or 0,
        row.pod_count or 0,
        (row.objects_revision or 0) + 1,
        {},
        bodies=None if written is None else {},
    )
    pending = [_Pending(*p) for p in connection.execute(_PENDING, {"cluster": cluster_id})]
    outcomes: dict[int, str] = {}
    waiting = {p.id for p in pending}
    missing = wanted - waiting
    if missing:
        # Processed before (by the worker that held the lock before us), or removed by retention.
        present = set(connection.scalars(_BY_IDS[state.postgres].present, {"ids": sorted(missing)}))
        outcomes.update({i: "duplicate" if i in present else "gone" for i in missing})
    usage = [p for p in pending if p.schema_name == USAGE_SCHEMA and p.id in wanted]
    chain = [p for p in pending if p.schema_name != USAGE_SCHEMA]
    if not chain and not usage:
        return outcomes
    # A snapshot replaces the whole state: the pushes before the newest one waiting are not applied
    # (an agent draining its spool, or a backlog of snapshots, costs one replacement, not one each).
    newest = max((p.sequence for p in chain if p.schema_name == SNAPSHOT_SCHEMA), default=None)
    marks: dict[int, str] = {}
    applying = []
    for candidate in chain:
        if newest is not None and candidate.sequence < newest:
            marks[candidate.id] = "superseded"
        else:
            applying.append(candidate)
    bodies = _bodies(state, [p.id for p in applying] + [p.id for p in usage])
    for candidate in applying:
        outcome = _apply_one(cluster_id, state, candidate, bodies[candidate.id])
        if outcome != NOT_YET:
            marks[candidate.id] = outcome
    _write_changes(cluster_id, state)
    for report in usage:
        marks[report.id] = _apply_usage(session, cluster_id, bodies[report.id], usage_step)
    by_outcome: dict[str, list[int]] = {}
    for push_id, outcome in marks.items():
        by_outcome.setdefault(outcome, []).append(push_id)
    for outcome, ids in by_outcome.items():
        for start in range(0, len(ids), _KEYS_PER_STATEMENT):
            chunk = ids[start : start + _KEYS_PER_STATEMENT]
            connection.execute(_BY_IDS[state.postgres].mark, {"ids": chunk, "at": now, "result": outcome})
    moved = state.applied_sequence != row.applied_sequence
    analyzed_sequence = row.analyzed_sequence
    if (
        moved
        and not state.written
        and row.applied_sequence is not None
        and row.analyzed_sequence == row.applied_sequence
    ):
        # Nothing changed (a periodic snapshot of a cluster the deltas kept current): the analysis of
        # the state before stands for this one, and is not run again.
        analyzed_sequence = state.applied_sequence
    # An accept that found the row locked left `last_seen` to whoever held the lock (`_seen`).
    last_seen = row.last_seen
    received = max((as_utc(p.received_at) for p in pending), default=None)
    if received is not None and (row.last_seen is None or as_utc(row.last_seen) < received):
        last_seen = received
    if moved or state.written or last_seen is not row.last_seen:
        connection.execute(
            _UPDATE_CLUSTER,
            {
                "cluster_id_": cluster_id,
                "applied_sequence_": state.applied_sequence,
                # The counts follow the rows written when the sequence moves on (as they always did).
                "node_count_": state.node_count if moved else row.node_count,
                "pod_count_": state.pod_count if moved else row.pod_count,
                "analyzed_sequence_": analyzed_sequence,
                "objects_revision_": state.revision if state.written else row.objects_revision,
                "last_seen_": last_seen,
            },
        )
    if written is not None and state.written and state.bodies:
        written.revision, written.bodies = state.revision, state.bodies
    for push_id in wanted:
        if push_id not in outcomes:
            outcome = marks.get(push_id, NOT_YET)
            outcomes[push_id] = "invalid" if outcome.startswith("invalid") else outcome.split(":")[0]
    return outcomes


def _bodies(state: _Applying, push_ids: list[int]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    statement = _BY_IDS[state.postgres].bodies
    for start in range(0, len(push_ids), _KEYS_PER_STATEMENT):
        chunk = push_ids[start : start + _KEYS_PER_STATEMENT]
        for push_id, body in state.connection.execute(statement, {"ids": chunk}):
            out[push_id] = body
    return out


def _apply_one(cluster_id: str, state: _Applying, push: _Pending, stored: bytes) -> str:
    """Apply one push of the chain to `state` (a delta's changes are folded, written later); its
    outcome, as stored on the push (NOT_YET: a delta whose base is not applied)."""
    try:
        body = pushbody.inflate(stored)
        objects = pushbody.read_snapshot(body) if push.schema_name == SNAPSHOT_SCHEMA else None
        if objects is None:
            message = parse_push(orjson.loads(body))
            if isinstance(message, ClusterSnapshot):
                objects = pushbody.snapshot_objects(message)
        applied = state.applied_sequence
        if objects is not None:
            if applied is not None and objects.sequence < applied:
                return "stale"
            _write_changes(cluster_id, state)
            _replace_objects(cluster_id, state, objects)
            state.applied_sequence = objects.sequence
            return "applied"
    except (orjson.JSONDecodeError, ValueError) as error:
        # The API validated it; a body that reads back otherwise (a number out of range in a field the
        # API's fast check skips) is set aside rather than retried for ever.
        return f"invalid: {error}"[:256]
    assert isinstance(message, ClusterDelta)
    if applied is not None and message.sequence <= applied:
        return "stale"
    if applied is None or message.base_sequence > applied:
        return NOT_YET
    if message.base_sequence < applied:
        return "stale"  # a snapshot newer than its base replaced the state already
    try:
        written = [
            (change.key_tuple(), None if change.type == "DELETED" else (change.object, _json(change.object)))
            for change in message.changes
        ]
    except ValueError as error:
        return f"invalid: {error}"[:256]
    state.changes.update(written)
    state.applied_sequence = message.sequence
    return "applied"


def _json(body: dict[str, Any]) -> bytes:
    """An object's body as stored, or ValueError when it cannot be written: nested deeper than the
    encoder goes (255 levels), which the API's parse (1,024 levels) lets through. Such a push is set
    aside as invalid; otherwise its write would fail its cluster's apply for ever, and the pushes
    after it with it."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as error:
        raise ValueError(f"an object cannot be stored: {error}") from error


def _delete_objects(cluster_id: str, state: _Applying, keys: list[pushbody.Key]) -> None:
    """Delete the rows of `keys` that exist, counting the nodes and pods among them."""
    if not keys:
        return
    if state.postgres:
        document = orjson.dumps([{"kind": k, "namespace": ns, "name": n} for k, ns, n in keys])
        deleted = state.connection.execute(
            _DELETE_OBJECTS_PG, {"cluster": cluster_id, "keys": document.decode()}
        )
        for kind, total in deleted:
            state.count(kind, -total, total)
        return
    for start in range(0, len(keys), _KEYS_PER_STATEMENT):
        chunk = keys[start : start + _KEYS_PER_STATEMENT]
        for kind in state.connection.scalars(_DELETE_OBJECTS, {"cluster": cluster_id, "keys": chunk}):
            state.count(kind, -1)


def _write_objects(cluster_id: str, state: _Applying, rows: list[dict[str, Any]]) -> None:
    """Make each row's object stored as the row says (inserted, or its stored row replaced), with the
    apply's revision. On PostgreSQL one upsert; elsewhere the stored rows go and the new ones come."""
    if not rows:
        return
    if state.bodies is not None:
        state.bodies.update({(row["kind"], row["namespace"], row["name"]): row["body"] for row in rows})
    if state.postgres:
        keys = orjson.dumps(
            [
                {
                    "kind": row["kind"],
                    "namespace": row["namespace"],
                    "name": row["name"],
                    "digest": _hex(row["digest"]),
                }
                for row in rows
            ]
        )
        # The bodies in the keys' order (`ROWS FROM` pairs them by position), as `_json` wrote them.
        bodies = [row["json"] for row in rows]
        written = state.connection.exec_driver_sql(
            _UPSERT_OBJECTS_PG,
            {"cluster": cluster_id, "revision": state.revision, "keys": keys.decode(), "bodies": bodies},
        )
        for kind, inserted, total in written:
            state.count(kind, inserted, total)
        return
    _delete_objects(cluster_id, state, [(row["kind"], row["namespace"], row["name"]) for row in rows])
    state.connection.execute(
        _INSERT_OBJECTS,
        [{**row, "body": None, "json": row["json"].decode(), "revision": state.revision} for row in rows],
    )
    for row in rows:
        state.count(row["kind"], 1)


def _hex(digest: bytes | None) -> str | None:
    return None if digest is None else digest.hex()


def _write_changes(cluster_id: str, state: _Applying) -> None:
    """Write the folded delta changes: the deleted objects' rows go, the others are written with no
    digest (a delta's objects are not raw JSON)."""
    if not state.changes:
        return
    _delete_objects(cluster_id, state, [key for key, change in state.changes.items() if change is None])
    rows = [
        {
            "cluster_id": cluster_id,
            "kind": k,
            "namespace": ns,
            "name": n,
            "json": change[1],
            "digest": None,
            "body": change[0],
        }
        for (k, ns, n), change in state.changes.items()
        if change is not None
    ]
    _write_objects(cluster_id, state, rows)
    state.changes = {}


def _replace_objects(cluster_id: str, state: _Applying, snapshot: pushbody.SnapshotObjects) -> None:
    """Make the stored objects the snapshot's, writing only what differs: rows of objects it does not
    hold go, rows whose digest differs from the object's are written again, new objects come."""
    stored = {
        (kind, namespace, name): digest
        for kind, namespace, name, digest in state.connection.execute(_DIGESTS, {"cluster": cluster_id})
    }
    changed = [
        key
        for key, obj in snapshot.objects.items()
        if key not in stored or stored[key] is None or stored[key] != obj.digest
    ]
    # Parsed and written out before anything is stored: an object that does not read back, or cannot
    # be written, makes the push invalid.
    rows = []
    for key in changed:
        body = snapshot.objects[key].body()
        rows.append(
            {
                "cluster_id": cluster_id,
                "kind": key[0],
                "namespace": key[1],
                "name": key[2],
                "json": _json(body),
                "digest": snapshot.objects[key].digest,
                "body": body,
            }
        )
    _delete_objects(cluster_id, state, [key for key in stored if key not in snapshot.objects])
    _write_objects(cluster_id, state, rows)


# Object keys named in one DELETE (three parameters each: well within SQLite's and PostgreSQL's limits).
_KEYS_PER_STATEMENT = 500


def unprocessed_pushes(session: Session, received_before: datetime, limit: int = 1000) -> list[int]:
    """Pushes stored before `received_before` but not processed yet (a queue message lost with a
    crashed API process, or a delta still waiting for its base)."""
    query = (
        select(Push.id)
        .where(Push.processed_at.is_(None), Push.received_at < received_before)
        .order_by(Push.id)
        .limit(limit)
    )
    return list(session.scalars(query))


def expire_pushes(session: Session, before: datetime) -> int:
    """Retention: raw pushes processed before `before` are removed (the state stays)."""
    result = session.execute(delete(Push).where(Push.processed_at.is_not(None), Push.received_at < before))
    return int(getattr(result, "rowcount", 0) or 0)


def push_clusters(session: Session, push_ids: list[int]) -> dict[int, str]:
    """The cluster of each push."""
    if not push_ids:
        return {}
    rows = session.execute(select(Push.id, Push.cluster_id).where(Push.id.in_(push_ids))).all()
    return {push_id: cluster_id for push_id, cluster_id in rows}


# ---- usage ---------------------------------------------------------------------------------------


def as_utc(moment: datetime) -> datetime:
    """SQLite hands times back without their zone; they were stored in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _apply_usage(session: Session, cluster_id: str, stored: bytes, step: int) -> str:
    """Merge one usage report into the cluster's summaries and series chunks (`backend/usage.py`);
    the outcome to store on its push."""
    report = parse_usage(orjson.loads(pushbody.inflate(stored)))
    try:
        folded = usage_store.fold(report, step)
    except usage_store.UsageStoreError as error:
        return f"rejected: {error}"[:256]
    keys = set(folded.workloads)
    chunks = {
        usage_store.SeriesKey(r.namespace, r.workload_kind, r.workload_name, r.container): r
        for r in session.scalars(
            select(UsageSeriesChunk).where(
                UsageSeriesChunk.cluster_id == cluster_id, UsageSeriesChunk.chunk_start == folded.chunk_start
            )
        )
        if r.step_seconds == step
    }
    summaries = {
        usage_store.SeriesKey(r.namespace, r.workload_kind, r.workload_name, r.container): r
        for r in session.scalars(select(UsageWorkload).where(UsageWorkload.cluster_id == cluster_id))
    }
    slot_start, bucket_end = _at(folded.slot_start), _at(folded.bucket_end)
    for key in sorted(keys):
        part = folded.workloads[key]
        row = chunks.get(key)
        chunk = usage_store.Chunk.empty() if row is None else usage_store.Chunk.from_bytes(row.body)
        chunk.merge(folded.slot, part)
        if row is None:
            session.add(
                UsageSeriesChunk(
                    cluster_id=cluster_id,
                    namespace=key.namespace,
                    workload_kind=key.kind,
                    workload_name=key.workload,
                    container=key.container,
                    chunk_start=folded.chunk_start,
                    step_seconds=step,
                    body=chunk.to_bytes(),
                )
            )
        else:
            row.body = chunk.to_bytes()
        summary = summaries.get(key)
        if summary is None:
            session.add(
                UsageWorkload(
                    cluster_id=cluster_id,
                    namespace=key.namespace,
                    workload_kind=key.kind,
                    workload_name=key.workload,
                    container=key.container,
                    first_sample_at=slot_start,
                    last_sample_at=bucket_end,
                    samples=part.samples,
                    buckets=1,
                    pods_last=part.pods,
                    cpu_max=part.cpu_max,
                    memory_max=part.memory_max,
                    memory_max_at=bucket_end,
                )
            )
            continue
        if bucket_end >= as_utc(summary.last_sample_at):
            summary.last_sample_at, summary.pods_last = bucket_end, part.pods
        summary.first_sample_at = min(as_utc(summary.first_sample_at), slot_start)
        summary.samples += part.samples
        summary.buckets += 1
        summary.cpu_max = max(summary.cpu_max, part.cpu_max)
        if part.memory_max > summary.memory_max:
            summary.memory_max, summary.memory_max_at = part.memory_max, bucket_end
    nodes = {
        r.node: r
        for r in session.scalars(
            select(UsageNodeChunk).where(
                UsageNodeChunk.cluster_id == cluster_id, UsageNodeChunk.chunk_start == folded.chunk_start
            )
        )
        if r.step_seconds == step
    }
    for name, part in sorted(folded.nodes.items()):
        node_row = nodes.get(name)
        chunk = usage_store.Chunk.empty() if node_row is None else usage_store.Chunk.from_bytes(node_row.body)
        chunk.merge(folded.slot, part)
        if node_row is None:
            session.add(
                UsageNodeChunk(
                    cluster_id=cluster_id,
                    node=name,
                    chunk_start=folded.chunk_start,
                    step_seconds=step,
                    body=chunk.to_bytes(),
                )
            )
        else:
            node_row.body = chunk.to_bytes()
    if folded.gpus:
        _apply_gpus(session, cluster_id, folded, step)
    session.flush()
    return "applied"


def _apply_gpus(session: Session, cluster_id: str, folded: usage_store.Folded, step: int) -> None:
    rows = {
        usage_store.WorkloadKey(r.namespace, r.workload_kind, r.workload_name): r
        for r in session.scalars(
            select(UsageGpuChunk).where(
                UsageGpuChunk.cluster_id == cluster_id, UsageGpuChunk.chunk_start == folded.chunk_start
            )
        )
        if r.step_seconds == step
    }
    for key, part in sorted(folded.gpus.items()):
        row = rows.get(key)
        chunk = usage_store.GpuChunk.empty() if row is None else usage_store.GpuChunk.from_bytes(row.body)
        chunk.merge(folded.slot, part)
        if row is None:
            session.add(
                UsageGpuChunk(
                    cluster_id=cluster_id,
                    namespace=key.namespace,
                    workload_kind=key.kind,
                    workload_name=key.workload,
                    chunk_start=folded.chunk_start,
                    step_seconds=step,
                    model=part.model,
                    body=chunk.to_bytes(),
                )
            )
        else:
            row.body = chunk.to_bytes()
            row.model = part.model or row.model


def expire_usage(session: Session, retention: timedelta) -> int:
    """Retention, per cluster, counted back from its newest sample (the cluster's clock): chunks that
    ended before it and summaries of workload containers not sampled since are removed."""
    removed = 0
    newest = session.execute(
        select(UsageWorkload.cluster_id, func.max(UsageWorkload.last_sample_at)).group_by(
            UsageWorkload.cluster_id
        )
    ).all()
    for cluster_id, latest in newest:
        horizon = as_utc(latest) - retention
        cutoff = int(horizon.timestamp())
        for table in (UsageSeriesChunk, UsageNodeChunk, UsageGpuChunk):
            # a chunk ends step x SLOTS after its start; its step is on the row
            result = session.execute(
                delete(table).where(
                    table.cluster_id == cluster_id,
                    table.chunk_start + table.step_seconds * usage_store.SLOTS <= cutoff,
                )
            )
            removed += int(getattr(result, "rowcount", 0) or 0)
        result = session.execute(
            delete(UsageWorkload).where(
                UsageWorkload.cluster_id == cluster_id, UsageWorkload.last_sample_at < horizon
            )
        )
        removed += int(getattr(result, "rowcount", 0) or 0)
    return removed


def usage_summaries(session: Session, org_id: str, cluster_id: str) -> list[UsageWorkload]:
    """The cluster's workload containers with usage, ordered by namespace, workload and container."""
    get_cluster(session, org_id, cluster_id)
    return list(
        session.scalars(
            select(UsageWorkload)
            .where(UsageWorkload.cluster_id == cluster_id)
            .order_by(
                UsageWorkload.namespace,
                UsageWorkload.workload_kind,
                UsageWorkload.workload_name,
                UsageWorkload.container,
            )
        )
    )


def usage_chunks(
    session: Session, org_id: str, cluster_id: str, since: int, step: int
) -> list[tuple[usage_store.SeriesKey, int, bytes]]:
    """(workload container, chunk start, body) of the chunks of `step` that end after `since`."""
    get_cluster(session, org_id, cluster_id)
    rows = session.execute(
        select(
            UsageSeriesChunk.namespace,
            UsageSeriesChunk.workload_kind,
            UsageSeriesChunk.workload_name,
            UsageSeriesChunk.container,
            UsageSeriesChunk.chunk_start,
            UsageSeriesChunk.body,
        ).where(
            UsageSeriesChunk.cluster_id == cluster_id,
            UsageSeriesChunk.step_seconds == step,
            UsageSeriesChunk.chunk_start > since - step * usage_store.SLOTS,
        )
    )
    return [(usage_store.SeriesKey(ns, k, name, c), start, body) for ns, k, name, c, start, body in rows]


def gpu_usage_chunks(
    session: Session, org_id: str, cluster_id: str, since: int, step: int
) -> list[tuple[usage_store.WorkloadKey, int, str, bytes]]:
    """(workload, chunk start, GPU model, body) of the GPU chunks of `step` that end after `since`."""
    get_cluster(session, org_id, cluster_id)
    rows = session.execute(
        select(
            UsageGpuChunk.namespace,
            UsageGpuChunk.workload_kind,
            UsageGpuChunk.workload_name,
            UsageGpuChunk.chunk_start,
            UsageGpuChunk.model,
            UsageGpuChunk.body,
        ).where(
            UsageGpuChunk.cluster_id == cluster_id,
            UsageGpuChunk.step_seconds == step,
            UsageGpuChunk.chunk_start > since - step * usage_store.SLOTS,
        )
    )
    return [
        (usage_store.WorkloadKey(ns, k, name), start, model, body) for ns, k, name, start, model, body in rows
    ]


def node_usage_chunks(
    session: Session, org_id: str, cluster_id: str, since: int, step: int
) -> list[tuple[str, int, bytes]]:
    """(node, chunk start, body) of the node chunks of `step` that end after `since`."""
    get_cluster(session, org_id, cluster_id)
    rows = session.execute(
        select(UsageNodeChunk.node, UsageNodeChunk.chunk_start, UsageNodeChunk.body).where(
            UsageNodeChunk.cluster_id == cluster_id,
            UsageNodeChunk.step_seconds == step,
            UsageNodeChunk.chunk_start > since - step * usage_store.SLOTS,
        )
    )
    return [(node, start, body) for node, start, body in rows]


def newest_node_usage_chunks(
    session: Session, org_id: str, cluster_id: str, received_since: datetime
) -> list[tuple[str, int, int, bytes]]:
    """(node, chunk start, step, body) of the cluster's newest node usage chunks, provided a usage
    report of the cluster was applied from a push received at `received_since` or later (the backend's
    clock: usage that stopped coming is not shown as current); else none."""
    get_cluster(session, org_id, cluster_id)
    fresh = session.scalar(
        select(Push.id)
        .where(
            Push.cluster_id == cluster_id,
            Push.received_at >= received_since,
            Push.schema_name == USAGE_SCHEMA,
            Push.outcome == "applied",
        )
        .limit(1)
    )
    if fresh is None:
        return []
    newest = (
        select(func.max(UsageNodeChunk.chunk_start))
        .where(UsageNodeChunk.cluster_id == cluster_id)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            UsageNodeChunk.node, UsageNodeChunk.chunk_start, UsageNodeChunk.step_seconds, UsageNodeChunk.body
        ).where(UsageNodeChunk.cluster_id == cluster_id, UsageNodeChunk.chunk_start == newest)
    )
    return [(node, start, step, body) for node, start, step, body in rows]


def usage_span(session: Session, org_id: str, cluster_id: str) -> tuple[datetime, datetime] | None:
    """(first, last) sample time of the cluster's usage, or None without any."""
    get_cluster(session, org_id, cluster_id)
    first, last = session.execute(
        select(func.min(UsageWorkload.first_sample_at), func.max(UsageWorkload.last_sample_at)).where(
            UsageWorkload.cluster_id == cluster_id
        )
    ).one()
    if first is None or last is None:
        return None
    return as_utc(first), as_utc(last)


# ---- recommendations and instructions ------------------------------------------------------------

# What a user may do to a recommendation in each status.
APPROVABLE = ("open",)
DISMISSABLE = ("open", "failed", "superseded")
FINISHED = ("applied", "refused", "failed", "dry-run")


class InvalidTransition(Exception):
    """The recommendation or instruction is not in a state that allows this (HTTP 409)."""


def upsert_recommendations(
    session: Session, cluster_id: str, kinds: tuple[str, ...], findings: list[Recommendation], now: datetime
) -> None:
    """Store an analysis of `kinds`: new findings open, open ones updated, open ones no longer found
    superseded; approved, applied and dismissed ones are left as they are."""
    rows = {
        row.fingerprint: row
        for row in session.scalars(
            select(RecommendationRow).where(
                RecommendationRow.cluster_id == cluster_id, RecommendationRow.kind.in_(kinds)
            )
        )
    }
    found = set()
    for finding in findings:
        found.add(finding.fingerprint)
        body = finding.model_dump(mode="json")
        row = rows.get(finding.fingerprint)
        if row is None:
            session.add(
                RecommendationRow(
                    id=str(uuid.uuid4()),
                    cluster_id=cluster_id,
                    kind=finding.kind,
                    fingerprint=finding.fingerprint,
                    title=finding.title,
                    body=body,
                    monthly_savings_usd=finding.monthly_savings_usd,
                    seconds_saved=finding.seconds_saved,
                    confidence=finding.confidence,
                    status="open",
                    created_at=now,
                    updated_at=now,
                )
            )
        elif row.status in ("open", "superseded"):
            row.title, row.body, row.status, row.updated_at = finding.title, body, "open", now
            row.monthly_savings_usd, row.seconds_saved = finding.monthly_savings_usd, finding.seconds_saved
            row.confidence = finding.confidence
    for fingerprint, row in rows.items():
        if fingerprint not in found and row.status == "open":
            row.status, row.updated_at = "superseded", now
    session.flush()


def list_recommendations(
    session: Session, org_id: str, cluster_id: str, status: str | None = None
) -> list[RecommendationRow]:
    get_cluster(session, org_id, cluster_id)
    query = select(RecommendationRow).where(RecommendationRow.cluster_id == cluster_id)
    if status is not None:
        query = query.where(RecommendationRow.status == status)
    query = query.order_by(RecommendationRow.monthly_savings_usd.desc().nulls_last(), RecommendationRow.title)
    return list(session.scalars(query))


def _recommendation(session: Session, org_id: str, recommendation_id: str) -> RecommendationRow:
    row = session.scalar(
        select(RecommendationRow)
        .join(Cluster, Cluster.id == RecommendationRow.cluster_id)
        .where(RecommendationRow.id == recommendation_id, Cluster.org_id == org_id)
        .with_for_update()
    )
    if row is None:
        raise NotFound(f"recommendation {recommendation_id} not found")
    return row


def approve(session: Session, org_id: str, recommendation_id: str, now: datetime) -> InstructionRow:
    """Approve an open recommendation: its instruction waits for the cluster's agent."""
    row = _recommendation(session, org_id, recommendation_id)
    if row.status not in APPROVABLE:
        raise InvalidTransition(f"recommendation {recommendation_id} is {row.status}, not open")
    instruction = row.body.get("instruction")
    if instruction is None:
        raise InvalidTransition(f"recommendation {recommendation_id} has no instruction to apply")
    row.status, row.updated_at = "approved", now
    sent = InstructionRow(
        id=str(uuid.uuid4()),
        cluster_id=row.cluster_id,
        recommendation_id=row.id,
        body=instruction,
        status="pending",
        created_at=now,
        updated_at=now,
    )
    session.add(sent)
    session.flush()
    return sent


def dismiss(session: Session, org_id: str, recommendation_id: str, now: datetime) -> RecommendationRow:
    row = _recommendation(session, org_id, recommendation_id)
    if row.status not in DISMISSABLE:
        raise InvalidTransition(f"recommendation {recommendation_id} is {row.status}; it cannot be dismissed")
    row.status, row.updated_at = "dismissed", now
    return row


def lease_instructions(
    session: Session, cluster_id: str, now: datetime, lease: timedelta, limit: int = 10
) -> list[InstructionRow]:
    """Instructions for the cluster's agent: pending ones, and delivered ones whose lease ran out
    (an agent that died before reporting); each is leased to the caller for `lease`."""
    query = (
        select(InstructionRow)
        .where(
            InstructionRow.cluster_id == cluster_id,
            (InstructionRow.status == "pending")
            | ((InstructionRow.status == "delivered") & (InstructionRow.lease_until < now)),
        )
        .order_by(InstructionRow.created_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    rows = list(session.scalars(query))
    for row in rows:
        row.status, row.lease_until, row.updated_at = "delivered", now + lease, now
    session.flush()
    return rows


def record_outcome(
    session: Session, cluster_id: str, instruction_id: str, outcome: InstructionOutcome, now: datetime
) -> InstructionRow:
    """The agent's report; idempotent (a repeated report of a finished instruction changes nothing)."""
    row = session.scalar(
        select(InstructionRow)
        .where(InstructionRow.id == instruction_id, InstructionRow.cluster_id == cluster_id)
        .with_for_update()
    )
    if row is None:
        raise NotFound(f"instruction {instruction_id} not found")
    if row.status in FINISHED:
        return row
    row.status, row.outcome, row.updated_at = outcome.status, outcome.model_dump(mode="json"), now
    recommendation = session.get(RecommendationRow, row.recommendation_id)
    if recommendation is not None:
        recommendation.status = {"applied": "applied", "dry-run": "open"}.get(outcome.status, "failed")
        recommendation.detail = outcome.detail
        recommendation.updated_at = now
    return row


def instruction_of(session: Session, org_id: str, recommendation_id: str) -> InstructionRow | None:
    """The newest instruction of a recommendation (for the API and the dashboard)."""
    _recommendation(session, org_id, recommendation_id)
    return session.scalar(
        select(InstructionRow)
        .where(InstructionRow.recommendation_id == recommendation_id)
        .order_by(InstructionRow.created_at.desc())
        .limit(1)
    )
