"""The exactly-once invariants, checked against the database and the provider's own books.

``check`` returns ``Findings``: problems per payment plus general ones.  On failure the test
prints, for every offending payment, its record and the provider's history of it (every
request the simulator received for that record, with the fault it injected), which is what
one needs to tell a double charge from a stuck lease from a lost answer.

The provider's books are read through ``books`` (``StripeBooks`` unless told otherwise), so the
same invariants hold for payments on any provider: at Adyen a "money movement" is an
authorisation carrying our reference, checked against the record's amount as well.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from tests.chaos.books import ProviderBooks, StripeBooks
from tests.chaos.merchants import LogicalPayment, Traffic
from tests.harness.stack import Stack

COMPLETED = ("succeeded", "failed")
# Offending payments shown in full on failure (the rest are counted).
SHOWN = 15


@dataclass
class Findings:
    books: ProviderBooks
    by_payment: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    general: list[str] = field(default_factory=list)

    def add(self, payment: str, problem: str) -> None:
        self.by_payment[payment].append(problem)

    @property
    def ok(self) -> bool:
        return not self.by_payment and not self.general

    def render(self, stack: Stack) -> str:
        lines = [*self.general]
        offending = sorted(self.by_payment)
        lines.append(f"{len(offending)} offending payments")
        for payment_id in offending[:SHOWN]:
            lines.append(f"\n=== {payment_id}: {'; '.join(self.by_payment[payment_id])}")
            lines.extend(describe_payment(stack, self.books, payment_id))
        if len(offending) > SHOWN:
            lines.append(f"... and {len(offending) - SHOWN} more: {offending[SHOWN:]}")
        return "\n".join(lines)


def describe_payment(stack: Stack, books: ProviderBooks, payment_id: str) -> list[str]:
    """The record and its provider history (``payment_id`` may also be an unmatched key)."""
    with stack.container.engine.connect() as conn:
        row = conn.execute(
            sa.select(payments).where(
                sa.or_(payments.c.id == payment_id, payments.c.idempotency_key == payment_id)
            )
        ).first()
    if row is None:
        return ["  no record"]
    record = {k: v for k, v in row._mapping.items() if k not in ("response_body", "metadata")}
    lines = [f"  record: {record}", "  provider history:"]
    lines.extend(f"    {line}" for line in books.history(row.id))
    return lines


def _rows(stack: Stack, query: sa.Select[Any]) -> list[Any]:
    with stack.container.engine.connect() as conn:
        return list(conn.execute(query).all())


def check(
    stack: Stack,
    plan: list[LogicalPayment],
    traffic: Traffic,
    *,
    parked_expected: bool,
    books: ProviderBooks | None = None,
) -> Findings:
    """Every invariant of the run.  ``parked_expected``: the forced payments are still parked
    (before the operator retried them) rather than succeeded.  ``books``: the provider the
    payments went to (the stack's Stripe simulator by default)."""
    findings = Findings(books if books is not None else StripeBooks(stack.simulator.admin))
    findings.general.extend(f"client: {failure}" for failure in traffic.failures)

    records = _rows(
        stack,
        sa.select(
            payments.c.id,
            payments.c.idempotency_key,
            payments.c.status,
            payments.c.amount,
            payments.c.currency,
            payments.c.provider,
            payments.c.connector_account_id,
        ),
    )
    keys = Counter(row.idempotency_key for row in records)
    by_key = {row.idempotency_key: row for row in records}
    status_of = {row.id: str(row.status) for row in records}

    # Every key maps to exactly one record, and every answer for a key named that record.
    answers: defaultdict[str, list[str | None]] = defaultdict(list)
    for answer in traffic.answers:
        answers[answer.key].append(answer.payment_id)
    planned = {payment.key: payment for payment in plan}
    for key, count in keys.items():
        if key not in planned:
            findings.add(str(key), f"a record for an unplanned key ({count})")
        elif count != 1:
            findings.add(key, f"{count} records for one key")
    for payment in plan:
        row = by_key.get(payment.key)
        if row is None:
            findings.add(payment.key, "no record for this key")
            continue
        named = set(answers[payment.key])
        if named != {row.id}:
            findings.add(row.id, f"answers named {sorted(map(str, named))}")
        if len(answers[payment.key]) != payment.sends:
            findings.add(row.id, f"{len(answers[payment.key])} answers for {payment.sends} sends")
        expected = payment.expected
        if payment.forced and not parked_expected:
            expected = "succeeded"
        if status_of[row.id] != expected:
            findings.add(row.id, f"status {status_of[row.id]}, expected {expected}")

    _check_money(stack, records, findings)
    _check_provider_named(stack, records, findings)
    return findings


def _check_provider_named(stack: Stack, records: list[Any], findings: Findings) -> None:
    """Each record names the provider that moved its money, and its ledger the account: the
    receivable of a success is owed by its connector account (the platform's own is
    ``ca_platform_stripe``; decision 0105), at the amount asked."""
    name = findings.books.name
    receivable = {
        row.payment_id: (str(row.account), int(row.amount))
        for row in _rows(
            stack,
            sa.select(
                ledger_lines.c.payment_id, ledger_lines.c.account, ledger_lines.c.amount
            ).where(ledger_lines.c.account.like("provider_receivable:%")),
        )
    }
    for row in records:
        if row.provider != name:
            findings.add(row.id, f"the record names provider {row.provider}, not {name}")
        if str(row.status) != "succeeded":
            continue
        owed = f"provider_receivable:{row.connector_account_id or 'ca_platform_stripe'}"
        account, amount = receivable.get(row.id, (None, 0))
        if account != owed or amount != row.amount:
            findings.add(row.id, f"ledger: {amount} receivable at {account}, not at {owed}")


def _check_money(stack: Stack, records: list[Any], findings: Findings) -> None:
    """Provider movements, outcome rows and ledger lines against the records' final states."""
    status_of = {row.id: str(row.status) for row in records}
    charges = findings.books.charges()
    movements = Counter(charge.record_id for charge in charges)
    for payment_id, count in movements.items():
        if payment_id not in status_of:
            findings.add(payment_id, f"{count} money movements for a record that does not exist")
    asked = {row.id: (int(row.amount), str(row.currency).upper()) for row in records}
    for charge in charges:
        moved = (charge.amount, charge.currency)
        if (
            charge.amount is not None
            and charge.record_id in asked
            and moved != asked[charge.record_id]
        ):
            findings.add(
                charge.record_id,
                f"the provider moved {moved}, the record asks {asked[charge.record_id]}",
            )
    outcomes = {
        row.payment_id: (int(row.n), row.outcome)
        for row in _rows(
            stack,
            sa.select(
                payment_outcomes.c.payment_id,
                sa.func.count().label("n"),
                sa.func.min(payment_outcomes.c.outcome).label("outcome"),
            ).group_by(payment_outcomes.c.payment_id),
        )
    }
    ledger = {
        row.payment_id: (int(row.n), int(row.total))
        for row in _rows(
            stack,
            sa.select(
                ledger_lines.c.payment_id,
                sa.func.count().label("n"),
                sa.func.sum(ledger_lines.c.amount).label("total"),
            ).group_by(ledger_lines.c.payment_id),
        )
    }
    for payment_id, status in status_of.items():
        moved = int(movements.get(payment_id, 0))
        wanted = 1 if status == "succeeded" else 0
        if moved != wanted:
            findings.add(payment_id, f"{moved} money movements for a {status} payment")
        count, outcome = outcomes.get(payment_id, (0, None))
        if status in COMPLETED and (count, outcome) != (1, status):
            findings.add(payment_id, f"outcome rows {count} ({outcome}) for a {status} payment")
        if status not in COMPLETED and count:
            findings.add(payment_id, f"{count} outcome rows for a {status} payment")
        lines, total = ledger.get(payment_id, (0, 0))
        if (lines, total) != ((2, 0) if status == "succeeded" else (0, 0)):
            findings.add(payment_id, f"ledger: {lines} lines summing to {total} ({status})")
    completed = sum(1 for status in status_of.values() if status in COMPLETED)
    outcome_rows = sum(count for count, _ in outcomes.values())
    if outcome_rows != completed:
        findings.general.append(f"{outcome_rows} outcome rows for {completed} completed records")
    ledger_total = sum(total for _, total in ledger.values())
    if ledger_total != 0:
        findings.general.append(f"the ledger sums to {ledger_total}, not 0")
    stuck = sorted(p for p, status in status_of.items() if status == "processing")
    if stuck:
        findings.general.append(f"{len(stuck)} payments still processing: {stuck[:10]}")
