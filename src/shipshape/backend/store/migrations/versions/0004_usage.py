"""Usage: per workload container summaries and series chunks, per node series chunks.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _cluster() -> sa.Column[str]:
    return sa.Column(
        "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True
    )


def _workload_container() -> list[sa.Column[str]]:
    return [
        sa.Column("namespace", sa.String(253), primary_key=True),
        sa.Column("workload_kind", sa.String(63), primary_key=True),
        sa.Column("workload_name", sa.String(253), primary_key=True),
        sa.Column("container", sa.String(253), primary_key=True),
    ]


def upgrade() -> None:
    op.create_table(
        "usage_workloads",
        _cluster(),
        *_workload_container(),
        sa.Column("first_sample_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sample_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("buckets", sa.Integer(), nullable=False),
        sa.Column("pods_last", sa.Integer(), nullable=False),
        sa.Column("cpu_max", sa.Float(), nullable=False),
        sa.Column("memory_max", sa.Float(), nullable=False),
        sa.Column("memory_max_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_usage_workloads_cluster_last", "usage_workloads", ["cluster_id", "last_sample_at"])
    op.create_table(
        "usage_series",
        _cluster(),
        *_workload_container(),
        sa.Column("chunk_start", sa.BigInteger(), primary_key=True),
        sa.Column("step_seconds", sa.Integer(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_usage_series_cluster_chunk", "usage_series", ["cluster_id", "chunk_start"])
    op.create_table(
        "usage_node_series",
        _cluster(),
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("chunk_start", sa.BigInteger(), primary_key=True),
        sa.Column("step_seconds", sa.Integer(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_usage_node_series_cluster_chunk", "usage_node_series", ["cluster_id", "chunk_start"])


def downgrade() -> None:
    op.drop_table("usage_node_series")
    op.drop_table("usage_series")
    op.drop_table("usage_workloads")
