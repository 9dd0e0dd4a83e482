"""Leases in SQL: every write of the worker protocol is a compare-and-set on the lease token.

The lease token is a fencing token: it only grows, every claim or takeover bumps it, and
every later write says ``WHERE lease_token = :mine``.  A holder that was taken over (a
paused VM, a GC stall, a partitioned worker) finds zero rows and must stop; it can never
overwrite the new holder's work, whatever its clock says.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.tables import lease_events, payments
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.representation import encode_representation
from orchestrator.domain.states import (
    Event,
    Outcome,
    PaymentStatus,
    RecoveryPoint,
    WaitingFor,
    allowed_sources,
)

c = payments.c


class LeaseState(StrEnum):
    """Views of unfinished payments by lease.

    ``active``: a holder's lease is live; ``deferred``: no holder, waiting for its
    ``next_attempt_at`` (a backoff stored for the sweeper: nobody is working on it, so it is
    not "active"); ``expired``: the lease ran out (or a deferred retry is due), the
    sweeper's next work; ``needs_attention``: parked for an operator; ``unfinished``: all
    of them.
    """

    EXPIRED = "expired"
    ACTIVE = "active"
    DEFERRED = "deferred"
    NEEDS_ATTENTION = "needs_attention"
    UNFINISHED = "unfinished"


def lease_state_of(record: PaymentRecord, now: datetime) -> LeaseState | None:
    """The one state ``record`` is listed under (None once finished)."""
    if record.status is PaymentStatus.NEEDS_ATTENTION:
        return LeaseState.NEEDS_ATTENTION
    if record.status is not PaymentStatus.PROCESSING:
        return None
    if record.locked_until is None or record.locked_until <= now:
        return LeaseState.EXPIRED
    if record.next_attempt_at is not None and record.next_attempt_at > now:
        return LeaseState.DEFERRED
    return LeaseState.ACTIVE


def _guard(event: Event) -> sa.ColumnElement[bool]:
    """The state machine's source states for ``event``, as SQL."""
    status, points = allowed_sources(event)
    return sa.and_(c.status == status.value, c.recovery_point.in_([p.value for p in points]))


class LeaseRepository:
    def __init__(self, connection: sa.Connection) -> None:
        self._conn = connection

    def _update_one(
        self, history: str | None, where: sa.ColumnElement[bool], **values: Any
    ) -> PaymentRecord | None:
        """One fenced UPDATE; ``history`` names the lease event to record (None: none)."""
        row = self._conn.execute(
            payments.update().where(where).values(**values).returning(*payments.c)
        ).first()
        if row is None:
            return None
        record = to_payment(row)
        if history is not None:
            self._record_history(record, history)
        return record

    def _record_history(self, record: PaymentRecord, event: str) -> None:
        """The lease history row, in the same transaction as the change it describes: it
        commits or rolls back with it, so the history never shows a change that did not
        happen (a fenced-out finish leaves no ``finish`` row)."""
        self._conn.execute(
            lease_events.insert().values(
                payment_id=record.id,
                event=event,
                owner=record.lease_owner,
                lease_token=record.lease_token,
                locked_until=record.locked_until,
                status=record.status.value,
                recovery_point=record.recovery_point.value,
                created_at=record.updated_at,
            )
        )

    # -- the worker -----------------------------------------------------------------------

    def claim(
        self,
        payment_id: str,
        *,
        carried_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> PaymentRecord | None:
        """Take the lease if it is ours to take: the token the task carries, or an expired
        lease.  Bumps the fencing token and counts the attempt.  None: someone else holds
        it, it is deferred to later, or it is finished."""
        return self._update_one(
            "claim",
            sa.and_(
                c.id == payment_id,
                c.status == PaymentStatus.PROCESSING.value,
                sa.or_(c.lease_token == carried_token, c.locked_until <= now),
                sa.or_(c.next_attempt_at.is_(None), c.next_attempt_at <= now),
            ),
            lease_token=c.lease_token + 1,
            lease_owner=owner,
            locked_until=lease_until,
            next_attempt_at=None,
            attempts=c.attempts + 1,
            # A wake-up that arrives from now on, while we hold the lease, is kept here so
            # that our own wait (``wait``) ends at once instead of at the re-check.
            woken_at=None,
            updated_at=now,
        )

    def renew(
        self,
        payment_id: str,
        *,
        token: int,
        now: datetime,
        lease_until: datetime,
        next_confirm: bool = False,
    ) -> PaymentRecord | None:
        """Extend our lease before a provider call.  With ``next_confirm`` it also takes the
        next confirm number, so the key ``…-confirm-{n}`` is durable before it is sent.

        A renewal is a heartbeat, not a change of the payment: it leaves ``updated_at``
        alone, so the representation (and its ETag) stays the same while a worker merely
        holds on.  ``locked_until`` records the heartbeat."""
        values: dict[str, Any] = {"locked_until": lease_until}
        if next_confirm:
            values["confirm_attempts"] = c.confirm_attempts + 1
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            **values,
        )

    def renew_for_create(
        self, payment_id: str, *, token: int, now: datetime, lease_until: datetime
    ) -> PaymentRecord | None:
        """Renew before a create and stamp the attempt (database clock): the first and the
        latest create bound the window in which the provider can have created our intent."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            locked_until=lease_until,
            first_create_at=sa.func.coalesce(c.first_create_at, now),
            last_create_at=now,
            updated_at=now,
        )

    def save_lookup_progress(
        self,
        payment_id: str,
        *,
        token: int,
        now: datetime,
        lease_until: datetime,
        cursor: str | None,
        pages: int,
        rejected: list[dict[str, Any]],
    ) -> PaymentRecord | None:
        """Renew while paging and store where the scan resumes (and what it rejected), so an
        interrupted lookup (kill, time limit, takeover) continues instead of starting over."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            locked_until=lease_until,
            lookup_cursor=cursor,
            lookup_pages=pages,
            rejected_intents=rejected or None,
            updated_at=now,
        )

    def record_rejected(
        self, payment_id: str, *, token: int, rejected: list[dict[str, Any]], now: datetime
    ) -> PaymentRecord | None:
        """Keep the intents that named this record but did not match it (never confirmed)."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            rejected_intents=rejected or None,
            updated_at=now,
        )

    def end_lookup(self, payment_id: str, *, token: int, now: datetime) -> PaymentRecord | None:
        """The scan read its whole window: nothing owed until the next unknown create."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            lookup_pending=False,
            lookup_cursor=None,
            lookup_pages=0,
            updated_at=now,
        )

    def mark_intent_created(
        self, payment_id: str, *, token: int, provider_payment_id: str, now: datetime
    ) -> PaymentRecord | None:
        return self._update_one(
            None,
            sa.and_(c.id == payment_id, c.lease_token == token, _guard(Event.INTENT_CREATED)),
            provider_payment_id=provider_payment_id,
            recovery_point=RecoveryPoint.INTENT_CREATED.value,
            lookup_pending=False,
            lookup_cursor=None,
            lookup_pages=0,
            updated_at=now,
        )

    def record_unknown_outcome(
        self,
        payment_id: str,
        *,
        token: int,
        error: str,
        now: datetime,
        owe_lookup: bool = False,
    ) -> PaymentRecord | None:
        """Count an unknown outcome.  ``owe_lookup`` (a create): a fresh scan of the window
        is owed before anything else, from the top (the window may have grown)."""
        values: dict[str, Any] = {}
        if owe_lookup:
            values = {"lookup_pending": True, "lookup_cursor": None, "lookup_pages": 0}
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            unknown_outcomes=c.unknown_outcomes + 1,
            last_error=error[:2000],
            updated_at=now,
            **values,
        )

    def record_settlement(
        self,
        payment_id: str,
        *,
        token: int,
        outcome: Outcome,
        provider_payment_id: str | None,
        provider_charge_id: str | None,
        failure: Failure | None,
        now: datetime,
        settled_amount: int | None = None,
        settled_currency: str | None = None,
    ) -> PaymentRecord | None:
        """Store what the provider settled (recovery point ``provider_settled``), so a worker
        that dies before finishing leaves a record that needs no further provider call."""
        return self._update_one(
            None,
            sa.and_(c.id == payment_id, c.lease_token == token, _guard(Event.PROVIDER_SETTLED)),
            recovery_point=RecoveryPoint.PROVIDER_SETTLED.value,
            provider_outcome=outcome.value,
            provider_payment_id=sa.func.coalesce(provider_payment_id, c.provider_payment_id),
            provider_charge_id=provider_charge_id,
            failure_code=failure.code if failure else None,
            decline_code=failure.decline_code if failure else None,
            failure_message=failure.message[:1000] if failure else None,
            settled_amount=settled_amount,
            settled_currency=settled_currency,
            # The wait, if any, is over.
            waiting_for=None,
            waiting_since=None,
            next_action=None,
            client_secret=None,
            updated_at=now,
        )

    def finish(
        self,
        payment_id: str,
        *,
        token: int,
        status: PaymentStatus,
        response_body: dict[str, Any],
        now: datetime,
    ) -> PaymentRecord | None:
        """COMPLETED, fenced.  None: we were fenced out and the caller must roll back.

        The final answer is stored twice: as the document (JSONB, for SQL) and as the exact
        text every replay and GET serves (``final_response``), since JSONB reorders keys."""
        return self._update_one(
            "finish",
            sa.and_(c.id == payment_id, c.lease_token == token, _guard(Event.FINISHED)),
            status=status.value,
            recovery_point=RecoveryPoint.COMPLETED.value,
            response_body=response_body,
            final_response=encode_representation(response_body).decode("utf-8"),
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            waiting_for=None,
            waiting_since=None,
            next_action=None,
            client_secret=None,
            completed_at=now,
            updated_at=now,
        )

    def defer(
        self, payment_id: str, *, token: int, until: datetime, error: str | None, now: datetime
    ) -> PaymentRecord | None:
        """Release the lease until ``until``: a long backoff lives in the row, not in the
        broker, and the sweeper re-queues the record when it is due."""
        values: dict[str, Any] = {
            "lease_owner": None,
            "locked_until": until,
            "next_attempt_at": until,
            "updated_at": now,
        }
        if error is not None:
            values["last_error"] = error[:2000]
        return self._update_one(
            "defer",
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            **values,
        )

    def record_action_required(
        self,
        payment_id: str,
        *,
        token: int,
        next_action: dict[str, Any] | None,
        client_secret: str | None,
        now: datetime,
    ) -> PaymentRecord | None:
        """The provider asks the customer to authenticate: the payment shows
        ``requires_action`` with what the customer must do.  ``waiting_since`` is kept if
        the wait had already begun (the timeout counts from the first ask)."""
        return self._update_one(
            None,
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            waiting_for=WaitingFor.CUSTOMER.value,
            waiting_since=sa.func.coalesce(
                sa.case((c.waiting_for == WaitingFor.CUSTOMER.value, c.waiting_since), else_=None),
                now,
            ),
            next_action=next_action,
            client_secret=client_secret,
            updated_at=now,
        )

    def wait(
        self,
        payment_id: str,
        *,
        token: int,
        until: datetime,
        waiting_for: WaitingFor,
        now: datetime,
    ) -> PaymentRecord | None:
        """Release the lease as a wait: no holder, re-checked at ``until``.  The claim that
        found out is not a failed attempt (only unknown outcomes count towards
        MAX_ATTEMPTS), so its count is given back.  A wake-up that came while we held the
        lease (``woken_at``) makes the record due at once."""
        due = sa.case((c.woken_at.is_not(None), now), else_=until)
        return self._update_one(
            "wait",
            sa.and_(
                c.id == payment_id,
                c.lease_token == token,
                c.status == PaymentStatus.PROCESSING.value,
            ),
            lease_owner=None,
            locked_until=due,
            next_attempt_at=due,
            attempts=sa.case((c.attempts > 0, c.attempts - 1), else_=0),
            waiting_for=waiting_for.value,
            waiting_since=sa.case(
                (c.waiting_for == waiting_for.value, sa.func.coalesce(c.waiting_since, now)),
                else_=now,
            ),
            woken_at=None,
        )

    def park(
        self, payment_id: str, *, token: int, error: str, now: datetime
    ) -> PaymentRecord | None:
        """needs_attention: an operator decides.  Keeps the recovery point for the retry."""
        return self._update_one(
            "park",
            sa.and_(c.id == payment_id, c.lease_token == token, _guard(Event.PARKED)),
            status=PaymentStatus.NEEDS_ATTENTION.value,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            last_error=error[:2000],
            updated_at=now,
        )

    # -- takeover (sweeper and operator) ----------------------------------------------------

    def lock_due(self, *, now: datetime, limit: int) -> list[PaymentRecord]:
        """Unfinished records whose lease expired or whose deferral is due, oldest first,
        row-locked with ``FOR UPDATE SKIP LOCKED`` so two sweepers never take the same row.
        (SQLite has no row locks and SQLAlchemy drops the clause there; the fenced
        conditional UPDATE in ``take_over`` is what keeps it safe.)"""
        query = (
            sa.select(payments)
            .where(c.status == PaymentStatus.PROCESSING.value, c.locked_until <= now)
            .order_by(c.locked_until)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [to_payment(r) for r in self._conn.execute(query)]

    def lock_for_takeover(self, payment_id: str) -> PaymentRecord | None:
        """The record, row-locked (waits for a concurrent takeover to commit)."""
        row = self._conn.execute(
            sa.select(payments).where(c.id == payment_id).with_for_update()
        ).first()
        return None if row is None else to_payment(row)

    def take_over(
        self,
        payment_id: str,
        *,
        expected_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        require_expired: bool,
    ) -> PaymentRecord | None:
        """Fence out the current holder: bump the token, hold a short dispatch lease for the
        message we are about to publish.  Conditional on the token we saw, so two takers
        racing on the same row cannot both win."""
        where = sa.and_(
            c.id == payment_id,
            c.lease_token == expected_token,
            c.status == PaymentStatus.PROCESSING.value,
        )
        if require_expired:
            where = sa.and_(where, c.locked_until <= now)
        return self._update_one(
            "takeover",
            where,
            lease_token=c.lease_token + 1,
            lease_owner=owner,
            locked_until=lease_until,
            next_attempt_at=None,
            updated_at=now,
        )

    def park_expired(
        self, payment_id: str, *, expected_token: int, error: str, now: datetime
    ) -> PaymentRecord | None:
        """Out of attempts: needs_attention instead of another takeover (token bumped so a
        late writer is fenced out of the parked record too)."""
        return self._update_one(
            "park",
            sa.and_(
                c.id == payment_id,
                c.lease_token == expected_token,
                _guard(Event.PARKED),
            ),
            status=PaymentStatus.NEEDS_ATTENTION.value,
            lease_token=c.lease_token + 1,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            last_error=error[:2000],
            updated_at=now,
        )

    def retry_parked(
        self,
        payment_id: str,
        *,
        expected_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> PaymentRecord | None:
        """needs_attention -> processing with fresh attempt counters and a dispatch lease."""
        return self._update_one(
            "retry",
            sa.and_(
                c.id == payment_id,
                c.lease_token == expected_token,
                _guard(Event.RETRIED),
            ),
            status=PaymentStatus.PROCESSING.value,
            lease_token=c.lease_token + 1,
            lease_owner=owner,
            locked_until=lease_until,
            next_attempt_at=None,
            attempts=0,
            unknown_outcomes=0,
            updated_at=now,
        )

    def list_by_state(self, state: LeaseState, *, now: datetime, limit: int) -> list[PaymentRecord]:
        # Keep in step with lease_state_of: every unfinished record is in exactly one of
        # expired / active / deferred / needs_attention.
        processing = c.status == PaymentStatus.PROCESSING.value
        parked = c.status == PaymentStatus.NEEDS_ATTENTION.value
        expired = sa.or_(c.locked_until.is_(None), c.locked_until <= now)
        deferred = sa.and_(c.next_attempt_at.is_not(None), c.next_attempt_at > now)
        query = sa.select(payments)
        if state is LeaseState.NEEDS_ATTENTION:
            query = query.where(parked).order_by(c.updated_at)
        elif state is LeaseState.UNFINISHED:
            query = query.where(sa.or_(processing, parked)).order_by(c.created_at)
        elif state is LeaseState.EXPIRED:
            query = query.where(processing, expired).order_by(c.locked_until)
        elif state is LeaseState.DEFERRED:
            query = query.where(processing, sa.not_(expired), deferred).order_by(c.locked_until)
        else:
            query = query.where(processing, sa.not_(expired), sa.not_(deferred))
            query = query.order_by(c.locked_until)
        return [to_payment(r) for r in self._conn.execute(query.limit(limit))]
