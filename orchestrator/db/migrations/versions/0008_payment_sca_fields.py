"""Part 2 request fields on payments: the provider's customer, off-session, return URL.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: existing rows keep meaning what they meant (no customer, not
    # said whether off-session, no return URL), and their fingerprints are unchanged.
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("customer", sa.String(255), nullable=True))
        batch.add_column(sa.Column("off_session", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("return_url", sa.String(2048), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        for name in ("return_url", "off_session", "customer"):
            batch.drop_column(name)
