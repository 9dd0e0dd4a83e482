"""The payment's latest merchant-event sequence as a column of its own.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04

Every writer of a payment's events took the row lock and then read ``max(sequence)`` of
its events (two round trips), and every read of a payment computed the same max.  The
column is that number, kept by the writers under the row lock
(``OutcomeRepository.next_event_sequence``: one ``UPDATE … RETURNING``).  Existing rows
start at their events' max, so the next event of an old payment continues its sequence.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "payments",
        sa.Column("latest_event_sequence", sa.Integer(), nullable=False, server_default="0"),
    )
    op.execute(
        "UPDATE payments SET latest_event_sequence = COALESCE("
        "(SELECT MAX(sequence) FROM outbox_events WHERE outbox_events.payment_id = payments.id),"
        " 0)"
    )


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("latest_event_sequence")
