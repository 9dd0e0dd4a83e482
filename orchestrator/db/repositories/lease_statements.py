"""The lease statements, by name: what a worker sends to claim, renew and write under a lease.

Every write under a lease is one ``UPDATE … RETURNING`` on the leased table (``payments``
or ``operations``) fenced by the lease token.  The functions below build them; the
repositories (``lease_repository_base``, ``leases``, ``operations``) run them, the hot
ones built once and run prepared (``prebuilt_update``, ``db.postgres_session``).  The SQL
PostgreSQL receives, for a payment (``%(p_…)s`` are the bound parameters; the constants shown inline
are bound parameters too, and the casts are left out; SET lists are in the table's column
order, and every UPDATE returns every column of its row)::

    claim           UPDATE payments SET lease_token=(payments.lease_token + 1),
                        lease_owner=%(p_owner)s, locked_until=%(p_until)s,
                        next_attempt_at=NULL, attempts=(payments.attempts + 1),
                        first_create_at=CASE WHEN (<creating>)
                            THEN coalesce(payments.first_create_at, %(p_now)s)
                            ELSE payments.first_create_at END,
                        last_create_at=CASE WHEN (<creating>)
                            THEN %(p_now)s ELSE payments.last_create_at END,
                        woken_at=NULL, updated_at=%(p_now)s
                    WHERE payments.id = %(p_id)s AND payments.status = 'processing'
                      AND (payments.lease_token = %(p_carried)s
                           OR payments.locked_until <= %(p_now)s)
                      AND (payments.next_attempt_at IS NULL
                           OR payments.next_attempt_at <= %(p_now)s)
                    RETURNING payments.id, payments.client_id, …
                    -- <creating>: payments.recovery_point = 'accepted'
                    --             AND payments.lookup_pending IS false
                    -- first_create_at, last_create_at, woken_at: ``payment_claim_sets``;
                    -- an operation's claim sets only the lease columns

    held            payments.id = %(id_1)s AND payments.lease_token = %(lease_token_1)s
                    AND payments.status = 'processing'        -- the fenced WHERE

    renewal         UPDATE payments SET locked_until=%(locked_until)s WHERE <held>
                    RETURNING …

    fenced_update   UPDATE payments SET <values> WHERE <held, or a guard naming the
                    token> RETURNING …                         -- every other lease write

    intent_created  UPDATE payments SET recovery_point='intent_created',
                        [locked_until=%(p_until)s,
                         confirm_attempts=(payments.confirm_attempts + 1),]  -- confirm
                        provider_payment_id=%(p_intent)s, lookup_pending=false,
                        lookup_cursor=NULL, lookup_pages=0, updated_at=%(p_now)s
                    WHERE payments.id = %(p_id)s AND payments.lease_token = %(p_token)s
                      AND <payment_guard(INTENT_CREATED)> RETURNING …

    settlement      UPDATE payments SET recovery_point='provider_settled',
                        provider_payment_id=coalesce(%(p_intent)s,
                                                     payments.provider_payment_id),
                        provider_charge_id=%(p_charge)s, provider_outcome=%(p_outcome)s,
                        failure_code=…, decline_code=…, failure_message=…,
                        settled_amount=…, settled_currency=…, waiting_for=NULL,
                        waiting_since=NULL, next_action=NULL, client_secret=NULL,
                        updated_at=%(p_now)s
                    WHERE … AND <payment_guard(PROVIDER_SETTLED)> RETURNING …

    payment_finish  UPDATE payments SET response_body=%(p_body)s,
                        final_response=%(p_final)s, amount_capturable=%(p_capturable)s,
                        status=%(p_status)s, recovery_point='completed',
                        lease_owner=NULL, locked_until=NULL, next_attempt_at=NULL,
                        waiting_for=NULL, waiting_since=NULL, next_action=NULL,
                        client_secret=NULL, amount_captured=%(p_captured)s,
                        latest_event_sequence=coalesce(%(p_sequence)s,
                                                       payments.latest_event_sequence),
                        updated_at=%(p_now)s, completed_at=%(p_completed)s
                    WHERE … AND <payment_guard(FINISHED)> RETURNING …

    payment_guard   payments.status = <status> AND (payments.recovery_point = <point>
                    OR …)                      -- ``domain.states.allowed_sources(event)``

and two riders that add a second statement's work to the same round trip (PostgreSQL;
SQLite has no data-modifying CTE, and there the repository writes those rows itself)::

    with_history    WITH u AS (<update>), h AS (INSERT INTO lease_events (…)
                                            SELECT …, %(p_event)s, … FROM u)
                    SELECT u.id, u.client_id, … FROM u

    with_calls      WITH c AS (INSERT INTO provider_calls … VALUES (…), (…))
                    <update>                                   -- ``carried_calls``

The lease token is a fencing token: it only grows, every claim or takeover bumps it, and
every later write says ``WHERE lease_token = :mine``.  A holder that was taken over (a
paused VM, a GC stall, a partitioned worker) finds zero rows and must stop; it can never
overwrite the new holder's work, whatever its clock says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.repositories import carried_calls
from orchestrator.db.tables import lease_events, payments
from orchestrator.domain.lease_state import PROCESSING
from orchestrator.domain.states import Event, RecoveryPoint, allowed_sources

# The hot statements (a charge's every step), built once per table and name with bound
# parameters (``prebuilt_update``).  Building an ``UPDATE … RETURNING`` per call, with its
# values as literals, cost more CPU than executing it: SQLAlchemy's coercions and cache
# key over every value.  A prebuilt statement's cache key is computed once (it is memoized
# on the object), its compiled form is SQLAlchemy's cached one, and psycopg prepares it
# server-side after a few uses per connection.
_PREBUILT: dict[tuple[str, str], sa.Update] = {}

# The same statements with their lease event row written by the statement itself, on
# PostgreSQL (``with_history``): one round trip instead of two.  Keyed by the UPDATE's
# identity; each entry keeps its UPDATE alive, so an id is never reused while its entry
# exists.
_PREBUILT_WITH_HISTORY: dict[int, tuple[sa.Update, sa.Select[Any]]] = {}

# The same statements carrying provider-call rows (``with_calls``), keyed by the UPDATE's
# identity and the number of rows; each entry keeps its UPDATE alive.
_PREBUILT_WITH_CALLS: dict[tuple[int, int], tuple[sa.Update, sa.Update]] = {}

# Held while one of the caches above is filled.  A worker starts with every thread
# claiming at once: without it, each thread built its own copy of every statement (and
# ``db.compiled`` compiled each copy, keyed by its identity), a visible share of a whole
# run's CPU.  Reads take no lock; a build happens once per process.
_BUILDING = threading.Lock()

# The lease event columns copied from the updated row (the ids come from the table).
_HISTORY_COPIED = ("lease_owner", "lease_token", "locked_until", "status", "recovery_point")

# The lease event row, one statement for every table (where ``with_history`` cannot ride).
HISTORY_INSERT = prepare_once(lease_events.insert())


def param(name: str, column: sa.ColumnElement[Any]) -> sa.BindParameter[Any]:
    """A bound parameter typed like ``column`` (named ``p_…``: SQLAlchemy reserves the
    column names for an UPDATE's own SET parameters)."""
    return sa.bindparam(f"p_{name}", type_=column.type)


# -- the fenced write ---------------------------------------------------------------------


def held(table: sa.Table, record_id: str, token: int) -> sa.ColumnElement[bool]:
    """The fenced WHERE: the row is ours (``token``) and still being worked on."""
    c = table.c
    return sa.and_(c.id == record_id, c.lease_token == token, c.status == PROCESSING)


def fenced_update(
    table: sa.Table, where: sa.ColumnElement[bool], values: dict[str, Any]
) -> sa.Update:
    """``UPDATE table SET values WHERE where RETURNING *``: one write under a lease (its
    values inline; the hot ones are prebuilt, see ``prebuilt_update``)."""
    return table.update().where(where).values(**values).returning(*table.c)


def renewal(table: sa.Table, record_id: str, token: int, lease_until: datetime) -> sa.Update:
    """Extend our lease: ``SET locked_until`` where ``held``.  A heartbeat, not a change:
    ``updated_at`` stays as it is."""
    return fenced_update(table, held(table, record_id, token), {"locked_until": lease_until})


# -- the claim ----------------------------------------------------------------------------


def claim(
    table: sa.Table, also_sets: Callable[[sa.ColumnElement[datetime]], dict[str, Any]]
) -> sa.Update:
    """Take the lease if it is ours to take (the token the task carries, or an expired
    lease) and the record is due; bump the fencing token and count the attempt.
    ``also_sets(now)``: the table's own columns the claim sets (``payment_claim_sets``).
    Parameters: ``p_id``, ``p_carried``, ``p_owner``, ``p_until``, ``p_now``."""
    c = table.c
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
        **also_sets(at),
    }
    return fenced_update(table, where, values)


def payment_claim_sets(now: sa.ColumnElement[datetime]) -> dict[str, Any]:
    """What a payment's claim also sets.

    A wake-up that arrives from now on, while we hold the lease, is kept in ``woken_at``
    so that our own wait (``LeaseRepository.wait``) ends at once instead of at the
    re-check.  A claim of a payment whose next step is a create (accepted, no lookup owed)
    also stamps the create attempt, as ``renew_for_create`` would: the claim is then the
    write committed before that create, and the run's first create needs no transaction
    of its own (``engine.kinds.charge``).  A run that ends before sending it (parked,
    deferred) only widened the lookup's window: safe."""
    c = payments.c
    creating = sa.and_(
        c.recovery_point == RecoveryPoint.ACCEPTED.value, c.lookup_pending.is_(False)
    )
    return {
        "woken_at": None,
        "first_create_at": sa.case(
            (creating, sa.func.coalesce(c.first_create_at, now)), else_=c.first_create_at
        ),
        "last_create_at": sa.case((creating, now), else_=c.last_create_at),
    }


# -- built once ---------------------------------------------------------------------------


def prebuilt_update(table: sa.Table, name: str, build: Callable[[], sa.Update]) -> sa.Update:
    """The statement ``name`` of ``table``, built once from ``build`` (every value in it a
    bound parameter, see ``param``) and kept for the process."""
    key = (table.name, name)
    statement = _PREBUILT.get(key)
    if statement is None:
        with _BUILDING:
            statement = _PREBUILT.get(key)
            if statement is None:
                statement = _PREBUILT[key] = prepare_once(build())
    return statement


def with_history(
    statement: sa.Update, id_columns: Callable[[sa.CTE], dict[str, sa.ColumnElement[Any]]]
) -> sa.Select[Any]:
    """``statement`` (a prebuilt ``UPDATE … RETURNING``) that also writes its lease event
    row, as a data-modifying CTE (the SQL is at the top of this module).

    One statement, so the event still commits or rolls back with the change, and a fenced
    UPDATE (no row) writes no event; it saves the INSERT's round trip.  The event's name
    is the parameter ``p_event``; ``id_columns(u)`` are the event's ``payment_id`` and
    ``operation_id`` from the updated row.  PostgreSQL only (SQLite has no DML in a WITH):
    there the repository writes the row (``HISTORY_INSERT``)."""
    entry = _PREBUILT_WITH_HISTORY.get(id(statement))
    if entry is None:
        with _BUILDING:
            entry = _PREBUILT_WITH_HISTORY.get(id(statement))
            if entry is None:
                entry = _PREBUILT_WITH_HISTORY[id(statement)] = (
                    statement,
                    _build_with_history(statement, id_columns),
                )
    return entry[1]


def _build_with_history(
    statement: sa.Update, id_columns: Callable[[sa.CTE], dict[str, sa.ColumnElement[Any]]]
) -> sa.Select[Any]:
    # One-letter names: the statement names every column twice, once per reference to
    # the CTE, and the claim's came to just over 4,096 bytes with "updated": psycopg
    # converts a statement longer than that anew on every execution (its cache's
    # limit), CPU the worker pays on every claim.
    # tests/integration/test_worker_protocol_service.py keeps every statement of a
    # payment under that limit.
    updated = statement.cte("u")
    columns: dict[str, sa.ColumnElement[Any]] = {
        **id_columns(updated),
        "event": sa.bindparam("p_event", type_=lease_events.c.event.type),
        **{name: updated.c[name] for name in _HISTORY_COPIED},
        "created_at": updated.c.updated_at,
    }
    names = ["owner" if name == "lease_owner" else name for name in columns]
    history = lease_events.insert().from_select(names, sa.select(*columns.values()))
    return prepare_once(sa.select(*updated.c).add_cte(history.cte("h")))


def with_calls(statement: sa.Update, count: int) -> sa.Update:
    """``statement`` that also inserts ``count`` provider-call rows (a CTE, see
    ``carried_calls``).  PostgreSQL only: the carrier is armed only there."""
    key = (id(statement), count)
    entry = _PREBUILT_WITH_CALLS.get(key)
    if entry is None:
        with _BUILDING:
            entry = _PREBUILT_WITH_CALLS.get(key)
            if entry is None:
                composed = prepare_once(statement.add_cte(carried_calls.rows_cte(count)))
                entry = _PREBUILT_WITH_CALLS[key] = (statement, composed)
    return entry[1]


# -- the charge's own writes (a payment's every step after the claim) ---------------------


def payment_guard(event: Event) -> sa.ColumnElement[bool]:
    """The state machine's source states for ``event`` (``domain.states``), as SQL."""
    c = payments.c
    status, points = allowed_sources(event)
    # ``=`` joined by OR, not ``IN (…)``: an IN list of literals is an expanding parameter,
    # rendered per execution, which a prebuilt statement cannot be (``db.compiled``).
    point = sa.or_(*(c.recovery_point == p.value for p in points))
    return sa.and_(c.status == status.value, point)


def intent_created(*, confirm: bool) -> sa.Update:
    """Store the created intent: ``SET provider_payment_id = :p_intent, recovery_point =
    'intent_created'``, the lookup's state cleared, where the token is ``p_token`` and the
    state machine allows it.  ``confirm``: also the confirm's renewal (``locked_until =
    :p_until``, ``confirm_attempts + 1``).  Parameters: ``p_id``, ``p_token``,
    ``p_intent``, ``p_now`` (and ``p_until``)."""
    c = payments.c
    where = sa.and_(
        c.id == param("id", c.id),
        c.lease_token == param("token", c.lease_token),
        payment_guard(Event.INTENT_CREATED),
    )
    values: dict[str, Any] = {
        "provider_payment_id": param("intent", c.provider_payment_id),
        "recovery_point": RecoveryPoint.INTENT_CREATED.value,
        "lookup_pending": False,
        "lookup_cursor": None,
        "lookup_pages": 0,
        "updated_at": param("now", c.updated_at),
    }
    if confirm:
        values["locked_until"] = param("until", c.locked_until)
        values["confirm_attempts"] = c.confirm_attempts + 1
    return fenced_update(payments, where, values)


def settlement() -> sa.Update:
    """Store what the provider settled (``recovery_point = 'provider_settled'``, the
    outcome, its ids and failure, the wait over) where the token is ``p_token`` and the
    state machine allows it.  Parameters: ``p_id``, ``p_token``, ``p_outcome``,
    ``p_intent``, ``p_charge``, ``p_failure_code``, ``p_decline_code``,
    ``p_failure_message``, ``p_settled_amount``, ``p_settled_currency``, ``p_now``."""
    c = payments.c
    where = sa.and_(
        c.id == param("id", c.id),
        c.lease_token == param("token", c.lease_token),
        payment_guard(Event.PROVIDER_SETTLED),
    )
    values = {
        "recovery_point": RecoveryPoint.PROVIDER_SETTLED.value,
        "provider_outcome": param("outcome", c.provider_outcome),
        "provider_payment_id": sa.func.coalesce(
            param("intent", c.provider_payment_id), c.provider_payment_id
        ),
        "provider_charge_id": param("charge", c.provider_charge_id),
        "failure_code": param("failure_code", c.failure_code),
        "decline_code": param("decline_code", c.decline_code),
        "failure_message": param("failure_message", c.failure_message),
        "settled_amount": param("settled_amount", c.settled_amount),
        "settled_currency": param("settled_currency", c.settled_currency),
        # The wait, if any, is over.
        "waiting_for": None,
        "waiting_since": None,
        "next_action": None,
        "client_secret": None,
        "updated_at": param("now", c.updated_at),
    }
    return fenced_update(payments, where, values)


def payment_finish() -> sa.Update:
    """End the charge (``recovery_point = 'completed'``, its final status and answer, the
    lease released) where the token is ``p_token`` and the state machine allows it.
    ``latest_event_sequence`` becomes ``p_sequence`` unless that is NULL.  Parameters:
    ``p_id``, ``p_token``, ``p_status``, ``p_body``, ``p_final``, ``p_captured``,
    ``p_capturable``, ``p_completed``, ``p_now``, ``p_sequence``."""
    c = payments.c
    at = param("now", c.updated_at)
    where = sa.and_(
        c.id == param("id", c.id),
        c.lease_token == param("token", c.lease_token),
        payment_guard(Event.FINISHED),
    )
    values = {
        "status": param("status", c.status),
        "recovery_point": RecoveryPoint.COMPLETED.value,
        "response_body": param("body", c.response_body),
        "final_response": param("final", c.final_response),
        "amount_captured": param("captured", c.amount_captured),
        "amount_capturable": param("capturable", c.amount_capturable),
        "lease_owner": None,
        "locked_until": None,
        "next_attempt_at": None,
        "waiting_for": None,
        "waiting_since": None,
        "next_action": None,
        "client_secret": None,
        "completed_at": param("completed", c.completed_at),
        "updated_at": at,
        "latest_event_sequence": sa.func.coalesce(
            param("sequence", c.latest_event_sequence), c.latest_event_sequence
        ),
    }
    return fenced_update(payments, where, values)
