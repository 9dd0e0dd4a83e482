"""A circuit per connector account.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05

Decision 0082.  The ``circuits`` table holds each connector account's circuit (closed, open,
half-open), and a partial index finds the payments waiting out an open one, oldest first.
No row exists until an account's first failure: an absent row is a closed circuit.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def ts(name: str, nullable: bool = True) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "circuits",
        sa.Column("key", sa.String(40), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        ts("window_started_at"),
        ts("since"),
        ts("opened_at"),
        ts("next_probe_at"),
        sa.Column("probes", sa.Integer, nullable=False),
        ts("released_at"),
        ts("probe_released_at"),
        ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_circuits"),
        sa.CheckConstraint(
            "state IN ('closed', 'open', 'half_open')", name="ck_circuits_state_known"
        ),
    )
    op.create_index(
        "ix_payments_circuit_waits",
        "payments",
        ["connector_account_id", "created_at"],
        postgresql_where=sa.text("waiting_for = 'circuit'"),
        sqlite_where=sa.text("waiting_for = 'circuit'"),
    )


def downgrade() -> None:
    op.drop_index("ix_payments_circuit_waits", table_name="payments")
    op.drop_table("circuits")
