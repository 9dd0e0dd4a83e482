"""A reconciliation run's recovery point gains the ``balance`` phase: the provider's balance
movements, read after its refunds and before ours (decision 0108).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06

Only the phase check changes.  A downgrade moves a run stopped in ``balance`` on to ``ours``
(the phase after it): the older code cannot read the balance, and a completed run of it
never did.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

# The name 0027 gave it (the naming convention prefixed its already prefixed name).
PHASE_CHECK = "ck_reconciliation_runs_ck_reconciliation_runs_phase_known"
NEW_PHASES = "phase IN ('payments', 'refunds', 'balance', 'ours', 'done')"
OLD_PHASES = "phase IN ('payments', 'refunds', 'ours', 'done')"


def _replace_phase_check(condition: str) -> None:
    # SQLite cannot alter a constraint: batch mode rebuilds the table (with the reflected
    # check replaced); PostgreSQL alters it in place.
    with op.batch_alter_table("reconciliation_runs") as batch:
        batch.drop_constraint(op.f(PHASE_CHECK), type_="check")
        batch.create_check_constraint(op.f(PHASE_CHECK), sa.text(condition))


def upgrade() -> None:
    _replace_phase_check(NEW_PHASES)


def downgrade() -> None:
    op.execute(
        "UPDATE reconciliation_runs SET phase = 'ours', cursor = NULL WHERE phase = 'balance'"
    )
    _replace_phase_check(OLD_PHASES)
