"""The payment's trace context: its W3C ``traceparent``.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05

Decision 0102.  The accept stores the request's trace context with the payment, so a worker
that claims the payment joins the payment's trace whoever woke it (the dispatcher, the
sweeper, an operator's retry).  NULL: accepted while tracing was off (or before this
column), and the worker's spans start a trace of their own.

A nullable column without a default: PostgreSQL adds it without rewriting the table, and the
accept's insert, which does not name it while tracing is off, is unchanged.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("payments", sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    op.drop_column("payments", "traceparent")
