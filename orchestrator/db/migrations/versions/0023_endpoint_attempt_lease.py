"""One webhook attempt in flight per endpoint: the endpoint's attempt lease.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05

Decision 0080.  ``webhook_endpoints.attempt_locked_until``: set by the relay's claim to the
claimed delivery's lease expiry, cleared when that attempt is recorded.  While it lies in
the future, no other delivery of the endpoint is claimed, so one slow endpoint holds one
relay thread, never all of them.  Nullable, no default: every endpoint starts free.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(
            sa.Column("attempt_locked_until", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("attempt_locked_until")
