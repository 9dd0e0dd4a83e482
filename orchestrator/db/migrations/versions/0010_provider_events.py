"""Provider events in: Stripe's webhooks, each stored once by its event id.

Revision ID: 0010
Revises: 0008

(0008 went to the payment SCA fields, 0009 is reserved for the worker pool; the chain is
linear whatever the numbers: each migration names the head it follows.)
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0008"
branch_labels = None
depends_on = None


def json_type() -> sa.types.TypeEngine:  # type: ignore[type-arg]
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "provider_events",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("provider_created", sa.BigInteger, nullable=False),
        sa.Column("object_type", sa.String(50), nullable=False),
        sa.Column("object_id", sa.String(255), nullable=False),
        sa.Column("provider_payment_id", sa.String(255), nullable=True),
        sa.Column("payment_id", sa.String(40), nullable=True),
        sa.Column("payload", json_type(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("woke_payment", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_provider_events"),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name="fk_provider_events_payment_id_payments"
        ),
    )
    op.create_index("ix_provider_events_payment_id", "provider_events", ["payment_id"])
    op.create_index("ix_provider_events_received_at", "provider_events", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_provider_events_received_at", table_name="provider_events")
    op.drop_index("ix_provider_events_payment_id", table_name="provider_events")
    op.drop_table("provider_events")
