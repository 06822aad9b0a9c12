"""Clusters: when and at which applied sequence their spot analysis last ran (one analysis per
cluster and window across all worker processes).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("analyzed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("analyzed_sequence", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("analyzed_sequence")
        batch.drop_column("analyzed_at")
