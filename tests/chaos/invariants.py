"""The exactly-once invariants, checked against the database and the provider's own books.

``check`` returns ``Findings``: problems per payment plus general ones.  On failure the test
prints, for every offending payment, its record and the provider's history of it (every
request the simulator received for that record, with the fault it injected), which is what
one needs to tell a double charge from a stuck lease from a lost answer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from tests.chaos.merchants import LogicalPayment, Traffic
from tests.harness.stack import Stack

COMPLETED = ("succeeded", "failed")
# Offending payments shown in full on failure (the rest are counted).
SHOWN = 15


@dataclass
class Findings:
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
            lines.extend(describe_payment(stack, payment_id))
        if len(offending) > SHOWN:
            lines.append(f"... and {len(offending) - SHOWN} more: {offending[SHOWN:]}")
        return "\n".join(lines)


def describe_payment(stack: Stack, payment_id: str) -> list[str]:
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
    for request in stack.simulator.admin.requests(record_id=row.id):
        lines.append(
            "    #{seq} {method} {operation} key={idempotency_key} -> {status}"
            " fault={fault} {duration_ms}ms".format(**request)
        )
    return lines


def _rows(stack: Stack, query: sa.Select[Any]) -> list[Any]:
    with stack.container.engine.connect() as conn:
        return list(conn.execute(query).all())


def check(
    stack: Stack, plan: list[LogicalPayment], traffic: Traffic, *, parked_expected: bool
) -> Findings:
    """Every invariant of the run.  ``parked_expected``: the forced payments are still parked
    (before the operator retried them) rather than succeeded."""
    findings = Findings()
    findings.general.extend(f"client: {failure}" for failure in traffic.failures)

    records = _rows(
        stack,
        sa.select(payments.c.id, payments.c.idempotency_key, payments.c.status, payments.c.amount),
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

    _check_money(stack, status_of, findings)
    return findings


def _check_money(stack: Stack, status_of: dict[str, str], findings: Findings) -> None:
    """Provider movements, outcome rows and ledger lines against the records' final states."""
    movements = stack.simulator.admin.movements()["by_record"]
    for payment_id, count in movements.items():
        if payment_id not in status_of:
            findings.add(payment_id, f"{count} money movements for a record that does not exist")
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
