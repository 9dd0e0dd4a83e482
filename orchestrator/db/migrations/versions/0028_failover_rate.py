"""Indexes for the overview's failover rate of the last hour.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05

Decision 0097.  ``payorch status``, ``GET /v1/ops/status`` and the console's overview count
the payments finished and the failovers of the last hour on every refresh:
``payments WHERE completed_at >= ?`` and ``payment_attempts WHERE ended_at >= ?``.  Without
these indexes both are scans of the whole table, growing with every payment ever made.

``ix_payments_completed`` is partial (``completed_at IS NOT NULL``): the accept's insert
adds no entry; the finish's update, which sets ``completed_at``, already rewrites
``ix_payments_status`` (its status changes), so it was never a HOT update.

Built ``CONCURRENTLY`` on PostgreSQL: a plain ``CREATE INDEX`` holds a lock that blocks every
insert into the table (every accept, every failover) until the build ends.  CONCURRENTLY
cannot run in a transaction, hence the autocommit block.  Should a build fail half-way it
leaves an INVALID index behind: drop it by name and upgrade again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_COMPLETED = "ix_payments_completed"
_ENDED = "ix_payment_attempts_ended_at"


def upgrade() -> None:
    finished = sa.text("completed_at IS NOT NULL")
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.create_index(
                _COMPLETED,
                "payments",
                ["completed_at"],
                postgresql_where=finished,
                postgresql_concurrently=True,
                if_not_exists=True,
            )
            op.create_index(
                _ENDED,
                "payment_attempts",
                ["ended_at"],
                postgresql_concurrently=True,
                if_not_exists=True,
            )
    else:
        op.create_index(_COMPLETED, "payments", ["completed_at"], sqlite_where=finished)
        op.create_index(_ENDED, "payment_attempts", ["ended_at"])


def downgrade() -> None:
    op.drop_index(_ENDED, table_name="payment_attempts")
    op.drop_index(_COMPLETED, table_name="payments")
