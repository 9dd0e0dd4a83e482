"""Routing configurations, and the route stored on each payment.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05

Decisions 0076 and 0077.  Nothing existing changes meaning: no client has a configuration
(``api_clients.routing_version`` NULL keeps the one-statement accept), and every existing
payment has no stored route (it is shown as its connector account, or ``platform``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def json_type() -> sa.types.TypeEngine:  # type: ignore[type-arg]
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "routing_configurations",
        sa.Column("client_id", sa.String(40), nullable=False),
        sa.Column("rules", json_type(), nullable=False),
        sa.Column("default_route", json_type(), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("client_id", name="pk_routing_configurations"),
        sa.ForeignKeyConstraint(
            ["client_id"],
            ["api_clients.id"],
            name="fk_routing_configurations_client_id_api_clients",
        ),
    )
    op.add_column("api_clients", sa.Column("routing_version", sa.Integer, nullable=True))
    op.add_column("payments", sa.Column("route", json_type(), nullable=True))
    op.add_column("payments", sa.Column("route_rule", sa.String(100), nullable=True))
    op.add_column("payments", sa.Column("route_skipped", json_type(), nullable=True))
    op.add_column("payments", sa.Column("payment_methods", json_type(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("payment_methods")
        batch.drop_column("route_skipped")
        batch.drop_column("route_rule")
        batch.drop_column("route")
    with op.batch_alter_table("api_clients") as batch:
        batch.drop_column("routing_version")
    op.drop_table("routing_configurations")
