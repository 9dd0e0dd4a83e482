"""An operation keeps a wake-up that arrives while a worker holds it.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05

Decision 0072.  A provider that settles a capture, cancel or refund by notification (Adyen)
often sends it while the worker that sent the call still holds the operation, before its
wait is written; ``woken_at`` keeps that wake-up so the wait ends at once instead of at the
re-check, as a payment's already does (migration 0011).  Nullable, no default: no existing
row was woken.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("woken_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("woken_at")
