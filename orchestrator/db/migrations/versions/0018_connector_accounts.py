"""Connector accounts, the payment's account, and who owns a saved payment method.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05

Decisions 0062 and 0063.  Nothing existing changes meaning: every existing payment and
client gets NULL (the platform's Stripe account, as before), and no ownership is recorded
for payments accepted before this revision (the first payment after it that names a
customer claims it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def ts(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def json_type() -> sa.types.TypeEngine:  # type: ignore[type-arg]
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "connector_accounts",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("credentials_encrypted", sa.Text, nullable=False),
        sa.Column("credential_hints", json_type(), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("disabled_reason", sa.String(1000), nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        ts("created_at"),
        ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_connector_accounts"),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name="fk_connector_accounts_client_id_api_clients"
        ),
        sa.CheckConstraint(
            "provider IN ('stripe', 'adyen')", name="ck_connector_accounts_provider_known"
        ),
        sa.CheckConstraint(
            "status IN ('enabled', 'disabled')", name="ck_connector_accounts_status_known"
        ),
    )
    op.create_index("ix_connector_accounts_client_id", "connector_accounts", ["client_id"])
    op.create_table(
        "payment_method_owners",
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("external_id", sa.String(255), nullable=False),
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("customer", sa.String(255), nullable=True),
        ts("created_at"),
        sa.PrimaryKeyConstraint("kind", "external_id", name="pk_payment_method_owners"),
        sa.ForeignKeyConstraint(
            ["client_id"],
            ["api_clients.id"],
            name="fk_payment_method_owners_client_id_api_clients",
        ),
        sa.CheckConstraint(
            "kind IN ('customer', 'payment_method')", name="ck_payment_method_owners_kind_known"
        ),
    )
    op.add_column(
        "api_clients", sa.Column("default_connector_account_id", sa.String(40), nullable=True)
    )
    op.add_column("payments", sa.Column("connector_account_id", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("connector_account_id")
    with op.batch_alter_table("api_clients") as batch:
        batch.drop_column("default_connector_account_id")
    op.drop_table("payment_method_owners")
    op.drop_index("ix_connector_accounts_client_id", table_name="connector_accounts")
    op.drop_table("connector_accounts")
