"""Provider events (``provider_events``): stored once by id, mapped to our payment, and the
one write an event may make to a payment: a deferred payment, and its operations waiting
for the provider, are made due now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import operations, payments, provider_events
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus

e = provider_events.c


@dataclass(frozen=True)
class StoredProviderEvent:
    id: str
    provider: str
    type: str
    provider_created: int
    object_type: str
    object_id: str
    provider_payment_id: str | None
    payment_id: str | None
    received_at: datetime
    woke_payment: bool


def _to_event(row: Row) -> StoredProviderEvent:
    return StoredProviderEvent(
        id=row["id"],
        provider=row["provider"],
        type=row["type"],
        provider_created=row["provider_created"],
        object_type=row["object_type"],
        object_id=row["object_id"],
        provider_payment_id=row["provider_payment_id"],
        payment_id=row["payment_id"],
        received_at=row["received_at"],
        woke_payment=row["woke_payment"],
    )


class ProviderEventRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def get(self, event_id: str) -> StoredProviderEvent | None:
        row = self._db.one(sa.select(provider_events).where(e.id == event_id))
        return None if row is None else _to_event(row)

    def for_payment(self, payment_id: str) -> list[StoredProviderEvent]:
        query = (
            sa.select(provider_events)
            .where(e.payment_id == payment_id)
            .order_by(e.received_at, e.provider_created)
        )
        return [_to_event(r) for r in self._db.all(query)]

    def payloads_about(
        self,
        provider: str,
        *,
        provider_payment_id: str | None = None,
        payment_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The payloads of ``provider``'s events stored for our payment ``payment_id`` or for
        the payment carrying ``provider_payment_id``, in the order received (both indexed:
        events by our payment id, payments by their provider id)."""
        about = []
        if payment_id is not None:
            about.append(e.payment_id == payment_id)
        if provider_payment_id is not None:
            carrying = sa.select(payments.c.id).where(
                payments.c.provider_payment_id == provider_payment_id
            )
            about.append(e.payment_id.in_(carrying))
        if not about:
            return []
        query = (
            sa.select(e.payload)
            .where(e.provider == provider, sa.or_(*about))
            .order_by(e.received_at, e.provider_created, e.id)
        )
        return [dict(row["payload"]) for row in self._db.all(query)]

    def recorded_payment(self, provider_payment_id: str) -> Row | None:
        """Our payment carrying ``provider_payment_id`` (id, amount, currency,
        capture_method), for an adapter whose requests repeat what the payment was."""
        c = payments.c
        return self._db.one(
            sa.select(c.id, c.amount, c.currency, c.capture_method)
            .where(c.provider_payment_id == provider_payment_id)
            .limit(1)
        )

    def payment_for_provider_payment(
        self, provider_payment_id: str, *, connector_account_id: str | None = None
    ) -> str | None:
        """Our payment with that provider id (only among an account's, when given)."""
        query = sa.select(payments.c.id).where(
            payments.c.provider_payment_id == provider_payment_id
        )
        if connector_account_id is not None:
            query = query.where(payments.c.connector_account_id == connector_account_id)
        found: str | None = self._db.scalar(query.limit(1))
        return found

    def payment_on_account(self, payment_id: str, connector_account_id: str) -> str | None:
        """``payment_id`` if it runs on that connector account: a provider that carries our
        id back (Adyen's merchantReference) names only its own account's payments."""
        found: str | None = self._db.scalar(
            sa.select(payments.c.id).where(
                payments.c.id == payment_id,
                payments.c.connector_account_id == connector_account_id,
            )
        )
        return found

    def insert_once(
        self,
        *,
        event_id: str,
        provider: str,
        event_type: str,
        provider_created: int,
        object_type: str,
        object_id: str,
        provider_payment_id: str | None,
        payment_id: str | None,
        payload: dict[str, Any],
        woke_payment: bool,
        now: datetime,
    ) -> bool:
        """Store the event unless its id is already stored; False: a replay (nothing
        written).  A concurrent twin that commits first makes our insert fail on the
        primary key: the caller's unit of work rolls back and answers as a replay."""
        if self.get(event_id) is not None:
            return False
        self._db.execute(
            provider_events.insert().values(
                id=event_id,
                provider=provider,
                type=event_type[:100],
                provider_created=provider_created,
                object_type=object_type[:50],
                object_id=object_id[:255],
                provider_payment_id=provider_payment_id,
                payment_id=payment_id,
                payload=payload,
                received_at=now,
                woke_payment=woke_payment,
            )
        )
        return True

    def make_deferred_payment_due(self, payment_id: str, *, now: datetime) -> bool:
        """A payment waiting for its ``next_attempt_at`` with nobody holding it becomes due
        now, so the sweeper's next pass dispatches it (which reads the provider's truth).
        One a worker holds keeps the wake-up in ``woken_at`` (it may be about to write a
        wait after reading the provider just before this event's change): that wait then
        ends at once instead of at its re-check (``LeaseRepository.wait``; each claim
        clears it).  Never touches a finished payment; no token changes, so nothing is
        fenced and nothing is decided here.  True when it made a waiting payment due.

        One statement on purpose, as for the operations: held and waiting were two
        statements, and a worker's wait committing between them lost the wake-up (the
        "waiting" one had read the row still held; the "held" one, blocked on the wait's
        row lock, re-checked the row as the wait left it: released, so no longer held).
        The payment then sat out its re-check (a technical cancel's notification, stored
        that instant, waited five minutes).  In one statement PostgreSQL evaluates the
        CASEs on the row as the wait left it.

        The payment's row is locked first (``FOR NO KEY UPDATE``, as ``MoneyRepository.
        lock_payment``), before any of its operations: every worker's finish takes the
        payment, then its operation row, and the event's transaction took them the other
        way round (its operations here, the payment after, to queue an authorisation check
        or a refund sync).  A cancel finishing as the provider's ``payment_intent.canceled``
        arrived deadlocked with it, and PostgreSQL broke the cycle by failing one side."""
        c = payments.c
        self._db.one(sa.select(c.id).where(c.id == payment_id).with_for_update(key_share=True))
        self._wake_waiting_operations(payment_id, now=now)
        held = c.lease_owner.is_not(None)
        waiting = sa.and_(
            c.lease_owner.is_(None), c.next_attempt_at.is_not(None), c.next_attempt_at > now
        )
        row = self._db.one(
            payments.update()
            .where(
                c.id == payment_id,
                c.status == PaymentStatus.PROCESSING.value,
                sa.or_(held, waiting),
            )
            .values(
                woken_at=sa.case((held, now), else_=c.woken_at),
                next_attempt_at=sa.case((waiting, now), else_=c.next_attempt_at),
                locked_until=sa.case((waiting, now), else_=c.locked_until),
                updated_at=sa.case((waiting, now), else_=c.updated_at),
            )
            .returning(c.lease_owner)
        )
        return row is not None and row["lease_owner"] is None

    def _wake_waiting_operations(self, payment_id: str, *, now: datetime) -> None:
        """The payment's operations (a capture, cancel or refund) waiting for the provider
        with nobody holding them become due now: a provider that settles them
        asynchronously (Adyen's notifications) answers them by this event.  One a worker
        holds keeps the wake-up in ``woken_at`` (it may be about to write a wait after its
        call, before this event's change): that wait then ends at once.

        One statement on purpose: if a worker's wait commits while this waits for the row's
        lock, PostgreSQL evaluates the CASEs on the row as that wait left it (released, due
        at the re-check), so the wake-up is never lost between "held" and "waiting"."""
        o = operations.c
        waiting = sa.and_(
            o.lease_owner.is_(None), o.next_attempt_at.is_not(None), o.next_attempt_at > now
        )
        self._db.execute(
            operations.update()
            .where(o.payment_id == payment_id, o.status == OperationStatus.PROCESSING.value)
            .values(
                woken_at=sa.case((o.lease_owner.is_not(None), now), else_=o.woken_at),
                next_attempt_at=sa.case((waiting, now), else_=o.next_attempt_at),
                locked_until=sa.case((waiting, now), else_=o.locked_until),
                updated_at=sa.case((waiting, now), else_=o.updated_at),
            )
        )

    def purge_received_before(self, *, cutoff: datetime, limit: int) -> int:
        """Delete up to ``limit`` events received before ``cutoff`` (the sweeper's retention,
        ``PROVIDER_EVENT_RETENTION_DAYS``).  Nothing depends on an old one: an event only
        woke its payment, which read the provider's truth; and a late retry of a deleted
        id is stored and handled again, which wakes the payment again and changes nothing."""
        batch = sa.select(e.id).where(e.received_at < cutoff).order_by(e.received_at).limit(limit)
        return self._db.execute(provider_events.delete().where(e.id.in_(batch.scalar_subquery())))
