"""Operations after the charge: capture, cancel and refund rows with their own leases, and
the payment's money columns.

The charge's lease stays on the payment row, so existing payments need no move: their
charge state is where it was.  Succeeded payments are backfilled with ``amount_captured``
(what the provider moved: ``settled_amount``, or the amount for rows older than 0002).

Revision ID: 0007
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0012"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        for name in ("amount_captured", "amount_refund_reserved", "amount_refunded"):
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))
    op.execute(
        "UPDATE payments SET amount_captured = COALESCE(settled_amount, amount) "
        "WHERE status = 'succeeded'"
    )
    if op.get_bind().dialect.name == "postgresql":
        # A second line behind the row lock of the refund's accept.  (SQLite would have to
        # rebuild the table to add it; its single writer serialises the accepts anyway.)
        op.create_check_constraint(
            "ck_payments_refunds_within_captured",
            "payments",
            "amount_refund_reserved <= amount_captured",
        )
    op.create_table(
        "operations",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_fingerprint", sa.String(64), nullable=True),
        sa.Column("accepted_response", sa.Text(), nullable=True),
        sa.Column("final_response", sa.Text(), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("recovery_point", sa.String(20), nullable=False),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        ts("locked_until", nullable=True),
        ts("next_attempt_at", nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("unknown_outcomes", sa.Integer(), nullable=False),
        sa.Column("step_attempts", sa.Integer(), nullable=False),
        sa.Column("lookup_pending", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("last_error", sa.String(2000), nullable=True),
        sa.Column("amount", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("reason", sa.String(100), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("origin", sa.String(20), nullable=False, server_default="payorch"),
        sa.Column("provider_object_id", sa.String(255), nullable=True),
        sa.Column("provider_outcome", sa.String(20), nullable=True),
        sa.Column("failure_code", sa.String(100), nullable=True),
        sa.Column("failure_message", sa.String(1000), nullable=True),
        ts("created_at"),
        ts("updated_at"),
        ts("completed_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_operations"),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name="fk_operations_payment_id_payments"
        ),
        sa.UniqueConstraint(
            "client_id",
            "kind",
            "idempotency_key",
            name="uq_operations_client_id_kind_idempotency_key",
        ),
        sa.CheckConstraint(
            "kind IN ('capture', 'cancel', 'refund')", name="ck_operations_kind_known"
        ),
        sa.CheckConstraint(
            "status IN ('processing', 'succeeded', 'failed', 'needs_attention')",
            name="ck_operations_status_known",
        ),
        sa.CheckConstraint(
            "recovery_point IN ('accepted', 'provider_settled', 'completed')",
            name="ck_operations_recovery_point_known",
        ),
    )
    op.create_index("ix_operations_payment_id", "operations", ["payment_id"])
    op.create_index(
        "ix_operations_expired_leases",
        "operations",
        ["locked_until"],
        postgresql_where=sa.text("status = 'processing'"),
        sqlite_where=sa.text("status = 'processing'"),
    )
    for table in ("audit_log", "lease_events"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("operation_id", sa.String(40), nullable=True))


def downgrade() -> None:
    for table in ("lease_events", "audit_log"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("operation_id")
    op.drop_index("ix_operations_expired_leases", table_name="operations")
    op.drop_index("ix_operations_payment_id", table_name="operations")
    op.drop_table("operations")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("ck_payments_refunds_within_captured", "payments", type_="check")
    with op.batch_alter_table("payments") as batch:
        for name in ("amount_refunded", "amount_refund_reserved", "amount_captured"):
            batch.drop_column(name)
