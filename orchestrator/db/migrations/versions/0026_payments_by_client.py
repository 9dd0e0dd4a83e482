"""An index for a merchant's list of its payments.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05

Decision 0089.  ``GET /v1/payments`` reads ``WHERE client_id = ? [AND …] ORDER BY
created_at DESC, id DESC LIMIT n`` from a position ``(created_at, id) < (?, ?)``: with this
index PostgreSQL starts the scan at the position and stops after n rows (backwards for the
older page, forwards for ``ending_before``), whatever the page's depth.  Without it, every
page of one merchant reads and sorts all of the merchant's payments.

Built ``CONCURRENTLY`` on PostgreSQL: a plain ``CREATE INDEX`` holds a lock that blocks every
insert into ``payments`` (every accept) until the build ends, minutes on a large table.
CONCURRENTLY cannot run in a transaction, hence the autocommit block.  Should the build
fail half-way it leaves an INVALID index behind: ``DROP INDEX ix_payments_client_created``
and upgrade again.
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_INDEX = "ix_payments_client_created"
_COLUMNS = ["client_id", "created_at", "id"]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.create_index(
                _INDEX, "payments", _COLUMNS, postgresql_concurrently=True, if_not_exists=True
            )
    else:
        op.create_index(_INDEX, "payments", _COLUMNS)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="payments")
