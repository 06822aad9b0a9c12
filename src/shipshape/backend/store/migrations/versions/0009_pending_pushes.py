"""Pushes: a partial index of the ones not processed yet, so that an apply and the sweep find them
without reading the retention's processed pushes (72 hours of a cluster's deltas: thousands).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_pushes_pending",
        "pushes",
        ["cluster_id", "sequence", "id"],
        postgresql_where=sa.text("processed_at IS NULL"),
        sqlite_where=sa.text("processed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_pushes_pending", table_name="pushes")
