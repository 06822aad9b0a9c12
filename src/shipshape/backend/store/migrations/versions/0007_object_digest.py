"""Cluster objects: the digest of the JSON a snapshot wrote each row from, so that a snapshot
rewrites only the objects that changed (NULL: written by a delta, or before this migration).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cluster_objects") as batch:
        batch.add_column(sa.Column("digest", sa.LargeBinary(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cluster_objects") as batch:
        batch.drop_column("digest")
