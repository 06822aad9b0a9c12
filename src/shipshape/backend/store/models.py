"""The backend's tables (SQLAlchemy 2). The schema itself is created and changed only by Alembic
migrations (`migrations/versions/`); `tests` check that the migrations produce these models.

Tenancy: every row below an organisation carries its `org_id` (directly or through its cluster), and
every query of `repository.py` filters on it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {datetime: DateTime(timezone=True), dict[str, Any]: JSON}


class Organization(Base):
    __tablename__ = "organizations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[datetime]


class ApiKey(Base):
    """A user's key: `ssk_<id>_<secret>`; only the secret's SHA-256 is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Cluster(Base):
    __tablename__ = "clusters"
    __table_args__ = (UniqueConstraint("org_id", "name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]
    last_seen: Mapped[datetime | None]
    # The last push applied to `cluster_objects` (a delta must follow it).
    applied_sequence: Mapped[int | None] = mapped_column(BigInteger)
    node_count: Mapped[int] = mapped_column(Integer, default=0)
    pod_count: Mapped[int] = mapped_column(Integer, default=0)
    # When the spot analysis last ran, and on the state of which applied sequence: a worker process
    # skips an analysis another one just did (`repository.claim_analysis`).
    analyzed_at: Mapped[datetime | None]
    analyzed_sequence: Mapped[int | None] = mapped_column(BigInteger)
    # Counts the applies that wrote `cluster_objects` rows; each written row carries the count of its
    # apply (`ClusterObject.revision`), so a reader that kept the objects of an earlier count reads
    # again only the rows written since (`store.objects.ObjectsCache`).
    objects_revision: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class AgentToken(Base):
    """An agent's token, scoped to one cluster: `sst_<id>_<secret>`; only the secret's SHA-256 is stored."""

    __tablename__ = "agent_tokens"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), index=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Push(Base):
    """One accepted push, as received (zstd or gzip JSON in `body_gzip`, named for the gzip it held
    first: `contracts.compression.inflate` reads either), until retention removes it. Unique per
    cluster and idempotency key: a retried push is recognised and not stored or processed twice."""

    __tablename__ = "pushes"
    __table_args__ = (
        UniqueConstraint("cluster_id", "idempotency_key"),
        Index("ix_pushes_cluster_received", "cluster_id", "received_at"),
        # The pushes not processed yet, a few among the retention's thousands per cluster: what an
        # apply looks for (`repository.apply_cluster`) and the sweep re-queues, without reading the
        # processed ones (migration 0009).
        Index(
            "ix_pushes_pending",
            "cluster_id",
            "sequence",
            "id",
            postgresql_where=text("processed_at IS NULL"),
            sqlite_where=text("processed_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"))
    idempotency_key: Mapped[str] = mapped_column(String(128))
    schema_name: Mapped[str] = mapped_column(String(64))
    sequence: Mapped[int] = mapped_column(BigInteger)
    received_at: Mapped[datetime]
    processed_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(256))
    body_gzip: Mapped[bytes] = mapped_column(LargeBinary)


class ClusterObject(Base):
    """The cluster's state as the pushes describe it: one row per object. On PostgreSQL (migration
    0010) its pages keep a fifth free, so that the upsert of a changed object updates its row on its
    page, and `body` is compressed with lz4 where the server has it (set by the migration only: a
    column's compression is not something SQLAlchemy writes). SQLite has neither."""

    __tablename__ = "cluster_objects"
    __table_args__ = {"postgresql_with": {"fillfactor": 80}}

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    body: Mapped[dict[str, Any]]
    # The digest of the JSON a snapshot wrote `body` from (`pushbody.digest`); NULL after a delta wrote
    # it. A snapshot rewrites only the rows whose digest differs (`repository.apply_cluster`).
    digest: Mapped[bytes | None] = mapped_column(LargeBinary(16))
    # The cluster's `objects_revision` of the apply that wrote this row.
    revision: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class SeriesPoint(Base):
    """One point of a cluster's time series of key figures (`backend/series.py`): a point a minute
    (`resolution_seconds` 60), averaged into a point an hour (3600) once older than the minute window.
    Figures a point could not compute are NULL (the `*_used_ratio` ones without current usage)."""

    __tablename__ = "series_points"
    __table_args__ = (Index("ix_series_points_resolution_at", "resolution_seconds", "at"),)

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    at: Mapped[datetime] = mapped_column(primary_key=True)
    resolution_seconds: Mapped[int] = mapped_column(Integer, primary_key=True)
    nodes: Mapped[float] = mapped_column(Float)
    pods: Mapped[float] = mapped_column(Float)
    usd_per_hour: Mapped[float | None] = mapped_column(Float)
    on_demand_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    spot_share_pct: Mapped[float | None] = mapped_column(Float)
    startup_p50_seconds: Mapped[float | None] = mapped_column(Float)
    startup_p99_seconds: Mapped[float | None] = mapped_column(Float)
    cpu_requested_ratio: Mapped[float | None] = mapped_column(Float)
    memory_requested_ratio: Mapped[float | None] = mapped_column(Float)
    cpu_used_ratio: Mapped[float | None] = mapped_column(Float)
    memory_used_ratio: Mapped[float | None] = mapped_column(Float)


class RecommendationRow(Base):
    """A finding for one cluster, with its lifecycle: open → approved → applied | failed, or
    dismissed; `superseded` when a later analysis no longer finds it while it was open."""

    __tablename__ = "recommendations"
    __table_args__ = (
        UniqueConstraint("cluster_id", "fingerprint"),
        Index("ix_recommendations_cluster_status", "cluster_id", "status"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(300))
    body: Mapped[dict[str, Any]]  # the contracts.instructions.Recommendation as analyzed last
    monthly_savings_usd: Mapped[float | None] = mapped_column(Float)
    seconds_saved: Mapped[float | None] = mapped_column(Float)
    confidence: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class InstructionRow(Base):
    """An approved recommendation's instruction on its way to the cluster's agent, and its outcome."""

    __tablename__ = "instructions"
    __table_args__ = (Index("ix_instructions_cluster_status", "cluster_id", "status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"))
    recommendation_id: Mapped[str] = mapped_column(ForeignKey("recommendations.id", ondelete="CASCADE"))
    body: Mapped[dict[str, Any]]  # the contracts.instructions.Instruction
    # pending (waiting for the agent) → delivered (leased to it until lease_until)
    # → applied | refused | failed | dry-run
    status: Mapped[str] = mapped_column(String(16))
    lease_until: Mapped[datetime | None]
    outcome: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class UsageWorkload(Base):
    """One workload container's usage summary in a cluster (`backend/usage.py`): bounded to one row
    per (namespace, owner workload, container), whatever the pods' churn."""

    __tablename__ = "usage_workloads"
    __table_args__ = (Index("ix_usage_workloads_cluster_last", "cluster_id", "last_sample_at"),)

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    workload_kind: Mapped[str] = mapped_column(String(63), primary_key=True)
    workload_name: Mapped[str] = mapped_column(String(253), primary_key=True)
    container: Mapped[str] = mapped_column(String(253), primary_key=True)
    # Sample times are the cluster's (the metrics server's clock), not the backend's.
    first_sample_at: Mapped[datetime]
    last_sample_at: Mapped[datetime]
    samples: Mapped[int] = mapped_column(BigInteger)
    buckets: Mapped[int] = mapped_column(Integer)
    pods_last: Mapped[int] = mapped_column(Integer)  # pods sampled in the newest bucket
    cpu_max: Mapped[float] = mapped_column(Float)  # cores, the highest sampled rate
    memory_max: Mapped[float] = mapped_column(Float)  # bytes, the highest working set
    memory_max_at: Mapped[datetime]


class UsageSeriesChunk(Base):
    """`backend.usage.SLOTS` consecutive slots of one workload container's usage (`backend.usage.Chunk`
    as bytes), kept for the retention."""

    __tablename__ = "usage_series"
    __table_args__ = (Index("ix_usage_series_cluster_chunk", "cluster_id", "chunk_start"),)

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    workload_kind: Mapped[str] = mapped_column(String(63), primary_key=True)
    workload_name: Mapped[str] = mapped_column(String(253), primary_key=True)
    container: Mapped[str] = mapped_column(String(253), primary_key=True)
    chunk_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # unix seconds
    step_seconds: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)


class UsageGpuChunk(Base):
    """`backend.usage.SLOTS` consecutive slots of one workload's GPU activity (`backend.usage.GpuChunk`
    as bytes), with the GPU model dcgm-exporter named, kept for the retention."""

    __tablename__ = "usage_gpu_series"
    __table_args__ = (Index("ix_usage_gpu_series_cluster_chunk", "cluster_id", "chunk_start"),)

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    workload_kind: Mapped[str] = mapped_column(String(63), primary_key=True)
    workload_name: Mapped[str] = mapped_column(String(253), primary_key=True)
    chunk_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # unix seconds
    step_seconds: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(128))
    body: Mapped[bytes] = mapped_column(LargeBinary)


class UsageNodeChunk(Base):
    """The same for one node (CPU mean rate, memory working set), for the QoS colocation analysis."""

    __tablename__ = "usage_node_series"
    __table_args__ = (Index("ix_usage_node_series_cluster_chunk", "cluster_id", "chunk_start"),)

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    chunk_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    step_seconds: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)
