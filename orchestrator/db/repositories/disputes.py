"""Disputes (``payment_disputes``): one row per provider dispute, newest status wins."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import payment_disputes

d = payment_disputes.c


@dataclass(frozen=True)
class DisputeRecord:
    id: str
    payment_id: str
    provider_payment_id: str | None
    amount: int
    currency: str
    reason: str | None
    status: str
    last_event_created: int
    created_at: datetime
    updated_at: datetime


def _to_dispute(m: Row) -> DisputeRecord:
    return DisputeRecord(
        id=m["id"],
        payment_id=m["payment_id"],
        provider_payment_id=m["provider_payment_id"],
        amount=m["amount"],
        currency=m["currency"],
        reason=m["reason"],
        status=m["status"],
        last_event_created=m["last_event_created"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


class DisputeRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def get(self, dispute_id: str) -> DisputeRecord | None:
        row = self._db.one(sa.select(payment_disputes).where(d.id == dispute_id))
        return None if row is None else _to_dispute(row)

    def for_payment(self, payment_id: str) -> list[DisputeRecord]:
        query = sa.select(payment_disputes).where(d.payment_id == payment_id).order_by(d.created_at)
        return [_to_dispute(r) for r in self._db.all(query)]

    def record(
        self,
        *,
        dispute_id: str,
        payment_id: str,
        provider_payment_id: str | None,
        amount: int,
        currency: str,
        reason: str | None,
        status: str,
        event_created: int,
        now: datetime,
    ) -> tuple[DisputeRecord, bool]:
        """Insert the dispute, or move its status on when this event is not older than the
        last one applied.  True: the dispute is new.  Runs in the event's transaction (the
        event id is already stored once), so a replayed event never gets here."""
        existing = self.get(dispute_id)
        if existing is None:
            self._db.execute(
                payment_disputes.insert().values(
                    id=dispute_id,
                    payment_id=payment_id,
                    provider_payment_id=provider_payment_id,
                    amount=amount,
                    currency=currency.lower()[:3],
                    reason=(reason or None) and reason[:100],
                    status=status[:50],
                    last_event_created=event_created,
                    created_at=now,
                    updated_at=now,
                )
            )
            created = self.get(dispute_id)
            assert created is not None
            return created, True
        if event_created >= existing.last_event_created and status != existing.status:
            self._db.execute(
                payment_disputes.update()
                .where(d.id == dispute_id, d.last_event_created <= event_created)
                .values(
                    status=status[:50],
                    amount=amount,
                    last_event_created=event_created,
                    updated_at=now,
                )
            )
        current = self.get(dispute_id)
        assert current is not None
        return current, False
