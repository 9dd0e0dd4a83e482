"""Provider truth: the bounded, resumable lookup and what the provider actually settled.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # batch_alter_table: SQLite cannot add a NOT NULL column with a default otherwise
    # portable across versions; on PostgreSQL it is plain ALTER TABLE ... ADD COLUMN.
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("first_create_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_create_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("lookup_pending", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("lookup_cursor", sa.String(255), nullable=True))
        batch.add_column(
            sa.Column("lookup_pages", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("rejected_intents", JSON, nullable=True))
        batch.add_column(sa.Column("settled_amount", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("settled_currency", sa.String(3), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        for name in (
            "settled_currency",
            "settled_amount",
            "rejected_intents",
            "lookup_pages",
            "lookup_cursor",
            "lookup_pending",
            "last_create_at",
            "first_create_at",
        ):
            batch.drop_column(name)
