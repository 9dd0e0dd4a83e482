"""What an operator reads about payments: one payment with everything that happened to it,
and the filtered, cursor-paginated list of all payments (for the ops API, the CLI and the
console alike).  Both only read: they are given a read-only unit of work
(``Container.read_only_uow``)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace
from datetime import datetime

from orchestrator.db.repositories.disputes import DisputeRecord
from orchestrator.db.repositories.provider_events import StoredProviderEvent
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.attempts import EndedAttempt
from orchestrator.domain.history import LeaseEvent, OutboxEvent, PostedLedgerLine, ProviderCall
from orchestrator.domain.instants import in_utc
from orchestrator.domain.model import AuditEntry, PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.events.event_reads import shown_now
from orchestrator.ops.errors import InvalidCursor
from orchestrator.services.payment_reads import fetch_page

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# Every audit row of one payment: operators act on a payment a handful of times.
_AUDIT_LIMIT = 500


@dataclass(frozen=True)
class PaymentDetail:
    record: PaymentRecord
    now: datetime  # the database clock the lease was judged by
    audit: list[AuditEntry]  # oldest first
    provider_calls: list[ProviderCall]
    lease_events: list[LeaseEvent]
    events: list[OutboxEvent]
    ledger: list[PostedLedgerLine]
    # The provider's webhooks about the payment, oldest first (hints, never the truth).
    provider_events: list[StoredProviderEvent] = field(default_factory=list)
    # Disputes the provider reported (charge.dispute.* events), oldest first.
    disputes: list[DisputeRecord] = field(default_factory=list)
    # The payment's operations after the charge (refunds), oldest first.
    operations: list[OperationRecord] = field(default_factory=list)
    # The attempts that ended in a failover, with their proofs, oldest first (decision 0086).
    attempts: list[EndedAttempt] = field(default_factory=list)


@dataclass(frozen=True)
class PaymentPage:
    records: list[PaymentRecord]
    next_cursor: str | None  # None: this was the last page
    now: datetime


def get_payment_detail(read_only_uow: UnitOfWorkFactory, payment_id: str) -> PaymentDetail | None:
    # One read-only transaction: the record and its history are one consistent snapshot
    # on PostgreSQL (REPEATABLE READ is not needed: every history row is append-only and
    # written in the same transaction as the record change it describes).
    with read_only_uow() as uow:
        now = uow.now()
        record = uow.payments.get(payment_id)
        if record is None:
            return None
        return PaymentDetail(
            record=record,
            now=now,
            audit=list(reversed(uow.audit.list(payment_id=payment_id, limit=_AUDIT_LIMIT))),
            provider_calls=uow.history.provider_calls(payment_id),
            provider_events=uow.provider_events.for_payment(payment_id),
            disputes=uow.disputes.for_payment(payment_id),
            operations=uow.operations.list_for_payment(payment_id),
            lease_events=uow.history.lease_events(payment_id),
            events=[
                replace(
                    event,
                    deliveries=tuple(
                        (view.endpoint_url, view.delivery.status.value, view.delivery.attempts)
                        for view in uow.deliveries.for_event(event.id, with_attempts=False)
                    ),
                )
                for event in shown_now(uow.payments, uow.history.outbox_events(payment_id))
            ],
            ledger=uow.history.ledger_lines(payment_id),
            attempts=uow.attempts.for_payment(payment_id) if record.failovers else [],
        )


def list_payments(
    read_only_uow: UnitOfWorkFactory,
    filters: PaymentFilters,
    *,
    limit: int = DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
) -> PaymentPage:
    before = decode_cursor(cursor) if cursor else None
    with read_only_uow() as uow:
        now = uow.now()
        page = fetch_page(uow.search, filters, limit=limit, before=before)
    records = page.records
    next_cursor = None
    if page.has_more:
        last = records[-1]
        next_cursor = encode_cursor(last.created_at, last.id)
    return PaymentPage(records=records, next_cursor=next_cursor, now=now)


def encode_cursor(created_at: datetime, payment_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), payment_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position after which the next page starts.  Opaque to clients; anything that
    does not decode is refused rather than silently restarting from the first page."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, payment_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        position = datetime.fromisoformat(created_at)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor("The cursor is not one this API returned.") from None
    # A position with no UTC equivalent (domain.instants) was never one we wrote.
    if position.tzinfo is None or in_utc(position) is None or not isinstance(payment_id, str):
        raise InvalidCursor("The cursor is not one this API returned.")
    return position, payment_id
