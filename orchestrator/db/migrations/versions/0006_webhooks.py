"""Merchant webhooks: public ids and per-payment sequence numbers on outbox events,
endpoints, deliveries and delivery attempts.

Existing outbox rows get an ``evt_…`` id and their sequence (by insertion order within the
payment), and are marked fanned out: no endpoint existed when they were written, so the
relay must not deliver months-old events to an endpoint registered today (they stay
readable through ``GET /v1/events``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")
BACKFILL_BATCH = 1000


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def json_type() -> sa.types.TypeEngine:  # type: ignore[type-arg]
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON().with_variant(JSONB(), "postgresql")


def _backfill_outbox() -> None:
    bind = op.get_bind()
    outbox = sa.table(
        "outbox_events",
        sa.column("id", sa.BigInteger),
        sa.column("payment_id", sa.String),
        sa.column("public_id", sa.String),
        sa.column("sequence", sa.Integer),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("published_at", sa.DateTime(timezone=True)),
    )
    later = outbox.alias("later")
    # Sequence by insertion order within the payment: a correlated count runs on both
    # databases (no window function in an UPDATE on SQLite).
    bind.execute(
        outbox.update().values(
            sequence=sa.select(sa.func.count())
            .select_from(later)
            .where(later.c.payment_id == outbox.c.payment_id, later.c.id <= outbox.c.id)
            .scalar_subquery(),
            published_at=sa.func.coalesce(outbox.c.published_at, outbox.c.created_at),
        )
    )
    while True:
        ids = (
            bind.execute(
                sa.select(outbox.c.id).where(outbox.c.public_id.is_(None)).limit(BACKFILL_BATCH)
            )
            .scalars()
            .all()
        )
        if not ids:
            break
        for row_id in ids:
            bind.execute(
                outbox.update()
                .where(outbox.c.id == row_id)
                .values(public_id=f"evt_{secrets.token_hex(16)}")
            )


def upgrade() -> None:
    with op.batch_alter_table("outbox_events") as batch:
        batch.add_column(sa.Column("public_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("sequence", sa.Integer, nullable=True))
    _backfill_outbox()
    with op.batch_alter_table("outbox_events") as batch:
        batch.alter_column("public_id", existing_type=sa.String(40), nullable=False)
        batch.alter_column("sequence", existing_type=sa.Integer, nullable=False)
        batch.create_unique_constraint("uq_outbox_events_public_id", ["public_id"])
        batch.create_unique_constraint(
            "uq_outbox_events_payment_id_sequence", ["payment_id", "sequence"]
        )

    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", json_type(), nullable=False),
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("disabled_reason", sa.String(500), nullable=True),
        sa.Column("secret_encrypted", sa.Text, nullable=False),
        sa.Column("previous_secret_encrypted", sa.Text, nullable=True),
        ts("previous_secret_expires_at", nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        ts("failing_since", nullable=True),
        ts("created_at"),
        ts("updated_at"),
        ts("rotated_at", nullable=True),
        ts("deleted_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name="fk_webhook_endpoints_client_id_api_clients"
        ),
        sa.CheckConstraint(
            "status IN ('enabled', 'disabled')", name="ck_webhook_endpoints_status_known"
        ),
    )
    op.create_index("ix_webhook_endpoints_client_id", "webhook_endpoints", ["client_id"])

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", ID, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        ts("next_attempt_at", nullable=True),
        ts("window_started_at"),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        ts("locked_until", nullable=True),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        ts("created_at"),
        ts("updated_at"),
        ts("delivered_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.ForeignKeyConstraint(
            ["event_id"], ["outbox_events.id"], name="fk_webhook_deliveries_event_id_outbox_events"
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name="fk_webhook_deliveries_endpoint_id_webhook_endpoints",
        ),
        sa.UniqueConstraint(
            "event_id", "endpoint_id", name="uq_webhook_deliveries_event_id_endpoint_id"
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed')",
            name="ck_webhook_deliveries_status_known",
        ),
    )
    op.create_index("ix_webhook_deliveries_endpoint_id", "webhook_deliveries", ["endpoint_id"])
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )

    op.create_table(
        "webhook_delivery_attempts",
        sa.Column("id", ID, nullable=False),
        sa.Column("delivery_id", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("relay", sa.String(200), nullable=False),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("response_body", sa.String(1024), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        ts("started_at"),
        ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_delivery_attempts"),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name="fk_webhook_delivery_attempts_delivery_id_webhook_deliveries",
        ),
    )
    op.create_index(
        "ix_webhook_delivery_attempts_delivery_id", "webhook_delivery_attempts", ["delivery_id"]
    )


def downgrade() -> None:
    op.drop_table("webhook_delivery_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
    with op.batch_alter_table("outbox_events") as batch:
        batch.drop_constraint("uq_outbox_events_payment_id_sequence", type_="unique")
        batch.drop_constraint("uq_outbox_events_public_id", type_="unique")
        batch.drop_column("sequence")
        batch.drop_column("public_id")
