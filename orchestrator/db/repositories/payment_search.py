"""Operator reads over all payments: filtered, keyset-paginated listing, the parked
payments a bulk retry walks, and the status counts of the overview.  Read-only named
queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.session import Session
from orchestrator.db.tables import payments
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus, WaitingFor

c = payments.c


@dataclass(frozen=True)
class LeaseCounts:
    """Unfinished payments by what their lease says, judged by the database clock."""

    active: int  # a worker (or a fresh dispatch) holds a live lease
    expired: int  # the holder's lease ran out: the sweeper's (or an operator's) work
    deferred: int  # a long backoff parked in the row, not yet due
    due_retries: int  # a deferral that is due: the sweeper re-queues it


@dataclass(frozen=True)
class StatusCounts:
    by_status: dict[str, int]
    oldest_processing_created_at: datetime | None
    leases: LeaseCounts


class PaymentSearchRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def search(
        self,
        filters: PaymentFilters,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        after: tuple[datetime, str] | None = None,
    ) -> list[PaymentRecord]:
        """Newest first; ``before`` is the (created_at, id) of the last row of the previous
        page (keyset pagination: stable while payments keep arriving, no OFFSET scan).
        ``after`` pages the other way: the rows just newer than that position, nearest
        first (oldest first), so that ``limit`` keeps the ones next to it; the caller puts
        them back newest first.  Filtered by a client, the index on (client_id, created_at,
        id) serves both directions."""
        query = sa.select(payments)
        if filters.status is PaymentStatus.REQUIRES_ACTION:
            # Shown, not stored: a processing payment waiting for its customer.
            query = query.where(
                c.status == PaymentStatus.PROCESSING.value,
                c.waiting_for == WaitingFor.CUSTOMER.value,
            )
        elif filters.status is PaymentStatus.PROCESSING:
            query = query.where(
                c.status == PaymentStatus.PROCESSING.value,
                sa.or_(c.waiting_for.is_(None), c.waiting_for != WaitingFor.CUSTOMER.value),
            )
        elif filters.status is not None:
            query = query.where(c.status == filters.status.value)
        if filters.client_id is not None:
            query = query.where(c.client_id == filters.client_id)
        if filters.customer_reference is not None:
            query = query.where(c.customer_reference == filters.customer_reference)
        if filters.idempotency_key is not None:
            query = query.where(c.idempotency_key == filters.idempotency_key)
        if filters.text is not None:
            query = query.where(
                sa.or_(c.idempotency_key == filters.text, c.customer_reference == filters.text)
            )
        if filters.created_after is not None:
            query = query.where(c.created_at >= filters.created_after)
        if filters.created_before is not None:
            query = query.where(c.created_at < filters.created_before)
        # A row-value comparison, not "a < x OR (a = x AND b < y)": PostgreSQL starts the
        # index scan at the position itself instead of reading every newer row and
        # filtering them out, so page 1,000 costs what page 1 costs.
        if before is not None:
            query = query.where(_position() < _at(before))
        if after is not None:
            query = query.where(_position() > _at(after))
            query = query.order_by(c.created_at.asc(), c.id.asc()).limit(limit)
        else:
            query = query.order_by(c.created_at.desc(), c.id.desc()).limit(limit)
        return [to_payment(r) for r in self._db.all(query)]

    def parked(
        self,
        *,
        since: datetime | None,
        connector: str | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[PaymentRecord]:
        """``needs_attention`` payments, oldest first, for a bulk retry (``ops.bulk_retry``).

        ``since``: parked at or after it.  A parked row's ``updated_at`` is when it was
        parked: every lease write is guarded by ``processing`` (or, for the retry, leaves
        ``needs_attention``), so the park is the last write a parked row has had.
        ``connector``: a connector account's id, ``PLATFORM_CIRCUIT_KEY`` for the
        platform's own account (the payments with none).  ``after``: the (created_at, id)
        of the last payment of the previous page.  The keyset only moves forward, so a run
        never comes back to a payment it has passed, even one that parked again after its
        retry (it would otherwise be retried twice by one run)."""
        query = sa.select(payments).where(c.status == PaymentStatus.NEEDS_ATTENTION.value)
        if since is not None:
            query = query.where(c.updated_at >= since)
        if connector == PLATFORM_CIRCUIT_KEY:
            query = query.where(c.connector_account_id.is_(None))
        elif connector is not None:
            query = query.where(c.connector_account_id == connector)
        if after is not None:
            created_at, payment_id = after
            query = query.where(
                sa.or_(
                    c.created_at > created_at,
                    sa.and_(c.created_at == created_at, c.id > payment_id),
                )
            )
        query = query.order_by(c.created_at, c.id).limit(limit)
        return [to_payment(r) for r in self._db.all(query)]

    def waiting_for_customer_since_before(self, cutoff: datetime) -> int:
        """Payments in requires_action (waiting for their customer) since before ``cutoff``."""
        count = self._db.scalar(
            sa.select(sa.func.count()).where(
                c.status == PaymentStatus.PROCESSING.value,
                c.waiting_for == WaitingFor.CUSTOMER.value,
                c.waiting_since < cutoff,
            )
        )
        return int(count)

    def finished_since(self, since: datetime) -> int:
        """Payments that reached a final status (``completed_at`` set) at or after
        ``since``.  Bounded by time through the partial index ``ix_payments_completed``
        (migration 0028): never a scan of every payment."""
        return int(
            self._db.scalar(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(c.completed_at.is_not(None), c.completed_at >= since)
            )
        )

    def status_counts(self, *, now: datetime) -> StatusCounts:
        # As clients see them: a processing payment waiting for its customer is
        # requires_action (domain.states.PaymentStatus).
        shown = sa.case(
            (
                sa.and_(
                    c.status == PaymentStatus.PROCESSING.value,
                    c.waiting_for == WaitingFor.CUSTOMER.value,
                ),
                PaymentStatus.REQUIRES_ACTION.value,
            ),
            else_=c.status,
        )
        by_status = {
            row["status"]: int(row["count"])
            for row in self._db.all(
                sa.select(shown.label("status"), sa.func.count().label("count")).group_by(shown)
            )
        }
        processing = c.status == PaymentStatus.PROCESSING.value
        deferral = c.next_attempt_at.is_not(None)
        row = self._db.one(
            sa.select(
                # Oldest *processing*: a payment waiting for its customer is shown as
                # requires_action (counted there), so its age is not this one's.
                sa.func.min(
                    sa.case((c.waiting_for == WaitingFor.CUSTOMER.value, None), else_=c.created_at)
                ).label("oldest"),
                _count(sa.and_(~deferral, c.locked_until > now)).label("active"),
                _count(sa.and_(~deferral, c.locked_until <= now)).label("expired"),
                _count(sa.and_(deferral, c.next_attempt_at > now)).label("deferred"),
                _count(sa.and_(deferral, c.next_attempt_at <= now)).label("due"),
            ).where(processing)
        )
        assert row is not None, "an aggregate returns one row"
        return StatusCounts(
            by_status=by_status,
            oldest_processing_created_at=row["oldest"],
            leases=LeaseCounts(
                active=int(row["active"] or 0),
                expired=int(row["expired"] or 0),
                deferred=int(row["deferred"] or 0),
                due_retries=int(row["due"] or 0),
            ),
        )


def _position() -> sa.Tuple:
    return sa.tuple_(c.created_at, c.id)


def _at(position: tuple[datetime, str]) -> sa.Tuple:
    created_at, payment_id = position
    return sa.tuple_(
        sa.literal(created_at, type_=c.created_at.type), sa.literal(payment_id, type_=c.id.type)
    )


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.sum(sa.case((condition, 1), else_=0))
