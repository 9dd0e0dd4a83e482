"""Events as merchants read them (``GET /v1/events``): outbox rows scoped to the client
that owns the payment, oldest first, with keyset pagination on the row id."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import outbox_events, payments
from orchestrator.domain.webhooks import Event

o = outbox_events.c


def _columns() -> list[Any]:
    return [
        o.id,
        o.public_id,
        o.payment_id,
        payments.c.client_id,
        o.event_type,
        o.sequence,
        o.payload,
        o.created_at,
    ]


def _from() -> Any:
    return outbox_events.join(payments, payments.c.id == o.payment_id)


def to_event(m: Row) -> Event:
    return Event(
        id=m["id"],
        public_id=m["public_id"],
        payment_id=m["payment_id"],
        client_id=m["client_id"],
        event_type=m["event_type"],
        sequence=m["sequence"],
        payload=dict(m["payload"]),
        created_at=m["created_at"],
    )


class EventRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def get(self, public_id: str, *, client_id: str | None = None) -> Event | None:
        query = sa.select(*_columns()).select_from(_from()).where(o.public_id == public_id)
        if client_id is not None:
            query = query.where(payments.c.client_id == client_id)
        row = self._db.one(query)
        return None if row is None else to_event(row)

    def list_for_client(
        self, client_id: str, *, after_id: int | None, event_type: str | None, limit: int
    ) -> list[Event]:
        """Up to ``limit`` events after the row ``after_id``, oldest first."""
        query = (
            sa.select(*_columns())
            .select_from(_from())
            .where(payments.c.client_id == client_id)
            .order_by(o.id)
            .limit(limit)
        )
        if after_id is not None:
            query = query.where(o.id > after_id)
        if event_type is not None:
            query = query.where(o.event_type == event_type)
        return [to_event(r) for r in self._db.all(query)]

    def for_payment(self, payment_id: str) -> list[Event]:
        query = (
            sa.select(*_columns())
            .select_from(_from())
            .where(o.payment_id == payment_id)
            .order_by(o.id)
        )
        return [to_event(r) for r in self._db.all(query)]
