"""Organisations, keys, clusters, agent tokens, pushes and cluster objects.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "organizations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column(
            "org_id", sa.String(36), sa.ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_org_id", "api_keys", ["org_id"])
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "org_id", sa.String(36), sa.ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=True),
        sa.Column("applied_sequence", sa.BigInteger(), nullable=True),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("pod_count", sa.Integer(), nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    op.create_index("ix_clusters_org_id", "clusters", ["org_id"])
    op.create_table(
        "agent_tokens",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_agent_tokens_cluster_id", "agent_tokens", ["cluster_id"])
    op.create_table(
        "pushes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("schema_name", sa.String(64), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(256), nullable=True),
        sa.Column("body_gzip", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("cluster_id", "idempotency_key"),
    )
    op.create_index("ix_pushes_cluster_received", "pushes", ["cluster_id", "received_at"])
    op.create_table(
        "cluster_objects",
        sa.Column(
            "cluster_id", sa.String(36), sa.ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("kind", sa.String(40), primary_key=True),
        sa.Column("namespace", sa.String(253), primary_key=True),
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("body", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    for table in ("cluster_objects", "pushes", "agent_tokens", "clusters", "api_keys", "organizations"):
        op.drop_table(table)
