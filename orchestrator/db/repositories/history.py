"""A payment's history for operators: provider calls (written by the recording provider),
lease events (written by the lease repository), outbox events and ledger lines."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.repositories.carried_calls import call_values
from orchestrator.db.session import Session
from orchestrator.db.tables import (
    lease_events,
    ledger_lines,
    outbox_events,
    payments,
    provider_calls,
)
from orchestrator.domain.history import (
    LeaseEvent,
    OutboxEvent,
    PostedLedgerLine,
    ProviderCall,
    ProviderCallRecord,
)

# A payment's history is bounded in practice (a few claims, a few calls per claim); the cap
# keeps a pathological record (a poison message redelivered for hours) from building a page
# of megabytes.
MAX_HISTORY_ROWS = 500


# Built once with bound parameters: a row for every provider call (see
# ``lease_statements.prebuilt_update``).  A retrieve names only the provider's object: its
# payment is found in the same statement.
_CALL_INSERT = prepare_once(provider_calls.insert())
_CALL_INSERT_BY_OBJECT = prepare_once(
    provider_calls.insert().values(
        payment_id=sa.select(payments.c.id)
        .where(payments.c.provider_payment_id == sa.bindparam("p_object"))
        .limit(1)
        .scalar_subquery()
    )
)


class HistoryRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add_provider_call(self, call: ProviderCallRecord, *, now: datetime) -> None:
        values = call_values(call, now)
        if call.payment_id is None and call.provider_object_id is not None:
            del values["payment_id"]
            self._db.write(_CALL_INSERT_BY_OBJECT, {**values, "p_object": call.provider_object_id})
        else:
            self._db.write(_CALL_INSERT, values)

    def provider_calls(self, payment_id: str) -> list[ProviderCall]:
        rows = self._db.all(
            sa.select(provider_calls)
            .where(provider_calls.c.payment_id == payment_id)
            .order_by(provider_calls.c.id)
            .limit(MAX_HISTORY_ROWS)
        )
        return [ProviderCall(**row) for row in rows]

    def lease_events(self, payment_id: str) -> list[LeaseEvent]:
        rows = self._db.all(
            sa.select(lease_events)
            .where(lease_events.c.payment_id == payment_id)
            .order_by(lease_events.c.id)
            .limit(MAX_HISTORY_ROWS)
        )
        return [LeaseEvent(**row) for row in rows]

    def outbox_events(self, payment_id: str) -> list[OutboxEvent]:
        rows = self._db.all(
            sa.select(outbox_events)
            .where(outbox_events.c.payment_id == payment_id)
            .order_by(outbox_events.c.id)
            .limit(MAX_HISTORY_ROWS)
        )
        return [
            OutboxEvent(
                id=r["id"],
                payment_id=r["payment_id"],
                event_type=r["event_type"],
                payload=dict(r["payload"]),
                created_at=r["created_at"],
                published_at=r["published_at"],
                public_id=r["public_id"],
                sequence=r["sequence"],
            )
            for r in rows
        ]

    def ledger_lines(self, payment_id: str) -> list[PostedLedgerLine]:
        rows = self._db.all(
            sa.select(
                ledger_lines.c.id,
                ledger_lines.c.account,
                ledger_lines.c.amount,
                ledger_lines.c.currency,
                ledger_lines.c.created_at,
            )
            .where(ledger_lines.c.payment_id == payment_id)
            .order_by(ledger_lines.c.id)
        )
        return [PostedLedgerLine(**row) for row in rows]
