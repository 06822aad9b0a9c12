"""GPU activity per workload: series chunks from the usage reports' `gpus` lines.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_gpu_series",
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("namespace", sa.String(253), primary_key=True),
        sa.Column("workload_kind", sa.String(63), primary_key=True),
        sa.Column("workload_name", sa.String(253), primary_key=True),
        sa.Column("chunk_start", sa.BigInteger(), primary_key=True),
        sa.Column("step_seconds", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_usage_gpu_series_cluster_chunk", "usage_gpu_series", ["cluster_id", "chunk_start"])


def downgrade() -> None:
    op.drop_table("usage_gpu_series")
