"""Refunds made outside payorch: the refund sync operation kind, and one refund row per
provider refund.

Revision ID: 0016
Revises: 0013
Create Date: 2026-12-01

Existing rows keep working: the kind check only widens, and the unique index covers
refunds' provider ids, which payorch never recorded twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0013"
branch_labels = None
depends_on = None

# The name migration 0007 gave it (the naming convention prefixed its already prefixed name).
KIND_CHECK = "ck_operations_ck_operations_kind_known"
OLD_KINDS = "kind IN ('capture', 'cancel', 'refund')"
NEW_KINDS = "kind IN ('capture', 'cancel', 'refund', 'refund_sync')"
ONE_ROW_PER_PROVIDER_REFUND = "kind = 'refund' AND provider_object_id IS NOT NULL"


def _replace_kind_check(condition: str) -> None:
    # SQLite cannot alter a constraint: batch mode rebuilds the table (with the reflected
    # check replaced); PostgreSQL alters it in place.
    with op.batch_alter_table("operations") as batch:
        batch.drop_constraint(op.f(KIND_CHECK), type_="check")
        batch.create_check_constraint(op.f(KIND_CHECK), sa.text(condition))


def upgrade() -> None:
    _replace_kind_check(NEW_KINDS)
    op.create_index(
        "uq_operations_refund_provider_object_id",
        "operations",
        ["provider_object_id"],
        unique=True,
        postgresql_where=sa.text(ONE_ROW_PER_PROVIDER_REFUND),
        sqlite_where=sa.text(ONE_ROW_PER_PROVIDER_REFUND),
    )


def downgrade() -> None:
    op.drop_index("uq_operations_refund_provider_object_id", table_name="operations")
    op.execute("DELETE FROM operations WHERE kind = 'refund_sync'")
    _replace_kind_check(OLD_KINDS)
