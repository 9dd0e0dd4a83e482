"""Manual capture: the payment's capture method, what it may still capture, and the
``requires_capture`` status; at most one capture or cancel in flight per payment.

Existing rows are automatic-capture payments with nothing left to capture (the defaults).

Revision ID: 0013
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0007"
branch_labels = None
depends_on = None

# The name migration 0001 gave it (the naming convention prefixed its already prefixed name).
STATUS_CHECK = "ck_payments_ck_payments_status_known"
OLD_STATUSES = "status IN ('processing', 'succeeded', 'failed', 'canceled', 'needs_attention')"
NEW_STATUSES = (
    "status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'canceled', "
    "'needs_attention')"
)
ONE_CAPTURE_OR_CANCEL = "uq_operations_one_capture_or_cancel"
_IN_FLIGHT = "kind IN ('capture', 'cancel') AND status <> 'failed'"


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(
            sa.Column("capture_method", sa.String(10), nullable=False, server_default="automatic")
        )
        batch.add_column(
            sa.Column("amount_capturable", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(NEW_STATUSES))
    # Behind the payment's row lock in the accept: a second capture or cancel of one payment
    # that has not failed cannot even be stored.
    op.create_index(
        ONE_CAPTURE_OR_CANCEL,
        "operations",
        ["payment_id"],
        unique=True,
        postgresql_where=sa.text(_IN_FLIGHT),
        sqlite_where=sa.text(_IN_FLIGHT),
    )


def downgrade() -> None:
    op.drop_index(ONE_CAPTURE_OR_CANCEL, table_name="operations")
    with op.batch_alter_table("payments") as batch:
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(OLD_STATUSES))
        batch.drop_column("amount_capturable")
        batch.drop_column("capture_method")
