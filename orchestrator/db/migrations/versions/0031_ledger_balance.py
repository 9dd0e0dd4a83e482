"""The ledger balances, enforced: a deferred constraint trigger on ``ledger_lines``
(PostgreSQL), and the ``ledger_imbalance`` finding kind.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05

Decision 0101.  Every business event writes its ledger lines as one entry for one payment in
one transaction, balanced per currency.  At the commit of any transaction that inserted,
changed or deleted a line, the trigger sums each touched payment's lines per currency (by
``ix_ledger_lines_payment_id``: a handful of rows per payment) and refuses the commit
(SQLSTATE 23514, ``check_violation``) if one is not zero.  Every committed state balances,
so a payment's sum is zero exactly when the lines this transaction wrote for it balance.

The trigger is a row trigger (constraint triggers cannot be statement triggers): an entry
of four lines checks its payment four times, each an index lookup of the payment's lines.
Deferred to the commit because an entry's lines may arrive in several statements.

SQLite has no deferred triggers: there the writer's own check
(``OutcomeRepository.add_ledger_lines``) is the only guard.

Before the trigger is installed the existing lines are checked (one scan of the table): a
payment already out of balance would make every later entry of that payment fail, so the
upgrade stops and names it instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from orchestrator.db.migrate import MigrationRefused

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# The name migration 0027 gave it (the naming convention prefixed its already prefixed name).
KIND_CHECK = "ck_reconciliation_findings_ck_reconciliation_findings_kind_known"
OLD_KINDS = (
    "kind IN ('orphan_at_provider', 'missing_at_provider', 'amount_mismatch', "
    "'status_mismatch', 'refund_mismatch')"
)
NEW_KINDS = (
    "kind IN ('orphan_at_provider', 'missing_at_provider', 'amount_mismatch', "
    "'status_mismatch', 'refund_mismatch', 'ledger_imbalance')"
)

TRIGGER = "ledger_lines_balance"
FUNCTION = "ledger_lines_balance_check"
# Payments named when the upgrade finds the existing ledger out of balance.
NAMED_AT_MOST = 10

# Plain text, no formatting: the names are written out (TRIGGER, FUNCTION).
_CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_lines_balance_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    touched text[];
    target text;
    off record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        touched := ARRAY[NEW.payment_id];
    ELSIF TG_OP = 'DELETE' THEN
        touched := ARRAY[OLD.payment_id];
    ELSE
        touched := ARRAY[NEW.payment_id, OLD.payment_id];
    END IF;
    FOREACH target IN ARRAY touched LOOP
        SELECT currency, sum(amount) AS total INTO off
          FROM ledger_lines
         WHERE payment_id = target
         GROUP BY currency
        HAVING sum(amount) <> 0
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'check_violation',
                CONSTRAINT = 'ledger_lines_balance',
                MESSAGE = format(
                    'the ledger lines of payment %s do not balance in %s: they sum to %s',
                    target, off.currency, off.total),
                HINT = 'each entry''s lines must sum to zero per currency (decision 0101)';
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$
"""

_CREATE_TRIGGER = """
CREATE CONSTRAINT TRIGGER ledger_lines_balance
AFTER INSERT OR UPDATE OR DELETE ON ledger_lines
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION ledger_lines_balance_check()
"""

_UNBALANCED = sa.text(
    "SELECT payment_id, currency, sum(amount) AS total FROM ledger_lines "
    "GROUP BY payment_id, currency HAVING sum(amount) <> 0 "
    "ORDER BY payment_id, currency LIMIT :limit"
)


def _replace_kind_check(condition: str) -> None:
    # SQLite cannot alter a constraint: batch mode rebuilds the table (with the reflected
    # check replaced); PostgreSQL alters it in place.
    with op.batch_alter_table("reconciliation_findings") as batch:
        batch.drop_constraint(op.f(KIND_CHECK), type_="check")
        batch.create_check_constraint(op.f(KIND_CHECK), sa.text(condition))


def _refuse_an_unbalanced_ledger() -> None:
    found = op.get_bind().execute(_UNBALANCED, {"limit": NAMED_AT_MOST}).all()
    if found:
        named = ", ".join(f"{row.payment_id} {row.currency} {int(row.total):+d}" for row in found)
        # The trigger would refuse every later entry of these payments.
        raise MigrationRefused(
            "0031: ledger lines that do not sum to zero per payment and currency: "
            f"{named}; book the missing lines so each sums to zero, then upgrade again "
            "(decision 0101)"
        )


def upgrade() -> None:
    _replace_kind_check(NEW_KINDS)
    if op.get_bind().dialect.name != "postgresql":
        return
    _refuse_an_unbalanced_ledger()
    op.execute(_CREATE_FUNCTION)
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON ledger_lines")
    op.execute(_CREATE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON ledger_lines")
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    op.execute("DELETE FROM reconciliation_findings WHERE kind = 'ledger_imbalance'")
    _replace_kind_check(OLD_KINDS)
