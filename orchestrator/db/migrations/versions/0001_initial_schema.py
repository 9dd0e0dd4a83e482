"""Initial schema: API clients, payments with leases, outcomes, ledger, outbox, audit.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_clients",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("key_prefix", sa.String(24), nullable=False),
        ts("created_at"),
        ts("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_clients"),
        sa.UniqueConstraint("key_hash", name="uq_api_clients_key_hash"),
    )
    op.create_table(
        "payments",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_fingerprint", sa.String(64), nullable=True),
        sa.Column("response_body", JSON, nullable=True),
        ts("key_purged_at", nullable=True),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("payment_method", sa.String(255), nullable=False),
        sa.Column("customer_reference", sa.String(255), nullable=True),
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("recovery_point", sa.String(20), nullable=False),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        ts("locked_until", nullable=True),
        ts("next_attempt_at", nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("unknown_outcomes", sa.Integer, nullable=False),
        sa.Column("confirm_attempts", sa.Integer, nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        sa.Column("provider_payment_id", sa.String(255), nullable=True),
        sa.Column("provider_charge_id", sa.String(255), nullable=True),
        sa.Column("provider_outcome", sa.String(20), nullable=True),
        sa.Column("failure_code", sa.String(100), nullable=True),
        sa.Column("decline_code", sa.String(100), nullable=True),
        sa.Column("failure_message", sa.String(1000), nullable=True),
        sa.Column("last_error", sa.String(2000), nullable=True),
        ts("created_at"),
        ts("updated_at"),
        ts("completed_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_payments"),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name="fk_payments_client_id_api_clients"
        ),
        sa.UniqueConstraint(
            "client_id", "idempotency_key", name="uq_payments_client_id_idempotency_key"
        ),
        sa.CheckConstraint("amount > 0", name="ck_payments_amount_positive"),
        sa.CheckConstraint(
            "status IN ('processing', 'succeeded', 'failed', 'needs_attention')",
            name="ck_payments_status_known",
        ),
        sa.CheckConstraint(
            "recovery_point IN ('accepted', 'intent_created', 'provider_settled', 'completed')",
            name="ck_payments_recovery_point_known",
        ),
    )
    op.create_index(
        "ix_payments_expired_leases",
        "payments",
        ["locked_until"],
        postgresql_where=sa.text("status = 'processing'"),
        sqlite_where=sa.text("status = 'processing'"),
    )
    op.create_index(
        "ix_payments_retention",
        "payments",
        ["created_at"],
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index("ix_payments_status", "payments", ["status"])

    op.create_table(
        "payment_outcomes",
        sa.Column("id", ID, nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        sa.Column("provider_payment_id", sa.String(255), nullable=True),
        sa.Column("provider_charge_id", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("failure_code", sa.String(100), nullable=True),
        sa.Column("decline_code", sa.String(100), nullable=True),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_payment_outcomes"),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name="fk_payment_outcomes_payment_id_payments"
        ),
        sa.UniqueConstraint("payment_id", name="uq_payment_outcomes_payment_id"),
        sa.UniqueConstraint("provider_payment_id", name="uq_payment_outcomes_provider_payment_id"),
    )
    op.create_table(
        "ledger_lines",
        sa.Column("id", ID, nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_ledger_lines"),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name="fk_ledger_lines_payment_id_payments"
        ),
    )
    op.create_index("ix_ledger_lines_payment_id", "ledger_lines", ["payment_id"])
    op.create_table(
        "outbox_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("event_type", sa.String(50), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        ts("created_at"),
        ts("published_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_outbox_events"),
    )
    op.create_index(
        "ix_outbox_events_unpublished",
        "outbox_events",
        ["id"],
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", ID, nullable=False),
        sa.Column("actor_client_id", sa.String(40), nullable=False),
        sa.Column("actor_name", sa.String(200), nullable=False),
        sa.Column("action", sa.String(50), nullable=False),
        sa.Column("payment_id", sa.String(40), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("old_token", sa.BigInteger, nullable=True),
        sa.Column("new_token", sa.BigInteger, nullable=True),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_payment_id", "audit_log", ["payment_id"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("outbox_events")
    op.drop_table("ledger_lines")
    op.drop_table("payment_outcomes")
    op.drop_table("payments")
    op.drop_table("api_clients")
