"""Webhook deliveries: fan-out from the outbox, leased claims, fenced attempt records.

Named queries, in the order the relay uses them:

* ``fan_out``: outbox rows not yet published (``FOR UPDATE SKIP LOCKED`` of the outbox rows
  only, never of the payments they join), one delivery per subscribed enabled endpoint
  (``ON CONFLICT DO NOTHING`` on (event, endpoint)), then ``published_at`` is set.
* ``claim_due``: pending, due deliveries of enabled endpoints whose lease is free or
  expired, at most one per endpoint and only of endpoints with no attempt in flight
  (``attempt_locked_until``), ``FOR UPDATE SKIP LOCKED``; the lease token is bumped so a
  relay whose lease ran out cannot record over the next holder's attempt.
* ``record_attempt``: the attempt row, and the delivery's new state when the caller still
  holds the lease (compare-and-set on ``lease_token``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.repositories.events import to_event
from orchestrator.db.repositories.webhook_endpoints import to_endpoint
from orchestrator.db.session import Row, Session
from orchestrator.db.tables import (
    outbox_events,
    payments,
    webhook_deliveries,
    webhook_delivery_attempts,
    webhook_endpoints,
)
from orchestrator.domain.event_types import subscribes_to
from orchestrator.domain.webhooks import (
    AttemptOutcome,
    ClaimedDelivery,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    EndpointStatus,
    WebhookEndpoint,
    WebhookStats,
)

d = webhook_deliveries.c
a = webhook_delivery_attempts.c
e = webhook_endpoints.c
o = outbox_events.c
# Attempts shown per delivery (ops): a delivery retried for its whole 72 h window has about
# 150 (orchestrator/events/schedule.py), and all of them should be visible.
MAX_ATTEMPTS_LISTED = 200


def to_delivery(m: Row) -> Delivery:
    return Delivery(
        id=m["id"],
        event_id=m["event_id"],
        endpoint_id=m["endpoint_id"],
        status=DeliveryStatus(m["status"]),
        attempts=m["attempts"],
        next_attempt_at=m["next_attempt_at"],
        window_started_at=m["window_started_at"],
        lease_owner=m["lease_owner"],
        lease_token=m["lease_token"],
        locked_until=m["locked_until"],
        last_status_code=m["last_status_code"],
        last_error=m["last_error"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        delivered_at=m["delivered_at"],
    )


def to_attempt(m: Row) -> DeliveryAttempt:
    return DeliveryAttempt(
        id=m["id"],
        delivery_id=m["delivery_id"],
        attempt=m["attempt"],
        relay=m["relay"],
        lease_token=m["lease_token"],
        outcome=AttemptOutcome(m["outcome"]),
        status_code=m["status_code"],
        latency_ms=m["latency_ms"],
        response_body=m["response_body"],
        error=m["error"],
        started_at=m["started_at"],
        created_at=m["created_at"],
    )


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt as the relay made it, with the delivery state it leads to."""

    outcome: AttemptOutcome
    status_code: int | None
    latency_ms: int
    response_body: str | None
    error: str | None
    started_at: datetime
    new_status: DeliveryStatus
    next_attempt_at: datetime | None


@dataclass(frozen=True)
class DeliveryView:
    delivery: Delivery
    endpoint_url: str
    attempts: list[DeliveryAttempt]


class DeliveryRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    # -- fan-out ------------------------------------------------------------------------

    def fan_out(self, *, limit: int, now: datetime) -> tuple[int, int]:
        """Publish up to ``limit`` outbox rows: (events published, deliveries created)."""
        rows = self._db.all(
            sa.select(
                o.id,
                o.public_id,
                o.payment_id,
                payments.c.client_id,
                o.event_type,
                o.sequence,
                o.payload,
                o.created_at,
            )
            .select_from(outbox_events.join(payments, payments.c.id == o.payment_id))
            .where(o.published_at.is_(None))
            .order_by(o.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=outbox_events)
        )
        if not rows:
            return 0, 0
        events = [to_event(r) for r in rows]
        clients = {event.client_id for event in events}
        endpoints = [
            to_endpoint(r)
            for r in self._db.all(
                sa.select(webhook_endpoints).where(
                    e.client_id.in_(clients),
                    e.status == EndpointStatus.ENABLED.value,
                    e.deleted_at.is_(None),
                )
            )
        ]
        values = [
            self._new_delivery(event.id, endpoint.id, now)
            for event in events
            for endpoint in endpoints
            if endpoint.client_id == event.client_id
            and subscribes_to(endpoint.events, event.event_type)
        ]
        created = self._insert_deliveries(values)
        self._db.execute(
            outbox_events.update()
            .where(o.id.in_([event.id for event in events]))
            .values(published_at=now)
        )
        return len(events), created

    @staticmethod
    def _new_delivery(event_id: int, endpoint_id: str, now: datetime) -> dict[str, Any]:
        return {
            "event_id": event_id,
            "endpoint_id": endpoint_id,
            "status": DeliveryStatus.PENDING.value,
            "attempts": 0,
            "next_attempt_at": now,
            "window_started_at": now,
            "lease_token": 0,
            "created_at": now,
            "updated_at": now,
        }

    def _insert_deliveries(self, values: list[dict[str, Any]]) -> int:
        if not values:
            return 0
        insert = (
            sqlite.insert(webhook_deliveries)
            if self._db.dialect == "sqlite"
            else postgresql.insert(webhook_deliveries)
        )
        # RETURNING counts what was inserted (rowcount of a batch is not reliable).
        inserted = self._db.all(
            insert.on_conflict_do_nothing(index_elements=["event_id", "endpoint_id"]).returning(
                d.id
            ),
            values,
        )
        return len(inserted)

    # -- claim and record ---------------------------------------------------------------

    def claim_due(
        self,
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        now: datetime,
        exclude: Collection[int] = (),
    ) -> list[ClaimedDelivery]:
        """Up to ``limit`` due deliveries, at most one per endpoint, of endpoints with no
        attempt in flight; each claimed delivery's endpoint is leased with it.

        Why the endpoint row is locked and written, not just checked: two relays claiming at
        once would each see the endpoint free.  Locking it (``SKIP LOCKED``) makes the
        second skip it while the first's transaction is open; once the first committed,
        PostgreSQL re-checks the written ``attempt_locked_until`` on the row it locks and
        skips it too.  ``exclude``: deliveries not to take (attempted earlier in the same
        pass)."""
        until = now + timedelta(seconds=lease_seconds)
        endpoint_free = sa.or_(e.attempt_locked_until.is_(None), e.attempt_locked_until <= now)
        due = (
            sa.select(d.id, d.endpoint_id)
            .select_from(webhook_deliveries.join(webhook_endpoints, e.id == d.endpoint_id))
            .where(
                d.status == DeliveryStatus.PENDING.value,
                d.next_attempt_at <= now,
                sa.or_(d.locked_until.is_(None), d.locked_until <= now),
                e.status == EndpointStatus.ENABLED.value,
                e.deleted_at.is_(None),
                endpoint_free,
                d.id.not_in(list(exclude)) if exclude else sa.true(),
            )
            .order_by(d.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True, of=[webhook_deliveries, webhook_endpoints])
        )
        chosen: dict[str, int] = {}
        for row in self._db.all(due):
            chosen.setdefault(row["endpoint_id"], row["id"])
        if not chosen:
            return []
        self._db.execute(
            webhook_endpoints.update()
            .where(e.id.in_(list(chosen)))
            .values(attempt_locked_until=until)
        )
        claimed = [
            to_delivery(r)
            for r in self._db.all(
                webhook_deliveries.update()
                .where(d.id.in_(list(chosen.values())))
                .values(
                    lease_owner=owner,
                    lease_token=d.lease_token + 1,
                    locked_until=until,
                    updated_at=now,
                )
                .returning(*webhook_deliveries.c)
            )
        ]
        if not claimed:
            return []
        event_rows = self._db.all(
            sa.select(
                o.id,
                o.public_id,
                o.payment_id,
                payments.c.client_id,
                o.event_type,
                o.sequence,
                o.payload,
                o.created_at,
            )
            .select_from(outbox_events.join(payments, payments.c.id == o.payment_id))
            .where(o.id.in_({x.event_id for x in claimed}))
        )
        events = {row["id"]: to_event(row) for row in event_rows}
        endpoint_rows = self._db.all(
            sa.select(webhook_endpoints).where(e.id.in_({x.endpoint_id for x in claimed}))
        )
        endpoints: dict[str, WebhookEndpoint] = {
            row["id"]: to_endpoint(row) for row in endpoint_rows
        }
        return [
            ClaimedDelivery(x, events[x.event_id], endpoints[x.endpoint_id], now)
            for x in sorted(claimed, key=lambda x: x.id)
        ]

    def record_attempt(
        self, claimed: Delivery, record: AttemptRecord, *, owner: str, now: datetime
    ) -> bool:
        """The attempt row always (it happened); the delivery's state only while ``owner``
        still holds the lease it claimed.  False when fenced out."""
        self._db.execute(
            webhook_delivery_attempts.insert().values(
                delivery_id=claimed.id,
                attempt=claimed.attempts + 1,
                relay=owner[:200],
                lease_token=claimed.lease_token,
                outcome=record.outcome.value,
                status_code=record.status_code,
                latency_ms=record.latency_ms,
                response_body=record.response_body,
                error=None if record.error is None else record.error[:500],
                started_at=record.started_at,
                created_at=now,
            )
        )
        delivered = record.new_status is DeliveryStatus.DELIVERED
        result = self._db.execute(
            webhook_deliveries.update()
            .where(d.id == claimed.id, d.lease_token == claimed.lease_token)
            .values(
                status=record.new_status.value,
                attempts=d.attempts + 1,
                next_attempt_at=record.next_attempt_at,
                lease_owner=None,
                locked_until=None,
                last_status_code=record.status_code,
                last_error=None if record.error is None else record.error[:500],
                delivered_at=now if delivered else d.delivered_at,
                updated_at=now,
            )
        )
        if result > 0 and claimed.locked_until is not None:
            # Free the endpoint for its next delivery, unless another claim took it since
            # (our lease ran out first): its lease has another expiry.
            self._db.execute(
                webhook_endpoints.update()
                .where(
                    e.id == claimed.endpoint_id,
                    e.attempt_locked_until == claimed.locked_until,
                )
                .values(attempt_locked_until=None)
            )
        return result > 0

    # -- ops ----------------------------------------------------------------------------

    def for_event(self, event_id: int, *, with_attempts: bool = True) -> list[DeliveryView]:
        rows = self._db.all(
            sa.select(webhook_deliveries, e.url.label("endpoint_url"))
            .select_from(webhook_deliveries.join(webhook_endpoints, e.id == d.endpoint_id))
            .where(d.event_id == event_id)
            .order_by(d.id)
        )
        views = []
        for row in rows:
            if not with_attempts:
                views.append(DeliveryView(to_delivery(row), row["endpoint_url"], []))
                continue
            attempts = [
                to_attempt(r)
                for r in self._db.all(
                    sa.select(webhook_delivery_attempts)
                    .where(a.delivery_id == row["id"])
                    .order_by(a.id)
                    .limit(MAX_ATTEMPTS_LISTED)
                )
            ]
            views.append(DeliveryView(to_delivery(row), row["endpoint_url"], attempts))
        return views

    def redeliver_event(
        self, event_id: int, client_id: str, event_type: str, *, now: datetime
    ) -> int:
        """Every delivery of the event due now with a new retry window, and a delivery for
        each enabled subscribed endpoint that has none (registered after the fan-out)."""
        endpoints = [
            to_endpoint(r)
            for r in self._db.all(
                sa.select(webhook_endpoints).where(
                    e.client_id == client_id,
                    e.status == EndpointStatus.ENABLED.value,
                    e.deleted_at.is_(None),
                )
            )
        ]
        self._insert_deliveries(
            [
                self._new_delivery(event_id, endpoint.id, now)
                for endpoint in endpoints
                if subscribes_to(endpoint.events, event_type)
            ]
        )
        result = self._db.execute(
            webhook_deliveries.update()
            .where(d.event_id == event_id, d.endpoint_id.in_([x.id for x in endpoints]))
            .values(
                status=DeliveryStatus.PENDING.value,
                next_attempt_at=now,
                window_started_at=now,
                updated_at=now,
            )
        )
        return max(result, 0)

    def stats(self) -> WebhookStats:
        found = self._db.one(
            sa.select(sa.func.count().label("backlog"), sa.func.min(d.created_at).label("oldest"))
            .select_from(webhook_deliveries.join(webhook_endpoints, e.id == d.endpoint_id))
            .where(
                d.status == DeliveryStatus.PENDING.value,
                e.status == EndpointStatus.ENABLED.value,
                e.deleted_at.is_(None),
            )
        )
        assert found is not None, "an aggregate returns one row"
        backlog, oldest = found["backlog"], found["oldest"]
        disabled = self._db.scalar(
            sa.select(sa.func.count()).where(
                e.status == EndpointStatus.DISABLED.value, e.deleted_at.is_(None)
            )
        )
        return WebhookStats(
            backlog=int(backlog), oldest_pending_created_at=oldest, disabled_endpoints=int(disabled)
        )

    # -- retention ----------------------------------------------------------------------

    def purge_events(self, *, cutoff: datetime, limit: int) -> int:
        """Forget up to ``limit`` events written before ``cutoff`` that were fanned out and
        have no delivery pending to an enabled endpoint: their attempts, deliveries and the
        events themselves.

        A payment's newest event is kept (its attempts go): the next event's ``sequence``
        is one more than the newest one's, and restarting at 1 would make receivers that
        discard stale events discard a real one."""
        # A delivery still owed to a live endpoint keeps its event; one waiting for an endpoint
        # that was disabled or deleted does not keep it forever (re-enabled within the window,
        # it resumes; after it, GET /v1/events has forgotten it too).
        pending = (
            sa.exists()
            .where(d.event_id == o.id, d.status == DeliveryStatus.PENDING.value)
            .where(
                sa.exists().where(
                    e.id == d.endpoint_id,
                    e.status == EndpointStatus.ENABLED.value,
                    e.deleted_at.is_(None),
                )
            )
        )
        later = outbox_events.alias("later")
        newer = sa.exists().where(later.c.payment_id == o.payment_id, later.c.id > o.id)
        ids = [
            row["id"]
            for row in self._db.all(
                sa.select(o.id)
                .where(
                    o.created_at < cutoff,
                    o.published_at.is_not(None),
                    ~pending,
                    sa.or_(newer, sa.exists().where(d.event_id == o.id)),
                )
                .order_by(o.id)
                .limit(limit)
            )
        ]
        if not ids:
            return 0
        delivery_ids = sa.select(d.id).where(d.event_id.in_(ids)).scalar_subquery()
        self._db.execute(webhook_delivery_attempts.delete().where(a.delivery_id.in_(delivery_ids)))
        self._db.execute(webhook_deliveries.delete().where(d.event_id.in_(ids)))
        self._db.execute(outbox_events.delete().where(o.id.in_(ids), newer))
        return len(ids)
