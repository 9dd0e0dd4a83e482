"""The payment's money after the charge: refund reservations and bookings.

The invariant — the refunds of a payment that are not ``failed`` never sum to more than its
``amount_captured`` — is kept by the database, not by Python: a refund's accept raises
``amount_refund_reserved`` with one conditional UPDATE (``… WHERE amount_refund_reserved +
:amount <= amount_captured``) on the row it has locked, in the same transaction that
inserts the refund.  Concurrent accepts queue on the row lock and each re-evaluates the
condition against the committed total; one that does not fit updates nothing and rolls its
refund back.  A failed refund releases its reservation in its finishing transaction.
"""

from __future__ import annotations

import sqlalchemy as sa

from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.session import Session
from orchestrator.db.tables import payments
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import PaymentStatus

c = payments.c


class MoneyRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def lock_payment(self, client_id: str, payment_id: str) -> PaymentRecord | None:
        """The client's payment, row-locked until the transaction ends (SQLite: its single
        writer already serialises us).

        ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: the lock orders the writers that take it
        (refunds and captures finishing at once), and nothing here changes a key.  ``FOR
        UPDATE`` also blocks every insert that references the payment (a foreign key's
        ``KEY SHARE``): a provider event stored for it waited on a refund's finish, which
        waited on the operation row that event's transaction had just woken — a deadlock
        PostgreSQL broke by failing the finish."""
        row = self._db.one(
            sa.select(payments)
            .where(c.id == payment_id, c.client_id == client_id)
            .with_for_update(key_share=True)
        )
        return None if row is None else to_payment(row)

    def reserve_refund(self, payment_id: str, amount: int) -> PaymentRecord | None:
        """Hold ``amount`` for a refund if it fits; None (nothing changed) if it does not or
        the payment is not succeeded."""
        row = self._db.one(
            payments.update()
            .where(
                c.id == payment_id,
                c.status == PaymentStatus.SUCCEEDED.value,
                c.amount_refund_reserved + amount <= c.amount_captured,
            )
            .values(amount_refund_reserved=c.amount_refund_reserved + amount)
            .returning(*payments.c)
        )
        return None if row is None else to_payment(row)

    def book_refund(self, payment_id: str, amount: int) -> None:
        """A refund succeeded: it stays reserved and counts as refunded."""
        self._db.execute(
            payments.update()
            .where(c.id == payment_id)
            .values(amount_refunded=c.amount_refunded + amount)
        )

    def release_refund(self, payment_id: str, amount: int) -> None:
        """A refund failed: what it held is free again."""
        self._db.execute(
            payments.update()
            .where(c.id == payment_id)
            .values(amount_refund_reserved=c.amount_refund_reserved - amount)
        )
