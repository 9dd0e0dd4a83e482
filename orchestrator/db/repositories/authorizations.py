"""The payment's side of a capture or a cancel: who may start one, the hold a cancel puts
on an unfinished charge, and the payment's new state when the operation finishes.

Every method runs in a transaction that holds the payment's row lock
(``MoneyRepository.lock_payment``) and repeats its guard as a conditional UPDATE, so the
database has the last word:

* ``unfinished_operation``: a capture or cancel of this payment that has not finished (or
  that waits for an operator).  Under the row lock every accept of the same payment queues
  behind ours and sees our committed row; the partial unique index
  ``uq_operations_one_capture_or_cancel`` refuses a second one even if a writer skipped the
  lock.
* ``hold_charge``: a cancel of a payment whose charge is unfinished (``requires_action``, or
  ``processing`` before any confirm was sent) fences the charge out: the token goes up and
  the lease is the cancel's until the cancel finishes.  The charge's holder, if any, finds
  its token stale at its next write, which comes before any confirm (the confirm number is
  taken in a fenced write), so no confirm is ever sent after the hold.
* ``book_capture`` / ``cancel`` / ``release_charge``: the finish, conditional on the state
  the operation started from; ``store_answer`` keeps the final payment's answer of record.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.session import Session
from orchestrator.db.tables import operations, payments
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import PaymentStatus, RecoveryPoint

c = payments.c
o = operations.c
_UNFINISHED = ("processing", "needs_attention")
# How long a cancel may hold an unfinished charge.  Long on purpose: the hold ends when the
# cancel finishes (or is released by its failure); if the cancel waited longer than this
# for an operator, the charge's lease expires and the sweeper resumes the charge, whose
# query-first read of the intent then tells the truth.
CHARGE_HOLD = timedelta(days=7)


def hold_owner(operation_id: str) -> str:
    """The lease owner a held charge shows (ops see which operation holds it)."""
    return f"operation:{operation_id}"


class AuthorizationRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def unfinished_operation(self, payment_id: str) -> str | None:
        """The id of a capture or cancel of the payment that has not finished, if any."""
        found: str | None = self._db.scalar(
            sa.select(o.id)
            .where(
                o.payment_id == payment_id,
                o.kind.in_(["capture", "cancel"]),
                o.status.in_(_UNFINISHED),
            )
            .limit(1)
        )
        return found

    def hold_charge(
        self, payment: PaymentRecord, *, operation_id: str, now: datetime
    ) -> PaymentRecord | None:
        """Fence out the payment's unfinished charge for a cancel (see the module
        docstring).  None: the charge moved on (a confirm was sent, it finished)."""
        row = self._db.one(
            payments.update()
            .where(
                c.id == payment.id,
                c.status == PaymentStatus.PROCESSING.value,
                c.lease_token == payment.lease_token,
                c.confirm_attempts == payment.confirm_attempts,
            )
            .values(
                lease_token=c.lease_token + 1,
                lease_owner=hold_owner(operation_id),
                locked_until=now + CHARGE_HOLD,
                next_attempt_at=None,
            )
            .returning(*payments.c)
        )
        return None if row is None else to_payment(row)

    def release_charge(self, payment_id: str, *, operation_id: str, now: datetime) -> None:
        """The cancel failed (the payment moved on at the provider): the held charge is due
        at once, and the sweeper's takeover resumes it with a query-first read."""
        self._db.execute(
            payments.update()
            .where(
                c.id == payment_id,
                c.status == PaymentStatus.PROCESSING.value,
                c.lease_owner == hold_owner(operation_id),
            )
            .values(lease_owner=None, locked_until=now, next_attempt_at=now, updated_at=now)
        )

    def book_capture(
        self, payment_id: str, *, captured: int, now: datetime
    ) -> PaymentRecord | None:
        """requires_capture -> succeeded with what the provider captured (the rest of the
        authorisation is released).  None: the payment is no longer requires_capture."""
        return self._finish(
            payment_id,
            c.status == PaymentStatus.REQUIRES_CAPTURE.value,
            now,
            status=PaymentStatus.SUCCEEDED.value,
            amount_captured=captured,
            amount_capturable=0,
        )

    def cancel(
        self, payment_id: str, *, operation_id: str, failure: Failure, now: datetime
    ) -> PaymentRecord | None:
        """-> canceled, from requires_capture (the authorisation released) or from a charge
        this cancel holds.  None: neither (someone else moved the payment)."""
        return self._finish(
            payment_id,
            sa.or_(
                c.status == PaymentStatus.REQUIRES_CAPTURE.value,
                sa.and_(
                    c.status == PaymentStatus.PROCESSING.value,
                    c.lease_owner == hold_owner(operation_id),
                ),
            ),
            now,
            status=PaymentStatus.CANCELED.value,
            amount_capturable=0,
            failure_code=failure.code,
            decline_code=None,
            failure_message=failure.message[:1000],
        )

    def _finish(
        self, payment_id: str, guard: sa.ColumnElement[bool], now: datetime, **values: object
    ) -> PaymentRecord | None:
        row = self._db.one(
            payments.update()
            .where(c.id == payment_id, guard)
            .values(
                recovery_point=RecoveryPoint.COMPLETED.value,
                lease_owner=None,
                locked_until=None,
                next_attempt_at=None,
                waiting_for=None,
                waiting_since=None,
                next_action=None,
                client_secret=None,
                completed_at=now,
                updated_at=now,
                **values,
            )
            .returning(*payments.c)
        )
        return None if row is None else to_payment(row)

    def store_answer(self, record: PaymentRecord) -> bytes:
        """The payment's answer of record (what a replay of its creation serves), written
        by the finish that made it final; returns the bytes."""
        document = payment_representation(record)
        encoded = encode_representation(document)
        self._db.execute(
            payments.update()
            .where(c.id == record.id)
            .values(response_body=document, final_response=encoded.decode("utf-8"))
        )
        return encoded
