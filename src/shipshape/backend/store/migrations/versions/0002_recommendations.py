"""Recommendations and instructions.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "recommendations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("fingerprint", sa.String(200), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("monthly_savings_usd", sa.Float(), nullable=True),
        sa.Column("seconds_saved", sa.Float(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(2000), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("cluster_id", "fingerprint"),
    )
    op.create_index("ix_recommendations_cluster_status", "recommendations", ["cluster_id", "status"])
    op.create_table(
        "instructions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "recommendation_id",
            sa.String(36),
            sa.ForeignKey("recommendations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_instructions_cluster_status", "instructions", ["cluster_id", "status"])


def downgrade() -> None:
    op.drop_table("instructions")
    op.drop_table("recommendations")
