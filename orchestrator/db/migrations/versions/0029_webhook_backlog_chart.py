"""An index for the console's webhook backlog chart.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05

Decision 0103.  The console's charts draw the deliveries pending over the last hour or day
from the deliveries pending now (``ix_webhook_deliveries_due``) and those that settled
(delivered or failed) inside the window: ``webhook_deliveries WHERE status <> 'pending' AND
updated_at >= ?``.  A settled delivery's ``updated_at`` is when it settled: the attempt's
record is its last write (a redeliver makes it pending again).  Without this index that read
is a scan of every delivery ever made.

Partial (``status <> 'pending'``): a delivery's insert and its pending attempts cost it
nothing; the attempt that settles it changes ``status``, which ``ix_webhook_deliveries_due``'s
predicate already names, so that update was never a HOT update.

Built ``CONCURRENTLY`` on PostgreSQL, as migration 0028 explains: a plain build blocks every
fan-out and attempt until it ends.  A build that fails half-way leaves an INVALID index:
drop it by name and upgrade again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_SETTLED = "ix_webhook_deliveries_settled"


def upgrade() -> None:
    settled = sa.text("status <> 'pending'")
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.create_index(
                _SETTLED,
                "webhook_deliveries",
                ["updated_at"],
                postgresql_where=settled,
                postgresql_concurrently=True,
                if_not_exists=True,
            )
    else:
        op.create_index(_SETTLED, "webhook_deliveries", ["updated_at"], sqlite_where=settled)


def downgrade() -> None:
    op.drop_index(_SETTLED, table_name="webhook_deliveries")
