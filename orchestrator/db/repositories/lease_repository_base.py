"""The lease repository's base: every lease write on a leased table, run under the fence.

The payment row holds the charge's lease (``leases.LeaseRepository``), an operation row its
own (``operations.OperationRepository``); both tables have the same lease columns
(``status``, ``recovery_point``, ``lease_token``, ``lease_owner``, ``locked_until``,
``next_attempt_at``, ``attempts``, ``unknown_outcomes``, ``last_error``, ``updated_at``,
described by ``domain.lease_state.Leased``) and this class runs every compare-and-set on
them: the claim, the renewal, a deferral, a park, a wait, the takeovers.  The statements
themselves, and the SQL they send, are in ``lease_statements``; a subclass says what its
table adds (its record type, its lease event ids, its guards, what its claim also sets).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from orchestrator.db.repositories import lease_statements as statements
from orchestrator.db.repositories.carried_calls import CarriedCalls
from orchestrator.db.session import Session
from orchestrator.domain.lease_state import NEEDS_ATTENTION, PROCESSING, Leased, LeaseState

R = TypeVar("R", bound=Leased)


@dataclass(frozen=True)
class QueuedHold:
    """Which expired dispatch leases the sweeper leaves alone: those of ``owners`` that
    ended after ``after``, or all of them when ``after`` is None (their wake-up may still be
    queued; ``orchestrator.engine.queue_horizon``)."""

    owners: tuple[str, ...]
    after: datetime | None


class LeaseRepositoryBase(ABC, Generic[R]):
    """Every lease write, as one fenced UPDATE on ``table`` (``lease_statements``)."""

    table: sa.Table

    def __init__(self, session: Session, carried: CarriedCalls | None = None) -> None:
        self._db = session
        # The unit of work's provider-call rows for its next prebuilt UPDATE, if it
        # carries any (``carried_calls``).
        self._carried = carried

    # -- what a table says about itself ---------------------------------------------------

    @abstractmethod
    def _to_record(self, row: Any) -> R:
        """The table's row as its record."""

    @abstractmethod
    def _history_ids(self, record: R) -> dict[str, str | None]:
        """``payment_id`` (and ``operation_id``) of the lease history row."""

    @abstractmethod
    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        """``_history_ids`` in SQL, from the columns of the row an UPDATE returned."""

    @abstractmethod
    def _parkable(self) -> sa.ColumnElement[bool]:
        """Where a park may start: processing, not finished."""

    @abstractmethod
    def _retryable(self) -> sa.ColumnElement[bool]:
        """Where an operator's retry may start: needs_attention, not finished."""

    def _claim_values(self, now: sa.ColumnElement[datetime]) -> dict[str, Any]:
        """Columns of this table a claim also sets (in the claim's one statement); ``now``
        is the claim's bound instant."""
        return {}

    # -- the fenced write -----------------------------------------------------------------

    def _update_one(
        self, history: str | None, where: sa.ColumnElement[bool], **values: Any
    ) -> R | None:
        """One fenced UPDATE; ``history`` names the lease event to record (None: none)."""
        row = self._db.one(statements.fenced_update(self.table, where, values))
        if row is None:
            return None
        record = self._to_record(row)
        if history is not None:
            self._record_history(record, history)
        return record

    def _prebuilt(self, name: str, build: Callable[[], sa.Update]) -> sa.Update:
        """The statement ``name`` of this table, built once from ``build``
        (``lease_statements.prebuilt_update``)."""
        return statements.prebuilt_update(self.table, name, build)

    def _update_prebuilt(
        self, history: str | None, statement: sa.Update, params: dict[str, Any]
    ) -> R | None:
        """``_update_one`` for a prebuilt statement and its parameters (compiled once and run
        prepared on PostgreSQL: ``orchestrator.db.postgres_session``)."""
        if history is not None and self._db.dialect == "postgresql":
            with_history = statements.with_history(statement, self._history_id_columns)
            row = self._db.one(with_history, {**params, "p_event": history})
            return None if row is None else self._to_record(row)
        carrier = self._carried
        if carrier is not None and carrier.armed:
            # The held provider-call rows ride in this statement (``carried_calls``).
            count, calls = carrier.take()
            composed = statements.with_calls(statement, count)
            row = self._db.one(composed, {**params, **calls})
            carrier.written = True
        else:
            row = self._db.one(statement, params)
        if row is None:
            return None
        record = self._to_record(row)
        if history is not None:
            self._record_history(record, history)
        return record

    def _record_history(self, record: R, event: str) -> None:
        """The lease history row, in the same transaction as the change it describes: it
        commits or rolls back with it, so the history never shows a change that did not
        happen (a fenced-out finish leaves no ``finish`` row)."""
        ids = self._history_ids(record)
        self._db.execute(
            statements.HISTORY_INSERT,
            {
                "payment_id": ids.get("payment_id"),
                "operation_id": ids.get("operation_id"),
                "event": event,
                "owner": record.lease_owner,
                "lease_token": record.lease_token,
                "locked_until": record.locked_until,
                "status": str(record.status),
                "recovery_point": str(record.recovery_point),
                "created_at": record.updated_at,
            },
        )

    def _held(self, record_id: str, token: int) -> sa.ColumnElement[bool]:
        """Ours, and still being worked on (``lease_statements.held``)."""
        return statements.held(self.table, record_id, token)

    # -- the worker -----------------------------------------------------------------------

    def claim(
        self,
        record_id: str,
        *,
        carried_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> R | None:
        """Take the lease if it is ours to take: the token the task carries, or an expired
        lease.  Bumps the fencing token and counts the attempt.  None: someone else holds
        it, it is deferred to later, or it is finished."""
        table, also_sets = self.table, self._claim_values
        return self._update_prebuilt(
            "claim",
            self._prebuilt("claim", lambda: statements.claim(table, also_sets)),
            {
                "p_id": record_id,
                "p_carried": carried_token,
                "p_owner": owner,
                "p_until": lease_until,
                "p_now": now,
            },
        )

    def renew(
        self, record_id: str, *, token: int, now: datetime, lease_until: datetime
    ) -> R | None:
        """Extend our lease before a provider call.  A renewal is a heartbeat, not a change:
        it leaves ``updated_at`` alone, so a representation (and its ETag) stays the same
        while a worker merely holds on.  ``locked_until`` records the heartbeat."""
        row = self._db.one(statements.renewal(self.table, record_id, token, lease_until))
        return None if row is None else self._to_record(row)

    def defer(
        self, record_id: str, *, token: int, until: datetime, error: str | None, now: datetime
    ) -> R | None:
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
        return self._update_one("defer", self._held(record_id, token), **values)

    def park(self, record_id: str, *, token: int, error: str, now: datetime) -> R | None:
        """needs_attention: an operator decides.  Keeps the recovery point for the retry."""
        c = self.table.c
        return self._update_one(
            "park",
            sa.and_(c.id == record_id, c.lease_token == token, self._parkable()),
            status=NEEDS_ATTENTION,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            last_error=error[:2000],
            updated_at=now,
        )

    def ended_under(self, record_id: str, *, token: int) -> R | None:
        """The record, if a write under ``token`` ended it: no later holder can have
        finished it, since every claim and takeover bumps the token."""
        c = self.table.c
        row = self._db.one(
            sa.select(self.table).where(
                c.id == record_id,
                c.lease_token == token,
                c.status.not_in((PROCESSING, NEEDS_ATTENTION)),
            )
        )
        return None if row is None else self._to_record(row)

    # -- takeover (sweeper and operator) ----------------------------------------------------

    def lock_due(
        self,
        *,
        now: datetime,
        limit: int,
        hold: QueuedHold | None = None,
    ) -> list[R]:
        """Unfinished records whose lease expired or whose deferral is due, oldest first,
        row-locked with ``FOR UPDATE SKIP LOCKED`` so two sweepers never take the same row.
        (SQLite has no row locks and SQLAlchemy drops the clause there; the fenced
        conditional UPDATE in ``take_over`` is what keeps it safe.)

        ``hold``: records waiting under a dispatch lease (``hold.owners``) that ended after
        ``hold.after`` (any, if None) are not due: their wake-up may still be queued."""
        c = self.table.c
        where = sa.and_(c.status == PROCESSING, c.locked_until <= now)
        if hold is not None:
            # ``lease_owner IN (…)`` alone is NULL for a record nobody holds, and ``NOT`` of it
            # too: every deferred retry and released circuit wait would be left out of each
            # pass while the queue held any wake-up, pacing the drain after an outage at one
            # sweep interval per batch.  Only a record under a dispatch owner is held.
            held: sa.ColumnElement[bool] = sa.and_(
                c.lease_owner.is_not(None), c.lease_owner.in_(hold.owners)
            )
            if hold.after is not None:
                held = sa.and_(held, c.locked_until > hold.after)
            where = sa.and_(where, sa.not_(held))
        query = (
            sa.select(self.table)
            .where(where)
            .order_by(c.locked_until)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [self._to_record(r) for r in self._db.all(query)]

    def waiting_lease_ends(self, owners: Sequence[str]) -> sa.Select[Any]:
        """The dispatch-lease ends of the records waiting for a worker (``lease_owner`` in
        ``owners``), as a select to combine with the other leased table's
        (``nth_newest_waiting``)."""
        c = self.table.c
        return sa.select(c.locked_until.label("locked_until")).where(
            c.status == PROCESSING, c.lease_owner.in_(owners)
        )

    def nth_newest_waiting(
        self, n: int, owners: Sequence[str], *, also: Sequence[LeaseRepositoryBase[Any]] = ()
    ) -> datetime | None:
        """The dispatch-lease end of the ``n``-th newest record waiting for a worker, over
        this table and ``also``'s; None when fewer than ``n`` wait."""
        parts = [self.waiting_lease_ends(owners), *(r.waiting_lease_ends(owners) for r in also)]
        waiting = sa.union_all(*parts).subquery()
        row = self._db.one(
            sa.select(waiting.c.locked_until)
            .order_by(waiting.c.locked_until.desc())
            .offset(n - 1)
            .limit(1)
        )
        return None if row is None else row["locked_until"]

    def lock_for_takeover(self, record_id: str) -> R | None:
        """The record, row-locked (waits for a concurrent takeover to commit)."""
        row = self._db.one(
            sa.select(self.table).where(self.table.c.id == record_id).with_for_update()
        )
        return None if row is None else self._to_record(row)

    def take_over(
        self,
        record_id: str,
        *,
        expected_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        require_expired: bool,
    ) -> R | None:
        """Fence out the current holder: bump the token, hold a short dispatch lease for the
        message we are about to publish.  Conditional on the token we saw, so two takers
        racing on the same row cannot both win."""
        c = self.table.c
        where = self._held(record_id, expected_token)
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

    def grant_grace(
        self,
        record_id: str,
        *,
        expected_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> R | None:
        """One more dispatch lease for an expired one, under ``owner`` (the grace's mark),
        with the same token: a wake-up a worker already took still claims it, and nothing
        is published.  Conditional on the token seen and the lease still expired.

        No lease event: the token, status and recovery point do not change, and the lease
        history's readers (the ops API, the console) know a closed set of events.  The grace
        shows as the owner ``dispatch:grace`` and in the sweeper's ``sweep_pass`` log."""
        c = self.table.c
        return self._update_one(
            None,
            sa.and_(self._held(record_id, expected_token), c.locked_until <= now),
            lease_owner=owner,
            locked_until=lease_until,
            updated_at=now,
        )

    def park_expired(
        self, record_id: str, *, expected_token: int, error: str, now: datetime
    ) -> R | None:
        """Out of attempts: needs_attention instead of another takeover (token bumped so a
        late writer is fenced out of the parked record too)."""
        c = self.table.c
        return self._update_one(
            "park",
            sa.and_(c.id == record_id, c.lease_token == expected_token, self._parkable()),
            status=NEEDS_ATTENTION,
            lease_token=c.lease_token + 1,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            last_error=error[:2000],
            updated_at=now,
        )

    def retry_parked(
        self,
        record_id: str,
        *,
        expected_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> R | None:
        """needs_attention -> processing with fresh attempt counters and a dispatch lease."""
        c = self.table.c
        return self._update_one(
            "retry",
            sa.and_(c.id == record_id, c.lease_token == expected_token, self._retryable()),
            status=PROCESSING,
            lease_token=c.lease_token + 1,
            lease_owner=owner,
            locked_until=lease_until,
            next_attempt_at=None,
            attempts=0,
            unknown_outcomes=0,
            updated_at=now,
        )

    def list_by_state(self, state: LeaseState, *, now: datetime, limit: int) -> list[R]:
        # Keep in step with lease_state_of (domain.lease_state): every unfinished record is in
        # exactly one of expired / active / deferred / needs_attention.
        c = self.table.c
        processing = c.status == PROCESSING
        parked = c.status == NEEDS_ATTENTION
        expired = sa.or_(c.locked_until.is_(None), c.locked_until <= now)
        deferred = sa.and_(c.next_attempt_at.is_not(None), c.next_attempt_at > now)
        query = sa.select(self.table)
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
        return [self._to_record(r) for r in self._db.all(query.limit(limit))]
