"""The lease columns, written once for every table that holds leases.

The payment row holds the charge's lease (``leases.LeaseRepository``), an operation row its
own (``operations.OperationLeaseRepository``); both tables have the same lease columns
(``status``, ``recovery_point``, ``lease_token``, ``lease_owner``, ``locked_until``,
``next_attempt_at``, ``attempts``, ``unknown_outcomes``, ``last_error``, ``updated_at``) and
this class is every compare-and-set on them.

The lease token is a fencing token: it only grows, every claim or takeover bumps it, and
every later write says ``WHERE lease_token = :mine``.  A holder that was taken over (a
paused VM, a GC stall, a partitioned worker) finds zero rows and must stop; it can never
overwrite the new holder's work, whatever its clock says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from orchestrator.db import prebuilt
from orchestrator.db.repositories import carried_calls
from orchestrator.db.repositories.carried_calls import CarriedCalls
from orchestrator.db.tables import lease_events
from orchestrator.domain.lease_state import NEEDS_ATTENTION, PROCESSING, Leased, LeaseState

R = TypeVar("R", bound=Leased)

# The hot statements (a charge's every step), built once per table and name with bound
# parameters (``LeaseColumns._prebuilt``).  Building an ``UPDATE … RETURNING`` per call,
# with its values as literals, cost more CPU than executing it: SQLAlchemy's coercions
# and cache key over every value.  A prebuilt statement's cache key is computed once
# (it is memoized on the object), its compiled form is SQLAlchemy's cached one, and
# psycopg prepares it server-side after a few uses per connection.
_PREBUILT: dict[tuple[str, str], sa.Update] = {}

# The same statements with their lease event row written by the statement itself, on
# PostgreSQL (``LeaseColumns._with_history``): one round trip instead of two.
# Keyed by the UPDATE's identity; each entry keeps its UPDATE alive, so an id is never
# reused while its entry exists.
_PREBUILT_WITH_HISTORY: dict[int, tuple[sa.Update, sa.Select[Any]]] = {}

# The same statements carrying provider-call rows (``LeaseColumns._with_calls``), keyed by
# the UPDATE's identity and the number of rows; each entry keeps its UPDATE alive.
_PREBUILT_WITH_CALLS: dict[tuple[int, int], tuple[sa.Update, sa.Update]] = {}

# Held while one of the caches above is filled.  A worker starts with every thread
# claiming at once: without it, each of 64-128 threads built its own copy of every
# statement (and ``prebuilt`` compiled each copy, keyed by its identity), a visible share
# of a whole run's CPU.  Reads take no lock; a build happens once per process.
_BUILDING = threading.Lock()

# The lease event columns copied from the updated row (the ids come from the table).
_HISTORY_COPIED = ("lease_owner", "lease_token", "locked_until", "status", "recovery_point")

# The lease event row, one statement for every table.
_HISTORY_INSERT = lease_events.insert()


def param(name: str, column: sa.ColumnElement[Any]) -> sa.BindParameter[Any]:
    """A bound parameter typed like ``column`` (named ``p_…``: SQLAlchemy reserves the
    column names for an UPDATE's own SET parameters)."""
    return sa.bindparam(f"p_{name}", type_=column.type)


def has_ended(status: object) -> bool:
    """Whether a record's ``status`` says its operation is over (not parked, not in work)."""
    return status not in (PROCESSING, NEEDS_ATTENTION)


class LeaseColumns(Generic[R]):
    """Every lease write, as one fenced UPDATE on ``table``."""

    table: sa.Table

    def __init__(self, connection: sa.Connection, carried: CarriedCalls | None = None) -> None:
        self._conn = connection
        # The unit of work's provider-call rows for its next prebuilt UPDATE, if it
        # carries any (``carried_calls``).
        self._carried = carried

    # -- what a table says about itself ---------------------------------------------------

    def _to_record(self, row: Any) -> R:
        raise NotImplementedError

    def _history_ids(self, record: R) -> dict[str, str | None]:
        """``payment_id`` (and ``operation_id``) of the lease history row."""
        raise NotImplementedError

    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        """``_history_ids`` in SQL, from the columns of the row an UPDATE returned."""
        raise NotImplementedError

    def _parkable(self) -> sa.ColumnElement[bool]:
        """Where a park may start: processing, not finished."""
        raise NotImplementedError

    def _retryable(self) -> sa.ColumnElement[bool]:
        """Where an operator's retry may start: needs_attention, not finished."""
        raise NotImplementedError

    def _claim_values(self, now: sa.ColumnElement[datetime]) -> dict[str, Any]:
        """Columns of this table a claim also sets (in the claim's one statement); ``now``
        is the claim's bound instant."""
        return {}

    # -- the fenced write -----------------------------------------------------------------

    def _update_one(
        self, history: str | None, where: sa.ColumnElement[bool], **values: Any
    ) -> R | None:
        """One fenced UPDATE; ``history`` names the lease event to record (None: none)."""
        row = self._conn.execute(
            self.table.update().where(where).values(**values).returning(*self.table.c)
        ).first()
        if row is None:
            return None
        record = self._to_record(row)
        if history is not None:
            self._record_history(record, history)
        return record

    def _prebuilt(
        self,
        name: str,
        build: Callable[[], tuple[sa.ColumnElement[bool], dict[str, Any]]],
    ) -> sa.Update:
        """The statement ``name`` of this table, built once from ``build``'s WHERE and SET
        (every value in them a bound parameter, see ``param``)."""
        key = (self.table.name, name)
        statement = _PREBUILT.get(key)
        if statement is None:
            with _BUILDING:
                statement = _PREBUILT.get(key)
                if statement is None:
                    where, values = build()
                    statement = self.table.update().where(where).values(**values)
                    statement = statement.returning(*self.table.c)
                    _PREBUILT[key] = statement
        return statement

    def _update_prebuilt(
        self, history: str | None, statement: sa.Update, params: dict[str, Any]
    ) -> R | None:
        """``_update_one`` for a prebuilt statement and its parameters (on psycopg itself on
        PostgreSQL: ``orchestrator.db.prebuilt``)."""
        if history is not None and self._conn.dialect.name == "postgresql":
            row = prebuilt.first(
                self._conn, self._with_history(statement), {**params, "p_event": history}
            )
            return None if row is None else self._to_record(row)
        carrier = self._carried
        if carrier is not None and carrier.armed:
            # The held provider-call rows ride in this statement (``carried_calls``).
            count, calls = carrier.take()
            composed = self._with_calls(statement, count)
            row = prebuilt.first(self._conn, composed, {**params, **calls})
            carrier.written = True
        else:
            row = prebuilt.first(self._conn, statement, params)
        if row is None:
            return None
        record = self._to_record(row)
        if history is not None:
            self._record_history(record, history)
        return record

    def _with_calls(self, statement: sa.Update, count: int) -> sa.Update:
        """``statement`` that also inserts ``count`` provider-call rows (a CTE, see
        ``carried_calls``).  PostgreSQL only: the carrier is armed only there."""
        key = (id(statement), count)
        entry = _PREBUILT_WITH_CALLS.get(key)
        if entry is None:
            with _BUILDING:
                entry = _PREBUILT_WITH_CALLS.get(key)
                if entry is None:
                    composed = statement.add_cte(carried_calls.rows_cte(count))
                    entry = _PREBUILT_WITH_CALLS[key] = (statement, composed)
        return entry[1]

    def _with_history(self, statement: sa.Update) -> sa.Select[Any]:
        """``statement`` (a prebuilt ``UPDATE … RETURNING``) that also writes its lease
        event row, as a data-modifying CTE::

            WITH u AS (UPDATE … RETURNING *),
                 h AS (INSERT INTO lease_events SELECT … FROM u)
            SELECT * FROM u

        One statement, so the event still commits or rolls back with the change, and a
        fenced UPDATE (no row) writes no event; it saves the INSERT's round trip.  The
        event's name is the parameter ``p_event``.  PostgreSQL only (SQLite has no DML in
        a WITH): there ``_record_history`` writes the row."""
        entry = _PREBUILT_WITH_HISTORY.get(id(statement))
        if entry is None:
            with _BUILDING:
                entry = _PREBUILT_WITH_HISTORY.get(id(statement)) or self._build_with_history(
                    statement
                )
        return entry[1]

    def _build_with_history(self, statement: sa.Update) -> tuple[sa.Update, sa.Select[Any]]:
        """Build and cache ``_with_history``'s statement (under ``_BUILDING``)."""
        # One-letter names: the statement names every column twice, once per reference to
        # the CTE, and the claim's came to just over 4,096 bytes with "updated": psycopg
        # converts a statement longer than that anew on every execution (its cache's
        # limit), CPU the worker pays on every claim.
        # tests/integration/test_worker_protocol_service.py keeps every statement of a
        # payment under that limit.
        updated = statement.cte("u")
        columns: dict[str, sa.ColumnElement[Any]] = {
            **self._history_id_columns(updated),
            "event": sa.bindparam("p_event", type_=lease_events.c.event.type),
            **{name: updated.c[name] for name in _HISTORY_COPIED},
            "created_at": updated.c.updated_at,
        }
        names = ["owner" if name == "lease_owner" else name for name in columns]
        history = lease_events.insert().from_select(names, sa.select(*columns.values()))
        with_history = sa.select(*updated.c).add_cte(history.cte("h"))
        entry = _PREBUILT_WITH_HISTORY[id(statement)] = (statement, with_history)
        return entry

    def _record_history(self, record: R, event: str) -> None:
        """The lease history row, in the same transaction as the change it describes: it
        commits or rolls back with it, so the history never shows a change that did not
        happen (a fenced-out finish leaves no ``finish`` row)."""
        ids = self._history_ids(record)
        prebuilt.execute(
            self._conn,
            _HISTORY_INSERT,
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
        """Ours, and still being worked on."""
        c = self.table.c
        return sa.and_(c.id == record_id, c.lease_token == token, c.status == PROCESSING)

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
        c = self.table.c

        def build() -> tuple[sa.ColumnElement[bool], dict[str, Any]]:
            at = param("now", c.updated_at)
            where = sa.and_(
                c.id == param("id", c.id),
                c.status == PROCESSING,
                sa.or_(c.lease_token == param("carried", c.lease_token), c.locked_until <= at),
                sa.or_(c.next_attempt_at.is_(None), c.next_attempt_at <= at),
            )
            values = {
                "lease_token": c.lease_token + 1,
                "lease_owner": param("owner", c.lease_owner),
                "locked_until": param("until", c.locked_until),
                "next_attempt_at": None,
                "attempts": c.attempts + 1,
                "updated_at": at,
                **self._claim_values(at),
            }
            return where, values

        return self._update_prebuilt(
            "claim",
            self._prebuilt("claim", build),
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
        return self._update_one(None, self._held(record_id, token), locked_until=lease_until)

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
        row = self._conn.execute(
            sa.select(self.table).where(
                c.id == record_id,
                c.lease_token == token,
                c.status.not_in((PROCESSING, NEEDS_ATTENTION)),
            )
        ).first()
        return None if row is None else self._to_record(row)

    # -- takeover (sweeper and operator) ----------------------------------------------------

    def lock_due(self, *, now: datetime, limit: int) -> list[R]:
        """Unfinished records whose lease expired or whose deferral is due, oldest first,
        row-locked with ``FOR UPDATE SKIP LOCKED`` so two sweepers never take the same row.
        (SQLite has no row locks and SQLAlchemy drops the clause there; the fenced
        conditional UPDATE in ``take_over`` is what keeps it safe.)"""
        c = self.table.c
        query = (
            sa.select(self.table)
            .where(c.status == PROCESSING, c.locked_until <= now)
            .order_by(c.locked_until)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [self._to_record(r) for r in self._conn.execute(query)]

    def lock_for_takeover(self, record_id: str) -> R | None:
        """The record, row-locked (waits for a concurrent takeover to commit)."""
        row = self._conn.execute(
            sa.select(self.table).where(self.table.c.id == record_id).with_for_update()
        ).first()
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
        return [self._to_record(r) for r in self._conn.execute(query.limit(limit))]
