"""The provider side of the ledger per connector account: lines booked under a provider's
name (``provider_receivable:stripe``) renamed to the payment's account
(``provider_receivable:ca_…``; the platform's own: ``ca_platform_stripe``).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-05

Decision 0105.  A line was booked under the payment's provider when the payment finished
(or was captured, canceled, refunded), and the payment's account then was the one the money
moved at: a failover moves the payment before anything is booked, and nothing moves it after
its money has.  So the payment's account now (``payments.connector_account_id``) is the
account of every line it has, and the rename reads it from there.

Only the name changes, never an amount: the balance trigger of 0031 (a row trigger, it
re-sums each renamed line's payment at commit) passes every row, as each payment's sums are
unchanged.

A line under a provider's name that is not its payment's provider cannot have been written
by payorch; which account it belongs to would be a guess, so the upgrade stops and names it
(as 0031 does for a ledger out of balance) instead of renaming it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from orchestrator.db.migrate import MigrationRefused

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

# The account kinds whose lines name the provider side (``domain.ledger``).
KINDS = ("provider_receivable", "provider_authorized")
# The platform's own account, as ``domain.circuit.PLATFORM_CIRCUIT_KEY`` names it (written
# out: a migration keeps the value it was written with).
PLATFORM = "ca_platform_stripe"
NAMED_AT_MOST = 10

# Both statements run on PostgreSQL and SQLite (a correlated subquery, no UPDATE … FROM).
_TO_ACCOUNT = sa.text(
    "UPDATE ledger_lines SET account = :kind || ':' || COALESCE("
    "(SELECT p.connector_account_id FROM payments p WHERE p.id = ledger_lines.payment_id), "
    ":platform) "
    "WHERE account = :kind || ':' || "
    "(SELECT p.provider FROM payments p WHERE p.id = ledger_lines.payment_id)"
)
_TO_PROVIDER = sa.text(
    "UPDATE ledger_lines SET account = :kind || ':' || "
    "(SELECT p.provider FROM payments p WHERE p.id = ledger_lines.payment_id) "
    "WHERE account = :kind || ':' || COALESCE("
    "(SELECT p.connector_account_id FROM payments p WHERE p.id = ledger_lines.payment_id), "
    ":platform)"
)
# Lines of these kinds still not at an account once the rename ran.
_LEFT_OVER = sa.text(
    "SELECT l.id, l.payment_id, l.account FROM ledger_lines l "
    "WHERE (l.account LIKE 'provider\\_receivable:%' ESCAPE '\\' "
    "OR l.account LIKE 'provider\\_authorized:%' ESCAPE '\\') "
    "AND l.account NOT LIKE 'provider\\_receivable:ca\\_%' ESCAPE '\\' "
    "AND l.account NOT LIKE 'provider\\_authorized:ca\\_%' ESCAPE '\\' "
    "ORDER BY l.id LIMIT :limit"
)


def upgrade() -> None:
    bind = op.get_bind()
    for kind in KINDS:
        bind.execute(_TO_ACCOUNT, {"kind": kind, "platform": PLATFORM})
    left = bind.execute(_LEFT_OVER, {"limit": NAMED_AT_MOST}).all()
    if left:
        named = ", ".join(f"line {row.id} ({row.payment_id}, {row.account})" for row in left)
        # Renaming them would guess an account; the transaction rolls the rename back.
        raise MigrationRefused(
            "0032: ledger lines under a provider that is not their payment's: "
            f"{named}; book them at the account the money moved at "
            "(provider_receivable:ca_…), then upgrade again (decision 0105)"
        )


def downgrade() -> None:
    bind = op.get_bind()
    for kind in KINDS:
        bind.execute(_TO_PROVIDER, {"kind": kind, "platform": PLATFORM})
