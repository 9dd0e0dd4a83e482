"""Waiting operations (3-D Secure, asynchronous methods) and the canceled status.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
# The name migration 0001 gave it (the naming convention prefixed its already prefixed name).
STATUS_CHECK = "ck_payments_ck_payments_status_known"
OLD_STATUSES = "status IN ('processing', 'succeeded', 'failed', 'needs_attention')"
NEW_STATUSES = "status IN ('processing', 'succeeded', 'failed', 'canceled', 'needs_attention')"


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    # Nullable, no default: an existing row is not waiting for anyone.
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("waiting_for", sa.String(20), nullable=True))
        batch.add_column(ts("waiting_since", nullable=True))
        batch.add_column(sa.Column("next_action", JSON, nullable=True))
        batch.add_column(sa.Column("client_secret", sa.String(500), nullable=True))
        batch.add_column(ts("woken_at", nullable=True))
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(NEW_STATUSES))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(OLD_STATUSES))
        for name in ("woken_at", "client_secret", "next_action", "waiting_since", "waiting_for"):
            batch.drop_column(name)
