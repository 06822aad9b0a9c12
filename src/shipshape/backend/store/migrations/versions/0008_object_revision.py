"""Cluster objects: the revision of the apply that wrote each row, and the cluster's count of them,
so that a reader keeping a cluster's objects reads again only the rows written since
(`store.objects.ObjectsCache`; 0: written before this migration).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("objects_revision", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("cluster_objects") as batch:
        batch.add_column(sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("cluster_objects") as batch:
        batch.drop_column("revision")
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("objects_revision")
