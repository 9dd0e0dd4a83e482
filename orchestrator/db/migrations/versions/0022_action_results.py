"""The customer's authentication result forwarded through payorch (3-D Secure at a provider
that takes it, Adyen's ``/payments/details``): the last result the merchant sent, the number
of its forward (its key ``payorch-{id}-details-{n}``), and whether it still waits for the
provider's answer.

Existing rows took none: NULL, 0, false.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05

Decision 0073.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def json_type() -> sa.types.TypeEngine:  # type: ignore[type-arg]
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("action_result", json_type(), nullable=True))
        batch.add_column(
            sa.Column("action_result_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column(
                "action_result_pending", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("action_result_pending")
        batch.drop_column("action_result_attempts")
        batch.drop_column("action_result")
