"""Payment records: the idempotent claim and the reads behind the API."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.compiled import prepare_once
from orchestrator.db.repositories.clients import client_by_active_key
from orchestrator.db.repositories.rows import to_payment
from orchestrator.db.session import Session
from orchestrator.db.tables import payments
from orchestrator.db.wake import WAKE_CHANNEL
from orchestrator.domain.model import PaymentRecord, Role
from orchestrator.domain.states import FINAL_STATUSES, PaymentStatus, WaitingFor


@functools.cache
def _insert_if_absent(dialect: str, columns: tuple[str, ...], wake: bool) -> sa.Executable:
    """The claim's statement, built once per dialect and column set, with its values as bound
    parameters.  Building it per call (``.values(**values)``: ~30 coerced literals and their
    cache key) cost a large share of the accept's CPU.

    It returns the inserted id only: the caller built every value of the row, so reading
    them back (30 columns: psycopg's column descriptions and the row's conversion) was a
    sizeable share of the accept's CPU for nothing.

    ``wake`` (PostgreSQL): the same statement also sends ``pg_notify`` for the row it
    inserted.  A NOTIFY is delivered only when its transaction commits, so a listener never
    hears of a payment that is not there; a key already taken inserts no row and notifies
    nothing."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    claim = (
        insert(payments)
        .values({name: sa.bindparam(name, type_=payments.c[name].type) for name in columns})
        .on_conflict_do_nothing(index_elements=["client_id", "idempotency_key"])
        .returning(payments.c.id, payments.c.lease_token)
    )
    if not wake:
        return prepare_once(claim)
    claimed = claim.cte("claimed")
    notify = sa.func.pg_notify(
        sa.literal(WAKE_CHANNEL),
        claimed.c.id + sa.literal(":") + sa.cast(claimed.c.lease_token, sa.Text),
    )
    return prepare_once(sa.select(claimed.c.id, notify.label("payorch_wake")))


@functools.cache
def authenticated_claim_statement(columns: tuple[str, ...], wake: bool) -> sa.Executable:
    """PostgreSQL: the accept's authentication and claim in one statement, one round trip.

    It reads the client by its active key ``:key_hash`` and inserts the payment
    (``INSERT … SELECT … ON CONFLICT DO NOTHING``, ``client_id`` taken from that row) only
    when the client is an active merchant without a default connector account or a routing
    configuration (its payments run on the platform's Stripe account:
    ``connector_account_id`` and ``route`` stay NULL); ``wake`` adds the
    claim's ``pg_notify``, as ``_insert_if_absent``.
    It returns the client's row (none: no such key) and ``claimed_rows``: 1 when the
    payment was inserted, 0 when the key was taken or the client may not create payments.

    The caller still decides, from the client's row, between 401, 403 and the claim (a
    revoked or non-merchant client inserts nothing), so the answers are the separate
    read's and claim's; only the round trips and the checkouts are halved."""
    client = client_by_active_key().cte("client")
    source = sa.select(
        *(
            client.c.id if name == "client_id" else sa.bindparam(name, type_=payments.c[name].type)
            for name in columns
        )
    ).where(
        client.c.role == Role.MERCHANT.value,
        client.c.revoked_at.is_(None),
        # A merchant with a default connector account or a routing configuration takes
        # the thread path, which stores the account and the route with the payment
        # (services.routing; decisions 0062, 0076): both are columns of the row this
        # statement reads anyway, so a merchant with neither pays no routing read.
        client.c.default_connector_account_id.is_(None),
        client.c.routing_version.is_(None),
    )
    claimed = (
        postgresql.insert(payments)
        .from_select(list(columns), source)
        .on_conflict_do_nothing(index_elements=["client_id", "idempotency_key"])
        .returning(payments.c.id, payments.c.lease_token)
        .cte("claimed")
    )
    counted: sa.CTE = claimed
    if wake:
        # A CTE's SELECT runs only when referenced: the count below references it.
        notify = sa.func.pg_notify(
            sa.literal(WAKE_CHANNEL),
            claimed.c.id + sa.literal(":") + sa.cast(claimed.c.lease_token, sa.Text),
        )
        counted = sa.select(claimed.c.id, notify.label("payorch_wake")).cte("woken")
    claimed_rows = sa.select(sa.func.count()).select_from(counted).scalar_subquery()
    return prepare_once(sa.select(*client.c, claimed_rows.label("claimed_rows")))


def _with_latest_event_sequence() -> sa.Select[Any]:
    """The payment, with the sequence of its newest merchant event (a column of the row
    since migration 0017; it was a ``max`` over the events)."""
    return sa.select(payments)


# The replay's read (every duplicate POST): built once, with bound parameters.
# The record holding a client's key (also run on the API's event loop: accept_claims).
BY_KEY = prepare_once(
    _with_latest_event_sequence().where(
        payments.c.client_id == sa.bindparam("client_id"),
        payments.c.idempotency_key == sa.bindparam("idempotency_key"),
    )
)

# The worker's read before a task's span starts, when its message carried no trace context.
_TRACEPARENT = prepare_once(
    sa.select(payments.c.traceparent).where(payments.c.id == sa.bindparam("payment_id"))
)


class PaymentRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def insert_if_absent(self, values: dict[str, Any], *, wake: bool = False) -> bool:
        """``INSERT … ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING id``;
        False when the (client, key) pair already exists.  ``wake`` (PostgreSQL only): a
        NOTIFY on ``WAKE_CHANNEL`` (``"<id>:<lease token>"``) for the inserted row, sent at
        commit (see orchestrator.engine.dispatcher).

        Concurrent duplicates wait only for the first inserter's short transaction; they
        never create a second record, and there is no window between a check and an insert
        because there is no check.
        """
        assert not wake or self._db.dialect == "postgresql", "NOTIFY needs PostgreSQL"
        statement = _insert_if_absent(self._db.dialect, tuple(sorted(values)), wake)
        return self._db.one(statement, values) is not None

    def find_by_key(self, client_id: str, idempotency_key: str) -> PaymentRecord | None:
        row = self._db.one(BY_KEY, {"client_id": client_id, "idempotency_key": idempotency_key})
        return None if row is None else to_payment(row)

    def get(self, payment_id: str) -> PaymentRecord | None:
        row = self._db.one(_with_latest_event_sequence().where(payments.c.id == payment_id))
        return None if row is None else to_payment(row)

    def traceparent(self, payment_id: str) -> str | None:
        """The trace context the accept stored with the payment (None: none stored, or no
        such payment): the worker's task span joins it (decision 0102)."""
        row = self._db.one(_TRACEPARENT, {"payment_id": payment_id})
        return None if row is None else row["traceparent"]

    def get_for_client(self, client_id: str, payment_id: str) -> PaymentRecord | None:
        """Scoped read: another client's payment is indistinguishable from a missing one."""
        row = self._db.one(
            _with_latest_event_sequence().where(
                payments.c.id == payment_id, payments.c.client_id == client_id
            )
        )
        return None if row is None else to_payment(row)

    def store_action_result(
        self, payment_id: str, body: dict[str, Any], *, now: datetime
    ) -> PaymentRecord | None:
        """The customer's authentication result, to forward (decision 0073): stored pending
        under the next forward number (its key, durable before any worker sends it), and
        the payment woken.  A payment nobody holds (waiting for the customer) becomes due
        now, claimable under its current token; a holder's run (a re-check in flight) has
        its wait end at once instead (``woken_at``), as a provider event's wake does.  The
        caller holds the row lock and checked the status."""
        c = payments.c
        unheld = c.lease_owner.is_(None)
        row = self._db.one(
            payments.update()
            .where(c.id == payment_id, c.status == PaymentStatus.PROCESSING.value)
            .values(
                action_result=body,
                action_result_attempts=c.action_result_attempts + 1,
                action_result_pending=True,
                next_attempt_at=sa.case((unheld, now), else_=c.next_attempt_at),
                locked_until=sa.case((unheld, now), else_=c.locked_until),
                woken_at=sa.case((unheld, c.woken_at), else_=now),
                updated_at=now,
            )
            .returning(*payments.c)
        )
        return None if row is None else to_payment(row)

    def count_by_status(self) -> dict[str, int]:
        rows = self._db.all(
            sa.select(payments.c.status, sa.func.count().label("count")).group_by(payments.c.status)
        )
        counts = {status.value: 0 for status in PaymentStatus}
        counts.update({row["status"]: int(row["count"]) for row in rows})
        return counts

    def count_unfinished_by_status(self, statuses: tuple[str, ...]) -> dict[str, int]:
        """How many payments have each of ``statuses`` (unfinished ones: each a small set
        read through ``ix_payments_status``, never the table's whole history)."""
        rows = self._db.all(
            sa.select(payments.c.status, sa.func.count().label("count"))
            .where(payments.c.status.in_(statuses))
            .group_by(payments.c.status)
        )
        counts = dict.fromkeys(statuses, 0)
        counts.update({row["status"]: int(row["count"]) for row in rows})
        return counts

    def oldest_processing_created_at(self) -> datetime | None:
        """The oldest payment *processing* as ``payorch status`` counts it: one waiting for
        its customer is shown as requires_action, and its wait is the customer's, not
        ours (``search.status_counts`` leaves it out the same way)."""
        waiting = payments.c.waiting_for
        value = self._db.scalar(
            sa.select(sa.func.min(payments.c.created_at)).where(
                payments.c.status == PaymentStatus.PROCESSING.value,
                # Not ``waiting_for != 'customer'``: that is NULL, so false, for the NULL
                # of a payment waiting for nothing, which would leave every one of them out.
                sa.or_(waiting.is_(None), waiting != WaitingFor.CUSTOMER.value),
            )
        )
        return value if isinstance(value, datetime) else None

    def purge_idempotency_data(self, *, cutoff: datetime, limit: int, now: datetime) -> int:
        """Forget keys, fingerprints and stored responses of payments created AND finished
        before ``cutoff`` (now minus the retention window), one batch at a time.  The
        payment, its outcome, ledger lines and audit rows stay; the key becomes free for a
        new payment.  Unfinished payments keep their key however old: it still protects
        money that may move.  Counting from the finish too means a payment that took hours
        (an outage, an operator retry) keeps its key for a full window after its answer,
        while the merchant may still be retrying it."""
        batch = (
            sa.select(payments.c.id)
            .where(
                payments.c.idempotency_key.is_not(None),
                payments.c.created_at < cutoff,
                payments.c.completed_at < cutoff,
                payments.c.status.in_([s.value for s in FINAL_STATUSES]),
            )
            .order_by(payments.c.created_at)
            .limit(limit)
        )
        if self._db.dialect == "postgresql":
            batch = batch.with_for_update(skip_locked=True)
        result = self._db.execute(
            payments.update()
            .where(payments.c.id.in_(batch.scalar_subquery()))
            .values(
                idempotency_key=None,
                request_fingerprint=None,
                response_body=None,
                accepted_response=None,
                final_response=None,
                key_purged_at=now,
                updated_at=now,
            )
        )
        return result
