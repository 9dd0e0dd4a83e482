"""Store the answers of record as sent: the 202 body and the final 200 body, as text.

``response_body`` (JSONB on PostgreSQL) stays: rows finished before this revision keep
working — their final answer is re-encoded from it in the one canonical key order — and it
remains queryable in SQL.  New rows get ``final_response`` too, and every new accept stores
its ``accepted_response``, so replays return the first answer byte for byte.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("accepted_response", sa.Text(), nullable=True))
        batch.add_column(sa.Column("final_response", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("final_response")
        batch.drop_column("accepted_response")
