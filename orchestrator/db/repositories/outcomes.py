"""Business rows written by the finishing transaction: outcome, ledger lines, outbox."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.session import Session
from orchestrator.db.tables import ledger_lines, outbox_events, payment_outcomes, payments
from orchestrator.domain.ids import new_event_id
from orchestrator.domain.ledger import LedgerLine, check_balanced
from orchestrator.domain.model import PaymentRecord

# Built once with bound parameters (see ``lease_statements.prebuilt_update``): the finish
# runs them for every payment.
_OUTCOME_INSERT = prepare_once(payment_outcomes.insert())
_OUTBOX_INSERT = prepare_once(outbox_events.insert())
_LEDGER_INSERT = prepare_once(ledger_lines.insert())
# The next event number, raised in the row itself: the UPDATE takes the payment's row lock
# (or finds it held by this transaction) and, in read committed, raises the newest
# committed value once the lock is granted.
_NEXT_SEQUENCE = prepare_once(
    payments.update()
    .where(payments.c.id == sa.bindparam("p_id"))
    .values(latest_event_sequence=payments.c.latest_event_sequence + 1)
    .returning(payments.c.latest_event_sequence)
)


class OutcomeRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add_outcome(self, record: PaymentRecord, *, now: datetime) -> None:
        assert record.provider_outcome is not None, "finish needs a settled outcome"
        self._db.write(
            _OUTCOME_INSERT,
            {
                "payment_id": record.id,
                "client_id": record.client_id,
                "provider": record.provider,
                "provider_payment_id": record.provider_payment_id,
                "provider_charge_id": record.provider_charge_id,
                "outcome": record.provider_outcome.value,
                "amount": record.request.amount,
                "currency": record.request.currency,
                "failure_code": record.failure.code if record.failure else None,
                "decline_code": record.failure.decline_code if record.failure else None,
                "created_at": now,
            },
        )

    def restate_outcome(
        self, record: PaymentRecord, outcome: str, amount: int, *, now: datetime
    ) -> None:
        """The payment's business result after a capture or cancel: the charge's
        ``requires_capture`` row becomes ``succeeded`` (what was captured) or ``canceled``;
        a payment canceled before its charge finished gets its first row."""
        updated = self._db.execute(
            payment_outcomes.update()
            .where(payment_outcomes.c.payment_id == record.id)
            .values(outcome=outcome, amount=amount)
        )
        if updated:
            return
        self._db.execute(
            payment_outcomes.insert().values(
                payment_id=record.id,
                client_id=record.client_id,
                provider=record.provider,
                provider_payment_id=record.provider_payment_id,
                provider_charge_id=record.provider_charge_id,
                outcome=outcome,
                amount=amount,
                currency=record.request.currency,
                failure_code=record.failure.code if record.failure else None,
                decline_code=None,
                created_at=now,
            )
        )

    def add_ledger_lines(self, payment_id: str, lines: list[LedgerLine], *, now: datetime) -> None:
        """One entry of the payment's ledger: every line the business event books, which
        must sum to zero per currency (``UnbalancedEntry`` otherwise, nothing written).
        The only writer of ledger lines; on PostgreSQL the deferred trigger of migration
        0031 repeats the check at commit, on SQLite this check is the only one.  Hazard:
        never from a single-statement unit (``Container.statement_uow``): there every
        statement commits on its own, and the trigger would judge half an entry."""
        if not lines:
            return
        check_balanced(lines)
        self._db.write(
            _LEDGER_INSERT,
            [
                {
                    "payment_id": payment_id,
                    "account": line.account,
                    "amount": line.amount,
                    "currency": line.currency,
                    "created_at": now,
                }
                for line in lines
            ],
        )

    def next_event_sequence(self, payment_id: str) -> int:
        """Take the payment's next event sequence number: one ``UPDATE … RETURNING`` that
        takes the payment's row lock (kept until the transaction ends) and raises
        ``latest_event_sequence``.  Writers of one payment's events are serialised by that
        lock: a dispute arriving as the charge finishes waits, then raises the number the
        finish committed (read committed re-reads the row once the lock is granted), so two
        writers never take the same number.  A finish that already holds the lock and read
        the number with its settlement sets it in its own ``UPDATE`` instead
        (``LeaseRepository.finish``)."""
        return int(self._db.scalar(_NEXT_SEQUENCE, {"p_id": payment_id}))

    def add_outbox_event(
        self,
        payment_id: str,
        event_type: str,
        payload: dict[str, Any],
        *,
        now: datetime,
        sequence: int | None = None,
    ) -> int:
        """Write the event with the payment's next sequence (returned).  A payment
        representation in it says ``latest_event_sequence`` = this event's own sequence:
        the event is the newest change it describes.  ``sequence``: the number this
        transaction already took, with ``next_event_sequence`` or, in the charge's finish,
        from the row its settlement locked (the lock is still held, so it is still the
        next one)."""
        if sequence is None:
            sequence = self.next_event_sequence(payment_id)
        if payload.get("object") == "payment" and "latest_event_sequence" in payload:
            payload = {**payload, "latest_event_sequence": sequence}
        self._db.write(
            _OUTBOX_INSERT,
            {
                "payment_id": payment_id,
                "event_type": event_type,
                "payload": payload,
                "created_at": now,
                "public_id": new_event_id(),
                "sequence": sequence,
            },
        )
        return sequence
