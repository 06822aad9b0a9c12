"""Per-cluster time series of the key figures.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

FIGURES = (
    "usd_per_hour",
    "on_demand_usd_per_hour",
    "spot_share_pct",
    "startup_p50_seconds",
    "startup_p99_seconds",
    "cpu_requested_ratio",
    "memory_requested_ratio",
    "cpu_used_ratio",
    "memory_used_ratio",
)


def upgrade() -> None:
    op.create_table(
        "series_points",
        sa.Column(
            "cluster_id",
            sa.String(36),
            sa.ForeignKey("clusters.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("resolution_seconds", sa.Integer(), primary_key=True),
        sa.Column("nodes", sa.Float(), nullable=False),
        sa.Column("pods", sa.Float(), nullable=False),
        *(sa.Column(name, sa.Float(), nullable=True) for name in FIGURES),
    )
    # Retention walks the old points of one resolution across clusters.
    op.create_index("ix_series_points_resolution_at", "series_points", ["resolution_seconds", "at"])


def downgrade() -> None:
    op.drop_table("series_points")
