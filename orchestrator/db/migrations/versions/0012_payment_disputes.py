"""Disputes the provider reported about a payment (charge.dispute.* events).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "payment_disputes",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("provider_payment_id", sa.String(255), nullable=True),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("reason", sa.String(100), nullable=True),
        sa.Column("status", sa.String(50), nullable=False),
        sa.Column("last_event_created", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_payment_disputes"),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name="fk_payment_disputes_payment_id_payments"
        ),
    )
    op.create_index("ix_payment_disputes_payment_id", "payment_disputes", ["payment_id"])


def downgrade() -> None:
    op.drop_index("ix_payment_disputes_payment_id", table_name="payment_disputes")
    op.drop_table("payment_disputes")
