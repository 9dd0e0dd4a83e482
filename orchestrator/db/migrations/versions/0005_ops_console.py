"""Ops console: provider calls and lease history, for the operator's payment page, and an
index to map a provider intent back to its payment.

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "provider_calls",
        sa.Column("id", ID, nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=True),
        sa.Column("operation", sa.String(20), nullable=False),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("path", sa.String(300), nullable=False),
        sa.Column("idempotency_key", sa.String(300), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("provider_object_id", sa.String(255), nullable=True),
        sa.Column("provider_status", sa.String(50), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_provider_calls"),
    )
    op.create_index("ix_provider_calls_payment_id", "provider_calls", ["payment_id"])
    op.create_table(
        "lease_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("event", sa.String(20), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        ts("locked_until", nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("recovery_point", sa.String(20), nullable=False),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_lease_events"),
    )
    op.create_index("ix_lease_events_payment_id", "lease_events", ["payment_id"])
    op.create_index("ix_payments_provider_payment_id", "payments", ["provider_payment_id"])


def downgrade() -> None:
    op.drop_index("ix_payments_provider_payment_id", table_name="payments")
    op.drop_table("lease_events")
    op.drop_table("provider_calls")
