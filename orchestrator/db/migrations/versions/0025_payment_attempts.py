"""Attempts: one per connector account a payment was tried at.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05

Decision 0086.  ``payment_attempts`` keeps every attempt that ended in a failover, with the
proof that its account moved no money, written in the same fenced transaction that moves
the payment to the next account.  The attempt a payment is on now is the payment row itself
(its account, provider payment, status): a payment that never fails over writes no attempt
row, so the one-account hot path has no extra statement.  On ``payments``:
``failovers`` (the current attempt's number minus one: its keys are derived from it) and
``route_attempts`` (the ended attempts as the representation shows them, so building a
payment's representation reads nothing more than its row).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def ts(name: str, nullable: bool = True) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "payment_attempts",
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("connector_account", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        sa.Column("provider_payment_id", sa.String(255), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("failure", json, nullable=True),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("proof", sa.String(1000), nullable=False),
        sa.Column("next_connector_account", sa.String(40), nullable=False),
        ts("started_at", nullable=False),
        ts("ended_at", nullable=False),
        sa.PrimaryKeyConstraint("payment_id", "number", name="pk_payment_attempts"),
        sa.ForeignKeyConstraint(
            ["payment_id"],
            ["payments.id"],
            name="fk_payment_attempts_payment_id_payments",
            ondelete="CASCADE",
        ),
    )
    op.add_column(
        "payments", sa.Column("failovers", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("payments", sa.Column("route_attempts", json, nullable=True))


def downgrade() -> None:
    op.drop_column("payments", "route_attempts")
    op.drop_column("payments", "failovers")
    op.drop_table("payment_attempts")
